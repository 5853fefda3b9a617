// Activation checkpointing as a policy the engine applies: which modules are checkpointed, where their
// kept inputs live, and what happens at each boundary — from the config's `activation_checkpointing`
// section or from EngineOptions::activation_checkpointing (an embedder's choice, which wins, as
// DeepSpeed's checkpointing.configure() arguments win over the file). The mechanism (keep the input,
// drop activations, replay before backward) is nn::CheckpointSegment (runtime/nn/checkpoint.h).
//
// Memory (docs/engine.md "Activation checkpointing" gives the measured formulas): with L blocks whose
// saved activations are A bytes each and whose input is S bytes, no checkpointing holds L·A at the end of
// forward; n checkpoints hold n·S (and one segment's activations during its replay); cpu_checkpointing
// moves the n·S to host memory (MemCategory::kHostActivations); contiguous_memory_optimization keeps
// them in one buffer of n slots allocated once and held for the run.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/nn/checkpoint.h"
#include "zerorun/runtime/nn/module.h"

namespace zerorun::runtime {

struct ActivationCheckpointingOptions {
  bool enabled = true;  // false: no checkpointing (as EngineOptions, it turns off what the config asks)
  // Which modules are checkpointed. kBlocks: the model's blocks (`blocks`, or when empty the children
  // of the first nn::Sequential in the model, pre-order: a GPT's transformer blocks), cut into
  // `number_checkpoints` consecutive segments (0: one per block). kPredicate: every module for which
  // `predicate` is true is its own checkpoint (selective checkpointing, e.g. attention only:
  // [](const nn::Module& m) { return m.type_name() == "CausalSelfAttention"; }); a selected module's
  // descendants are not considered. Checkpointed modules must have the unary interface (Forward(x)).
  enum class Select { kBlocks, kPredicate };
  Select select = Select::kBlocks;
  std::vector<nn::Module*> blocks;  // kBlocks: the blocks in forward order; empty: found as above
  int64_t number_checkpoints = 0;   // kBlocks: segments (clamped to the number of blocks); 0: every block
  std::function<bool(const nn::Module&)> predicate;  // kPredicate
  // Kept inputs are copied to host memory (pinned host memory for a CUDA tensor; a host-to-host copy on
  // the CPU device), charged to MemCategory::kHostActivations, and copied back before the replay.
  bool cpu_checkpointing = false;
  // Kept inputs are copied into one buffer of one slot per checkpoint (slot size: the first checkpoint's
  // input), allocated at the first forward and held for the engine's lifetime (DeepSpeed's contiguous
  // checkpoint buffer); in host memory with cpu_checkpointing. An input larger than a slot grows the
  // buffer at the next forward and is kept on its own meanwhile.
  bool contiguous_memory_optimization = false;
  // The device stream of the checkpointed input is synchronised at each boundary (forward begin/end,
  // replay begin/end); on the CPU device every operation is complete when it returns, so this only counts.
  bool synchronize_checkpoint_boundary = false;
  // Forward, replay and backward milliseconds per checkpoint, one log line per backward (rank 0).
  bool profile = false;

  // The policy the config asks for: nullopt when the file has no activation_checkpointing section
  // (zerorun models have no checkpoint() calls of their own, so writing the section, even empty, is what
  // turns checkpointing on); partition_activations needs nothing (model-parallel size 1: see
  // config_dispositions.cc).
  static std::optional<ActivationCheckpointingOptions> FromConfig(const Config& config);
};

class ActivationCheckpointer final : public nn::CheckpointHooks {
 public:
  // Applies `options` to `model`: builds and attaches the segments. Throws InvalidArgument when there is
  // nothing to checkpoint (no blocks found, no module selected) or a selection cannot be checkpointed.
  // `log`: this rank writes the profile lines.
  ActivationCheckpointer(nn::Module& model, ActivationCheckpointingOptions options, bool log);
  // Detaches every segment: the model runs without checkpoints again.
  ~ActivationCheckpointer() override;
  ActivationCheckpointer(const ActivationCheckpointer&) = delete;
  ActivationCheckpointer& operator=(const ActivationCheckpointer&) = delete;

  const ActivationCheckpointingOptions& options() const { return options_; }
  int num_checkpoints() const { return static_cast<int>(segments_.size()); }
  // "h.0..h.1, h.2..h.3"
  std::string Describe() const;

  struct SegmentProfile {
    std::string modules;  // "h.0..h.1"
    int64_t forwards = 0, replays = 0, backwards = 0;
    double forward_ms = 0, recompute_ms = 0, backward_ms = 0;  // totals
  };
  std::vector<SegmentProfile> profile() const;
  int64_t boundary_syncs() const { return boundary_syncs_; }
  // Bytes of the contiguous buffer (0 without contiguous_memory_optimization or before the first forward).
  int64_t contiguous_bytes() const;

  // nn::CheckpointHooks.
  Tensor Keep(int index, const Tensor& input) override;
  Tensor Restore(int index, const Tensor& kept) override;
  void At(int index, Phase phase) override;

 private:
  Tensor HostCopy(const Tensor& x);
  void Sync(int index);

  ActivationCheckpointingOptions options_;
  bool log_;
  std::vector<std::shared_ptr<nn::CheckpointSegment>> segments_;
  std::vector<Device> devices_;       // per segment: where its input came from
  std::vector<SegmentProfile> prof_;
  std::vector<double> started_;       // per segment: the current phase's start (seconds)
  int64_t boundary_syncs_ = 0;
  std::shared_ptr<Storage> arena_;    // contiguous_memory_optimization: one slot per segment
  size_t slot_bytes_ = 0;
  size_t wanted_slot_bytes_ = 0;      // the largest input seen (the next forward grows the arena to it)
};

}  // namespace zerorun::runtime
