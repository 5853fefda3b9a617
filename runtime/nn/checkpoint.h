// Activation checkpointing, the mechanism: a checkpoint segment is one unary module or a run of
// consecutive sibling unary modules that their parent calls in order (blocks h.2, h.3 of a Sequential).
// In a training forward the segment keeps only its input and each module drops what it saved for
// backward as soon as its own forward returns; when backward first reaches a module of the segment,
// the segment's forward is replayed from the kept input inside a RecomputeScope (observer:
// PreForward/PostForward with recompute = true; the subtrees' RNG counters rewound, so dropout masks
// repeat bit for bit) and backward goes on through the replayed activations. The result is bitwise the
// same as without the checkpoint.
//
// What happens to the kept input, and around each boundary, is up to CheckpointHooks (the engine's
// policy, runtime/activation_checkpointing.h, moves it to host memory or into one contiguous buffer,
// synchronises the device and times the phases); without hooks the input itself is kept.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zerorun/core/tensor.h"

namespace zerorun::nn {

class Module;

class CheckpointHooks {
 public:
  enum class Phase {
    kForwardBegin,    // after Keep, before the segment's first module runs forward
    kForwardEnd,      // after its last module's forward returned (its activations dropped)
    kRecomputeBegin,  // backward reached the segment: the replay starts
    kRecomputeEnd,    // the replay is done; backward through the segment follows
    kBackwardEnd,     // backward left the segment (its first module's backward returned)
  };
  virtual ~CheckpointHooks() = default;
  // Forward of segment `index` keeps what this returns for its replay instead of `input` (a copy in host
  // memory, a view of a preallocated buffer, or `input` itself).
  virtual Tensor Keep(int index, const Tensor& input) { return input; }
  // Before the replay: the input to replay from, given what Keep returned (e.g. copied back to the
  // device). `kept` is released when this returns.
  virtual Tensor Restore(int index, const Tensor& kept) { return kept; }
  virtual void At(int index, Phase phase) {}
};

class CheckpointSegment {
 public:
  // `modules`: consecutive siblings in the order their parent runs them forward; none may be inside
  // another module's checkpoint segment (InvalidArgument). `hooks` may be null and must outlive the
  // segment. Attach() installs the segment on its modules; until then it does nothing.
  CheckpointSegment(std::vector<Module*> modules, int index, CheckpointHooks* hooks);
  ~CheckpointSegment();
  CheckpointSegment(const CheckpointSegment&) = delete;
  CheckpointSegment& operator=(const CheckpointSegment&) = delete;

  // Installs `segment` on each of its modules (replacing what they had); Detach removes it again.
  static void Attach(const std::shared_ptr<CheckpointSegment>& segment);
  void Detach();

  int index() const { return index_; }
  const std::vector<Module*>& modules() const { return modules_; }
  // "h.0" or "h.0..h.3".
  std::string Describe() const;
  // Whether an input is kept, awaiting the replay.
  bool holds_input() const { return kept_.defined(); }

 private:
  friend class Module;
  // Module::Forward / Module::Backward of the segment's module at `pos`.
  Tensor Forward(int pos, const Tensor& x);
  Tensor Backward(int pos, const Tensor& dy);
  void Replay();
  void Drop() { kept_ = Tensor(); }

  std::vector<Module*> modules_;
  int index_;
  CheckpointHooks* hooks_;
  std::vector<Module*> subtree_;  // every module of the segment's subtrees (RNG cursors)
  std::vector<uint64_t> rng_;     // their rng_calls() before the forward
  Tensor kept_;
  bool replayed_ = false;         // in this backward
};

}  // namespace zerorun::nn
