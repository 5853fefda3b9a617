// The activation-checkpointing policy: segments from blocks or a predicate, host copies, the contiguous
// buffer, boundary synchronisation and the per-checkpoint profile (see activation_checkpointing.h).
#include "zerorun/runtime/activation_checkpointing.h"

#include <algorithm>
#include <cstdio>

#include "zerorun/core/device.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/runtime/nn/sequential.h"

namespace zerorun::runtime {
namespace {

// The children of the first Sequential (pre-order) that has any: the model's repeated blocks.
std::vector<nn::Module*> FindBlocks(nn::Module& model) {
  for (nn::Module* m : model.Modules()) {
    if (dynamic_cast<nn::Sequential*>(m) == nullptr || m->children().empty()) continue;
    std::vector<nn::Module*> blocks;
    for (const auto& [name, child] : m->children()) blocks.push_back(child);
    return blocks;
  }
  return {};
}

// Selected modules, outermost first; a selected module's descendants are skipped.
std::vector<nn::Module*> Select(nn::Module& model, const std::function<bool(const nn::Module&)>& pred) {
  std::vector<nn::Module*> out;
  for (nn::Module* m : model.Modules()) {
    bool inside = false;
    for (nn::Module* a = m->parent(); a != nullptr && !inside; a = a->parent()) {
      inside = std::find(out.begin(), out.end(), a) != out.end();
    }
    if (!inside && pred(*m)) out.push_back(m);
  }
  return out;
}

constexpr size_t kSlotAlign = 256;  // slots of the contiguous buffer start at this alignment

}  // namespace

std::optional<ActivationCheckpointingOptions> ActivationCheckpointingOptions::FromConfig(const Config& config) {
  const Provenance* written = config.ProvenanceOf("activation_checkpointing");
  if (written == nullptr || written->kind == Provenance::Kind::kDefault) return std::nullopt;
  const ActivationCheckpointingConfig& a = config.activation_checkpointing;
  ActivationCheckpointingOptions o;
  o.number_checkpoints = a.number_checkpoints.value_or(0);
  o.cpu_checkpointing = a.cpu_checkpointing;
  o.contiguous_memory_optimization = a.contiguous_memory_optimization;
  o.synchronize_checkpoint_boundary = a.synchronize_checkpoint_boundary;
  o.profile = a.profile;
  return o;
}

ActivationCheckpointer::ActivationCheckpointer(nn::Module& model, ActivationCheckpointingOptions options, bool log)
    : options_(std::move(options)), log_(log) {
  std::vector<std::vector<nn::Module*>> runs;
  if (options_.select == ActivationCheckpointingOptions::Select::kPredicate) {
    if (!options_.predicate) ZR_THROW(InvalidArgument, "activation checkpointing: Select::kPredicate needs a predicate");
    for (nn::Module* m : Select(model, options_.predicate)) runs.push_back({m});
    if (runs.empty()) ZR_THROW(InvalidArgument, "activation checkpointing: the predicate selects no module of {}",
                               model.Describe());
  } else {
    std::vector<nn::Module*> blocks = options_.blocks.empty() ? FindBlocks(model) : options_.blocks;
    if (blocks.empty()) {
      ZR_THROW(InvalidArgument, "activation checkpointing: {} has no nn::Sequential of blocks to checkpoint; pass "
               "ActivationCheckpointingOptions::blocks (or a predicate)", model.Describe());
    }
    if (options_.number_checkpoints < 0) {
      ZR_THROW(InvalidArgument, "activation checkpointing: number_checkpoints must be >= 0, got {}",
               options_.number_checkpoints);
    }
    const int64_t L = static_cast<int64_t>(blocks.size());
    const int64_t n = options_.number_checkpoints == 0 ? L : std::min(options_.number_checkpoints, L);
    for (int64_t j = 0; j < n; ++j) {  // segment j: blocks [j·L/n, (j+1)·L/n)
      runs.emplace_back(blocks.begin() + j * L / n, blocks.begin() + (j + 1) * L / n);
    }
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    auto seg = std::make_shared<nn::CheckpointSegment>(std::move(runs[i]), static_cast<int>(i), this);
    nn::CheckpointSegment::Attach(seg);
    segments_.push_back(std::move(seg));
    prof_.push_back({segments_.back()->Describe()});
  }
  devices_.assign(segments_.size(), Device::CPU());
  started_.assign(segments_.size(), 0.0);
}

ActivationCheckpointer::~ActivationCheckpointer() {
  for (auto& s : segments_) s->Detach();
}

std::string ActivationCheckpointer::Describe() const {
  std::string out;
  for (const auto& s : segments_) out += (out.empty() ? "" : ", ") + s->Describe();
  return out;
}

std::vector<ActivationCheckpointer::SegmentProfile> ActivationCheckpointer::profile() const { return prof_; }

int64_t ActivationCheckpointer::contiguous_bytes() const {
  return arena_ ? static_cast<int64_t>(arena_->bytes()) : 0;
}

Tensor ActivationCheckpointer::HostCopy(const Tensor& x) {
  Tensor t;
  if (x.device().is_cpu()) {
    t = Tensor::Empty(x.shape(), x.dtype(), Device::CPU(), MemCategory::kHostActivations);
  } else {  // page-locked, so the device copies it asynchronously at full speed
    Allocator& pinned = GetDeviceBackend(x.device().type).GetPinnedHostAllocator();
    t = Tensor::FromStorage(Storage::AllocateWith(pinned, x.nbytes(), Device::CPU(), MemCategory::kHostActivations),
                            0, x.shape(), x.dtype());
  }
  t.CopyFrom(x);
  return t;
}

Tensor ActivationCheckpointer::Keep(int index, const Tensor& x) {
  devices_[static_cast<size_t>(index)] = x.device();
  if (!x.defined()) return x;
  if (options_.contiguous_memory_optimization) {
    const size_t need = (x.nbytes() + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    wanted_slot_bytes_ = std::max(wanted_slot_bytes_, need);
    if (index == 0 && (!arena_ || slot_bytes_ < wanted_slot_bytes_)) {
      // First forward, or an input outgrew its slot: one slot per checkpoint, allocated once.
      arena_.reset();
      slot_bytes_ = wanted_slot_bytes_;
      const size_t bytes = slot_bytes_ * segments_.size();
      if (options_.cpu_checkpointing && !x.device().is_cpu()) {
        arena_ = Storage::AllocateWith(GetDeviceBackend(x.device().type).GetPinnedHostAllocator(), bytes,
                                       Device::CPU(), MemCategory::kHostActivations);
      } else {
        arena_ = Storage::Allocate(bytes, options_.cpu_checkpointing ? Device::CPU() : x.device(),
                                   options_.cpu_checkpointing ? MemCategory::kHostActivations
                                                              : MemCategory::kActivations);
      }
    }
    if (arena_ && x.nbytes() <= slot_bytes_) {
      Tensor slot = Tensor::FromStorage(arena_, static_cast<size_t>(index) * slot_bytes_, x.shape(), x.dtype());
      slot.CopyFrom(x);
      return slot;
    }
    // Larger than its slot (the next forward grows the buffer): kept on its own this time.
  }
  return options_.cpu_checkpointing ? HostCopy(x) : x;
}

Tensor ActivationCheckpointer::Restore(int index, const Tensor& kept) {
  const Device dev = devices_[static_cast<size_t>(index)];
  if (!kept.defined() || kept.device() == dev) return kept;
  Tensor t = Tensor::Empty(kept.shape(), kept.dtype(), dev, MemCategory::kActivations);
  t.CopyFrom(kept);
  return t;
}

void ActivationCheckpointer::Sync(int index) {
  if (!options_.synchronize_checkpoint_boundary) return;
  DefaultStream(devices_[static_cast<size_t>(index)]).Synchronize();
  ++boundary_syncs_;
}

void ActivationCheckpointer::At(int index, Phase phase) {
  const size_t i = static_cast<size_t>(index);
  SegmentProfile& p = prof_[i];
  switch (phase) {
    case Phase::kForwardBegin:
      Sync(index);
      started_[i] = NowSeconds();
      break;
    case Phase::kForwardEnd:
      Sync(index);
      p.forward_ms += (NowSeconds() - started_[i]) * 1e3;
      ++p.forwards;
      break;
    case Phase::kRecomputeBegin:
      Sync(index);
      started_[i] = NowSeconds();
      break;
    case Phase::kRecomputeEnd: {
      Sync(index);
      const double now = NowSeconds();
      p.recompute_ms += (now - started_[i]) * 1e3;
      ++p.replays;
      started_[i] = now;
      break;
    }
    case Phase::kBackwardEnd:
      p.backward_ms += (NowSeconds() - started_[i]) * 1e3;
      ++p.backwards;
      // Backward runs the segments last to first: segment 0 ends it.
      if (index == 0 && options_.profile && log_) {
        std::string line;
        for (const SegmentProfile& s : prof_) {
          const double k = s.forwards > 0 ? 1.0 / static_cast<double>(s.forwards) : 0.0;
          const double r = s.replays > 0 ? 1.0 / static_cast<double>(s.replays) : 0.0;
          const double b = s.backwards > 0 ? 1.0 / static_cast<double>(s.backwards) : 0.0;
          char buf[160];
          std::snprintf(buf, sizeof buf, "%s%s: forward %.2f ms, recompute %.2f ms, backward %.2f ms",
                        line.empty() ? "" : "; ", s.modules.c_str(), s.forward_ms * k, s.recompute_ms * r,
                        s.backward_ms * b);
          line += buf;
        }
        ZR_INFO("activation checkpoints (mean per micro-step over {} backward(s)): {}", p.backwards, line);
      }
      break;
  }
}

}  // namespace zerorun::runtime
