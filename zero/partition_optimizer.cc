// PartitionOptimizer: spans, the sub-group loop through the store, Lamb's two passes.
#include "zerorun/zero/partition_optimizer.h"

#include <algorithm>
#include <optional>

#include "zerorun/core/async_copy.h"
#include "zerorun/core/device.h"
#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/trace.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::zero {

PartitionOptimizer::PartitionOptimizer(std::vector<PartitionGroupSpec> groups, UpdateRule& rule,
                                       const PartitionOptimizerOptions& o)
    : groups_(std::move(groups)), rule_(rule), opt_(o) {
  std::vector<StateSlot> slots;
  if (opt_.master_copy) {
    master_slot_ = 0;
    slots.push_back({"master", MemCategory::kMaster});
  } else {
    ZR_CHECK(opt_.param_dtype == DType::kF32, "without a master copy the parameters must be fp32, not {}",
             DTypeName(opt_.param_dtype));
  }
  for (const std::string& name : rule_.StateNames()) slots.push_back({name, MemCategory::kOptimizer});
  std::vector<std::vector<int64_t>> units;
  const size_t gsize = DTypeSize(opt_.grad_dtype);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const PartitionGroupSpec& spec = groups_[g];
    int64_t at = 0, total = 0;
    for (const PartitionSegment& s : spec.segments) {
      ZR_CHECK(s.offset == at && s.numel >= 0, "group {}: segment at {} of {} elements does not follow {}", g,
               s.offset, s.numel, at);
      at += s.numel;
    }
    for (int64_t u : spec.units) total += u;
    ZR_CHECK(at == spec.numel && total == spec.numel, "group {}: segments cover {} and units {} of {} elements", g, at,
             total, spec.numel);
    units.push_back(spec.units);
    // Gradients contiguous across segments are checked and summed as one run (stage 0, stage 2, stage 3
    // and one rank have a single run per group: one kernel call, as without segments).
    std::vector<GradRun> runs;
    for (const PartitionSegment& s : spec.segments) {
      if (s.numel == 0) continue;
      if (!runs.empty() && !s.new_grad_run && static_cast<const char*>(runs.back().grads) + static_cast<size_t>(runs.back().numel) * gsize ==
                               static_cast<const char*>(s.grads)) {
        runs.back().numel += s.numel;
      } else {
        runs.push_back({s.grads, s.numel, s.offset});
      }
    }
    grad_runs_.push_back(std::move(runs));
  }
  StateStoreLayout layout = MakeStateStoreLayout(std::move(slots), units, opt_.sub_group_size);
  store_ = opt_.store_factory ? opt_.store_factory(std::move(layout)) : MakeResidentStateStore(std::move(layout), opt_.device);
  ZR_CHECK(store_ != nullptr, "the state store factory returned no store");
  if (store_->offloaded()) {
    ZR_CHECK(master_slot_ >= 0, "an offloaded state store needs a master copy (the parameters stay on {})",
             opt_.device.ToString());
    ZR_CHECK(opt_.grads_on_host, "an offloaded state store steps on the host: the gradients must be landed there");
    const int64_t n = std::max<int64_t>(1, store_->layout().LargestSubGroupNumel());
    // Pinned through the device's backend (cudaHostAlloc on CUDA), so the copies can be DMA.
    param_stage_ = PinnedHostTensor({n}, opt_.param_dtype, opt_.device);
  }
  if (opt_.shard_store != nullptr && !store_->offloaded() && !opt_.device.is_cpu()) {
    ZR_THROW(ConfigError, "zero_optimization.offload_param on {} needs offload_optimizer too: the parameter shards "
             "are host memory, so the update must run on the host", opt_.device.ToString());
  }
  for (const PartitionGroupSpec& spec : groups_) {
    for (const PartitionSegment& seg : spec.segments) {
      ZR_CHECK(seg.unit < 0 || (opt_.shard_store != nullptr && seg.params == nullptr && master_slot_ >= 0 &&
                                seg.numel == opt_.shard_store->layout().unit_numels.at(static_cast<size_t>(seg.unit))),
               "segment at {}: unit {} needs a shard store holding it, no params pointer and a master copy",
               seg.offset, seg.unit);
    }
  }
}

void* PartitionOptimizer::AcquireParams(const PartitionSegment& seg, int64_t at, StateAccess access) {
  const size_t psize = DTypeSize(opt_.param_dtype);
  char* base = seg.unit >= 0 ? static_cast<char*>(opt_.shard_store->Acquire(seg.unit, access))
                             : static_cast<char*>(seg.params);
  return base + static_cast<size_t>(at - seg.offset) * psize;
}

void PartitionOptimizer::ReleaseParams(const PartitionSegment& seg) {
  if (seg.unit >= 0) opt_.shard_store->Release(seg.unit);
}

void* PartitionOptimizer::SpanParams(int group, const Span& s, bool writes_all) {
  const PartitionSegment& seg = groups_[static_cast<size_t>(group)].segments[s.segment];
  const bool whole = s.offset == seg.offset && s.numel == seg.numel;
  return AcquireParams(seg, s.offset, writes_all && whole ? StateAccess::kOverwrite : StateAccess::kReadWrite);
}

void PartitionOptimizer::SpanDone(int group, const Span& s) {
  ReleaseParams(groups_[static_cast<size_t>(group)].segments[s.segment]);
}

void PartitionOptimizer::StageIn(kernels::OptimSpan* k, bool params_on_host) {
  if (!store_->offloaded() || params_on_host) return;
  ZR_CHECK(k->n <= param_stage_.numel(), "span of {} elements exceeds the staging buffer of {}", k->n,
           param_stage_.numel());
  k->param_copy = param_stage_.data();
}

void PartitionOptimizer::WriteBack(const kernels::OptimSpan& k, void* device_params, bool params_on_host) const {
  if (!store_->offloaded() || params_on_host) return;
  CopyBytes(device_params, opt_.device, param_stage_.data(), Device::CPU(),
            static_cast<size_t>(k.n) * DTypeSize(opt_.param_dtype));
}

std::vector<PartitionOptimizer::Span> PartitionOptimizer::SpansOf(int i, bool by_tensor) const {
  const StateSubGroup& sg = store_->layout().sub_groups[static_cast<size_t>(i)];
  const PartitionGroupSpec& spec = groups_[static_cast<size_t>(sg.group)];
  // Pieces to update: the tensors' (Lamb: padding is never touched) or the whole sub-group.
  std::vector<std::pair<Range, int64_t>> pieces;
  if (by_tensor) {
    for (const TensorPiece& t : spec.tensors) {
      const Range r = Intersect(sg.range, {t.offset, t.offset + t.count});
      if (!r.empty()) pieces.push_back({r, t.tensor_id});
    }
  } else {
    pieces.push_back({sg.range, -1});
  }
  std::vector<Span> out;
  for (const auto& [piece, tensor] : pieces) {
    for (size_t k = 0; k < spec.segments.size(); ++k) {
      const PartitionSegment& seg = spec.segments[k];
      Range r = Intersect(piece, {seg.offset, seg.offset + seg.numel});
      if (r.empty()) continue;
      // Cut at the progress points inside r.
      auto p = std::upper_bound(spec.progress_points.begin(), spec.progress_points.end(), r.begin);
      for (; p != spec.progress_points.end() && *p < r.end; ++p) {
        out.push_back({r.begin, *p - r.begin, k, tensor});
        r.begin = *p;
      }
      out.push_back({r.begin, r.size(), k, tensor});
    }
  }
  return out;
}

kernels::OptimSpan PartitionOptimizer::KernelSpan(int group, const Span& s, const SubGroupState& st,
                                                  float grad_scale, void* params) const {
  const PartitionGroupSpec& spec = groups_[static_cast<size_t>(group)];
  const PartitionSegment& seg = spec.segments[s.segment];
  const int64_t sub_begin = store_->layout().sub_groups[static_cast<size_t>(st.index)].range.begin;
  const int64_t d = s.offset - seg.offset;
  kernels::OptimSpan k;
  k.n = s.numel;
  k.grads = static_cast<const char*>(seg.grads) + static_cast<size_t>(d) * DTypeSize(opt_.grad_dtype);
  k.grad_dtype = opt_.grad_dtype;
  k.grad_scale = grad_scale;
  if (master_slot_ >= 0) {
    k.params = st.slots[static_cast<size_t>(master_slot_)] + (s.offset - sub_begin);
    k.param_copy = params;
    k.copy_dtype = opt_.param_dtype;
  } else {
    k.params = static_cast<float*>(params);  // fp32 training: the parameters are the master
  }
  return k;
}

void PartitionOptimizer::StatePointers(const SubGroupState& st, const Span& s, int64_t sub_begin,
                                       std::vector<float*>* out) const {
  out->clear();
  for (size_t k = 0; k < st.slots.size(); ++k) {
    if (static_cast<int>(k) != master_slot_) out->push_back(st.slots[k] + (s.offset - sub_begin));
  }
}

void PartitionOptimizer::Initialize() {
  // An offloaded store's state is host memory: its kernels run on the host, whatever the caller's device.
  std::optional<kernels::KernelDeviceScope> on_store;
  if (store_->offloaded()) on_store.emplace(store_->device());
  const StateStoreLayout& l = store_->layout();
  const size_t psize = DTypeSize(opt_.param_dtype);
  for (int i = 0; i < l.num_sub_groups(); ++i) {
    const StateSubGroup& sg = l.sub_groups[static_cast<size_t>(i)];
    const PartitionGroupSpec& spec = groups_[static_cast<size_t>(sg.group)];
    SubGroupState st = store_->Acquire(i, StateAccess::kOverwrite);
    if (master_slot_ >= 0) {
      float* master = st.slots[static_cast<size_t>(master_slot_)];
      for (const PartitionSegment& seg : spec.segments) {
        const Range r = Intersect(sg.range, {seg.offset, seg.offset + seg.numel});
        if (r.empty()) continue;
        const void* src = AcquireParams(seg, r.begin, StateAccess::kRead);
        if (store_->offloaded() && !ParamsDevice(seg).is_cpu()) {  // on the device: through host staging
          CopyBytes(param_stage_.data(), Device::CPU(), src, ParamsDevice(seg), static_cast<size_t>(r.size()) * psize);
          src = param_stage_.data();
        }
        kernels::Copy(master + (r.begin - sg.range.begin), DType::kF32, src, opt_.param_dtype, r.size());
        ReleaseParams(seg);
      }
    }
    int state = 0;
    for (size_t k = 0; k < st.slots.size(); ++k) {
      if (static_cast<int>(k) == master_slot_) continue;
      kernels::Fill(st.slots[k], rule_.InitialState(sg.group, state++), st.numel, DType::kF32);
    }
    store_->Release(i);
  }
  store_->Flush();
}

bool PartitionOptimizer::LocalAllFinite() const {
  std::optional<kernels::KernelDeviceScope> on_host;  // gradients on the host: checked there
  if (opt_.grads_on_host) on_host.emplace(Device::CPU());
  for (const auto& runs : grad_runs_) {
    for (const GradRun& r : runs) {
      if (!kernels::AllFinite(r.grads, r.numel, opt_.grad_dtype)) return false;
    }
  }
  return true;
}

std::vector<double> PartitionOptimizer::LocalSumSquares() const {
  std::vector<double> sums;
  std::optional<kernels::KernelDeviceScope> on_host;  // gradients on the host: checked there
  if (opt_.grads_on_host) on_host.emplace(Device::CPU());
  for (const auto& runs : grad_runs_) {
    double s = 0;
    for (const GradRun& r : runs) s += kernels::SumSquares(r.grads, r.numel, opt_.grad_dtype);
    sums.push_back(s);
  }
  return sums;
}

std::vector<std::pair<int, int64_t>> PartitionOptimizer::NonFiniteTensors(size_t max) const {
  std::vector<std::pair<int, int64_t>> out;
  const size_t gsize = DTypeSize(opt_.grad_dtype);
  std::optional<kernels::KernelDeviceScope> on_host;  // gradients on the host: checked there
  if (opt_.grads_on_host) on_host.emplace(Device::CPU());
  for (size_t g = 0; g < groups_.size() && out.size() < max; ++g) {
    for (const TensorPiece& t : groups_[g].tensors) {
      if (out.size() >= max) break;
      bool finite = true;
      for (const PartitionSegment& seg : groups_[g].segments) {
        const Range r = Intersect({t.offset, t.offset + t.count}, {seg.offset, seg.offset + seg.numel});
        if (r.empty()) continue;
        const char* base = static_cast<const char*>(seg.grads) + static_cast<size_t>(r.begin - seg.offset) * gsize;
        finite = finite && kernels::AllFinite(base, r.size(), opt_.grad_dtype);
      }
      const std::pair<int, int64_t> id{static_cast<int>(g), t.tensor_id};
      if (!finite && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    }
  }
  return out;
}

std::vector<GradStats> PartitionOptimizer::LocalGradStats() const {
  std::vector<GradStats> out(groups_.size());
  const size_t gsize = DTypeSize(opt_.grad_dtype);
  constexpr int64_t kChunk = 1 << 20;  // elements staged on the host at a time (device gradients)
  std::vector<char> host;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const TensorPiece& t : groups_[g].tensors) {
      for (const PartitionSegment& seg : groups_[g].segments) {
        const Range r = Intersect({t.offset, t.offset + t.count}, {seg.offset, seg.offset + seg.numel});
        if (r.empty()) continue;
        const char* base = static_cast<const char*>(seg.grads) + static_cast<size_t>(r.begin - seg.offset) * gsize;
        if (GradsDevice().is_cpu()) {
          AccumulateGradStats(base, r.size(), opt_.grad_dtype, &out[g]);
          continue;
        }
        for (int64_t at = 0; at < r.size(); at += kChunk) {
          const int64_t n = std::min(kChunk, r.size() - at);
          host.resize(static_cast<size_t>(n) * gsize);
          CopyBytes(host.data(), Device::CPU(), base + static_cast<size_t>(at) * gsize, GradsDevice(), host.size());
          AccumulateGradStats(host.data(), n, opt_.grad_dtype, &out[g]);
        }
      }
    }
  }
  return out;
}

void PartitionOptimizer::Step(float grad_scale, const std::function<void(int group, int64_t end)>& progress) {
  if (!store_->offloaded()) {
    StepPasses(grad_scale, progress);
    return;
  }
  kernels::KernelDeviceScope on_store(store_->device());  // the update runs where the state is: the host
  try {
    StepPasses(grad_scale, progress);
  } catch (const IoError& e) {
    // The store kept the previous step's state (a failed write-back is not committed); the working
    // parameters written so far are put back from its master weights, so none of this step remains.
    try {
      RestoreParams();
    } catch (const Error& r) {
      ZR_THROW(IoError, "{}; putting back the previous step's parameters failed too: {}", e.what(), r.what());
    }
    throw;
  }
}

void PartitionOptimizer::RestoreParams() {
  kernels::KernelDeviceScope host(Device::CPU());  // the store's master weights are host memory
  const StateStoreLayout& l = store_->layout();
  const size_t psize = DTypeSize(opt_.param_dtype);
  for (int i = 0; i < l.num_sub_groups(); ++i) {
    const StateSubGroup& sg = l.sub_groups[static_cast<size_t>(i)];
    const PartitionGroupSpec& spec = groups_[static_cast<size_t>(sg.group)];
    SubGroupState st = store_->Acquire(i, StateAccess::kRead);
    const float* master = st.slots[static_cast<size_t>(master_slot_)];
    for (const PartitionSegment& seg : spec.segments) {
      const Range r = Intersect(sg.range, {seg.offset, seg.offset + seg.numel});
      if (r.empty()) continue;
      kernels::Copy(param_stage_.data(), opt_.param_dtype, master + (r.begin - sg.range.begin), DType::kF32, r.size());
      void* dst = AcquireParams(seg, r.begin, StateAccess::kReadWrite);
      CopyBytes(dst, ParamsDevice(seg), param_stage_.data(), Device::CPU(), static_cast<size_t>(r.size()) * psize);
      ReleaseParams(seg);
    }
    if (opt_.shard_store) opt_.shard_store->Flush();
    store_->Release(i);
  }
}

void PartitionOptimizer::StepPasses(float grad_scale, const std::function<void(int group, int64_t end)>& progress) {
  const StateStoreLayout& l = store_->layout();
  const int n = l.num_sub_groups();
  std::vector<float*> state;
  // One pass over every sub-group: the next one is prefetched while this one is updated.
  auto pass = [&](bool by_tensor, bool report, const std::function<void(int, const Span&, const SubGroupState&)>& fn) {
    if (n > 0) store_->Prefetch(0, StateAccess::kReadWrite);
    for (int i = 0; i < n; ++i) {
      if (i + 1 < n) store_->Prefetch(i + 1, StateAccess::kReadWrite);
      const StateSubGroup& sg = l.sub_groups[static_cast<size_t>(i)];
      TraceSpan span("optimizer", TraceSpan::Active() ? Format("sub_group {}", i) : std::string(),
                     TraceSpan::Active() ? Format("\"group\": {}, \"elements\": {}", sg.group, sg.range.size())
                                         : std::string());
      SubGroupState st = store_->Acquire(i, StateAccess::kReadWrite);
      for (const Span& s : SpansOf(i, by_tensor)) {
        fn(sg.group, s, st);
        if (report && progress) progress(sg.group, s.offset + s.numel);
      }
      store_->Release(i);
      if (report && progress) progress(sg.group, sg.range.end);
    }
    store_->Flush();
  };
  if (!rule_.NeedsTensorNorms()) {
    pass(false, true, [&](int g, const Span& s, const SubGroupState& st) {
      StatePointers(st, s, l.sub_groups[static_cast<size_t>(st.index)].range.begin, &state);
      kernels::OptimSpan k = KernelSpan(g, s, st, grad_scale, SpanParams(g, s, /*writes_all=*/true));
      void* device_params = k.param_copy;
      const bool on_host = ParamsOnHost(g, s);
      StageIn(&k, on_host);
      std::optional<kernels::KernelDeviceScope> host;  // offloaded: the kernel runs on host memory
      if (store_->offloaded()) host.emplace(Device::CPU());
      rule_.Update(g, k, state.data());
      WriteBack(k, device_params, on_host);
      SpanDone(g, s);
    });
  } else {
    // Pass 1: moments and this rank's partial norms per tensor; the sums of every group are agreed in
    // one all-reduce when tensors are split across ranks; pass 2: each tensor's trust ratio applied.
    std::vector<size_t> first(groups_.size() + 1, 0);
    for (size_t g = 0; g < groups_.size(); ++g) {
      int64_t tensors = groups_[g].num_tensors;
      for (const TensorPiece& t : groups_[g].tensors) tensors = std::max(tensors, t.tensor_id + 1);
      first[g + 1] = first[g] + static_cast<size_t>(2 * tensors);
    }
    std::vector<double> sums(first.back(), 0.0);
    pass(true, false, [&](int g, const Span& s, const SubGroupState& st) {
      StatePointers(st, s, l.sub_groups[static_cast<size_t>(st.index)].range.begin, &state);
      // Moments reads the master only: the parameters themselves only when they are the master (never
      // a shard-store unit, which needs a master copy: nothing to release).
      kernels::OptimSpan k = KernelSpan(g, s, st, grad_scale, master_slot_ >= 0 ? nullptr : SpanParams(g, s, false));
      StageIn(&k, true);  // Moments writes no parameters: nothing to write back
      std::optional<kernels::KernelDeviceScope> host;  // offloaded: the kernel runs on host memory
      if (store_->offloaded()) host.emplace(Device::CPU());
      const kernels::LambNorms norms = rule_.Moments(g, k, state.data());
      sums[first[static_cast<size_t>(g)] + static_cast<size_t>(2 * s.tensor)] += norms.param_sq;
      sums[first[static_cast<size_t>(g)] + static_cast<size_t>(2 * s.tensor + 1)] += norms.update_sq;
    });
    if (opt_.norm_comm != nullptr && opt_.norm_comm->size() > 1 && !sums.empty()) {
      opt_.norm_comm->AllReduce(sums.data(), sums.size(), DType::kF64, comm::ReduceOp::kSum).Wait();
    }
    std::vector<float> trust(sums.size() / 2, 1.0f);
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t t = first[g] / 2; t < first[g + 1] / 2; ++t) {
        trust[t] = rule_.TrustRatio(static_cast<int>(g), {sums[2 * t], sums[2 * t + 1]});
      }
    }
    pass(true, true, [&](int g, const Span& s, const SubGroupState& st) {
      StatePointers(st, s, l.sub_groups[static_cast<size_t>(st.index)].range.begin, &state);
      kernels::OptimSpan k = KernelSpan(g, s, st, grad_scale, SpanParams(g, s, /*writes_all=*/false));
      void* device_params = k.param_copy;
      const bool on_host = ParamsOnHost(g, s);
      StageIn(&k, on_host);
      std::optional<kernels::KernelDeviceScope> host;  // offloaded: the kernel runs on host memory
      if (store_->offloaded()) host.emplace(Device::CPU());
      rule_.Apply(g, k, state.data(), trust[first[static_cast<size_t>(g)] / 2 + static_cast<size_t>(s.tensor)]);
      WriteBack(k, device_params, on_host);
      SpanDone(g, s);
    });
  }
}

}  // namespace zerorun::zero
