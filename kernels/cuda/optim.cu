// CUDA multi-tensor optimizer updates (kernels/cuda/optim.h). The host plans the launches
// (PlanMultiTensor), packs each launch's tensors and (tensor, chunk) block table into one by-value
// kernel argument, and every rule below is the reference's (kernels/ref/optim.cc) statement for
// statement, written with explicitly rounded fp32 operations so no FMA contraction changes a bit.
#include "zerorun/kernels/cuda/optim.h"

#include <vector>

#include "zerorun/kernels/cuda/common.cuh"

namespace zerorun::kernels::cuda {
namespace {

__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float Sqrt(float a) { return __fsqrt_rn(a); }

struct TensorArgs {
  float* params;
  const void* grads;
  void* copy;
  float* s0;
  float* s1;
  int64_t n;
  float grad_scale;
  DType grad_type;
  DType copy_type;
};

struct LaunchArgs {
  TensorArgs t[kOptimMaxTensors];
  float extra[kOptimMaxTensors];  // per tensor: Lamb's step size * trust ratio
  int16_t block_tensor[kOptimMaxBlocks];
  int32_t block_chunk[kOptimMaxBlocks];
};
static_assert(sizeof(LaunchArgs) <= 4000, "the launch argument must fit CUDA's 4 KiB parameter space");

__device__ __forceinline__ float Grad(const TensorArgs& t, int64_t i) {
  return Mul(LoadAny(t.grads, t.grad_type, i), t.grad_scale);
}
__device__ __forceinline__ void StoreParam(const TensorArgs& t, int64_t i, float p) {
  t.params[i] = p;
  if (t.copy != nullptr) StoreAny(t.copy, t.copy_type, i, p);
}

// ---- the rules (ref/optim.cc, element by element) -----------------------------------------------------

struct AdamRule {
  AdamHyper h;
  AdamConstants c;
  __device__ void operator()(const TensorArgs& t, int64_t i, float) const {
    float p = t.params[i];
    float g = Grad(t, i);
    if (!h.adam_w_mode && h.weight_decay > 0.0f) g = Add(g, Mul(c.l2, p));
    const float m = Add(Mul(h.beta1, t.s0[i]), Mul(Sub(1.0f, h.beta1), g));
    const float v = Add(Mul(h.beta2, t.s1[i]), Mul(Sub(1.0f, h.beta2), Mul(g, g)));
    t.s0[i] = m;
    t.s1[i] = v;
    const float denom = Add(Mul(Sqrt(v), c.bc2_rsqrt), h.eps);
    if (h.adam_w_mode && h.weight_decay > 0.0f) p = Add(p, Mul(c.decoupled, p));
    p = Add(p, Mul(c.step_size, Div(m, denom)));
    StoreParam(t, i, p);
  }
};

struct LionRule {
  LionHyper h;
  float decay;  // 1 - lr * wd
  __device__ void operator()(const TensorArgs& t, int64_t i, float) const {
    const float g = Grad(t, i);
    const float c = Add(Mul(h.beta1, t.s0[i]), Mul(Sub(1.0f, h.beta1), g));
    float p = t.params[i];
    if (h.weight_decay != 0.0f) p = Mul(p, decay);
    const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    p = Sub(p, Mul(h.lr, sign));
    t.s0[i] = Add(Mul(h.beta2, t.s0[i]), Mul(Sub(1.0f, h.beta2), g));
    StoreParam(t, i, p);
  }
};

struct SgdRule {
  SgdHyper h;
  __device__ void operator()(const TensorArgs& t, int64_t i, float) const {
    float p = t.params[i];
    float d = Grad(t, i);
    if (h.weight_decay != 0.0f) d = Add(d, Mul(h.weight_decay, p));
    if (h.momentum != 0.0f) {
      const float buf = h.step <= 1 ? d : Add(Mul(h.momentum, t.s0[i]), Mul(Sub(1.0f, h.dampening), d));
      t.s0[i] = buf;
      d = h.nesterov ? Add(d, Mul(h.momentum, buf)) : buf;
    }
    StoreParam(t, i, Sub(p, Mul(h.lr, d)));
  }
};

struct AdagradRule {
  AdagradHyper h;
  float clr;  // lr / (1 + (step - 1) lr_decay)
  __device__ void operator()(const TensorArgs& t, int64_t i, float) const {
    float p = t.params[i];
    float g = Grad(t, i);
    if (h.weight_decay != 0.0f) g = Add(g, Mul(h.weight_decay, p));
    const float sum = Add(t.s0[i], Mul(g, g));
    t.s0[i] = sum;
    StoreParam(t, i, Sub(p, Mul(clr, Div(g, Add(Sqrt(sum), h.eps)))));
  }
};

__device__ __forceinline__ float LambDenom(const LambHyper& h, float v) {
  return h.eps_inside_sqrt ? Sqrt(Add(v, h.eps)) : Add(Sqrt(v), h.eps);
}

struct LambApplyRule {
  LambHyper h;
  __device__ void operator()(const TensorArgs& t, int64_t i, float scale) const {
    const float p = t.params[i];
    const float u = Add(Div(t.s0[i], LambDenom(h, t.s1[i])), Mul(h.weight_decay, p));
    StoreParam(t, i, Sub(p, Mul(scale, u)));
  }
};

template <typename Rule>
__global__ void MultiTensorKernel(Rule rule, LaunchArgs args) {
  const TensorArgs& t = args.t[args.block_tensor[blockIdx.x]];
  const float extra = args.extra[args.block_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(args.block_chunk[blockIdx.x]) * kOptimChunk;
  const int64_t end = begin + kOptimChunk < t.n ? begin + kOptimChunk : t.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) rule(t, i, extra);
}

// Lamb's moments: updates m and v and writes the block's (sum p^2, sum u^2) to partials[2 * slot].
__global__ void LambMomentsKernel(LambHyper h, LaunchArgs args, double* partials) {
  __shared__ double shared[32];
  const TensorArgs& t = args.t[args.block_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(args.block_chunk[blockIdx.x]) * kOptimChunk;
  const int64_t end = begin + kOptimChunk < t.n ? begin + kOptimChunk : t.n;
  double psq = 0.0, usq = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float p = t.params[i];
    const float g = Grad(t, i);
    const float m = Add(Mul(h.beta1, t.s0[i]), Mul(Sub(1.0f, h.beta1), g));
    const float v = Add(Mul(h.beta2, t.s1[i]), Mul(Sub(1.0f, h.beta2), Mul(g, g)));
    t.s0[i] = m;
    t.s1[i] = v;
    const float u = Add(Div(m, LambDenom(h, v)), Mul(h.weight_decay, p));
    psq += static_cast<double>(p) * p;
    usq += static_cast<double>(u) * u;
  }
  psq = BlockSum(psq, shared);
  usq = BlockSum(usq, shared);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = psq;
    partials[2 * blockIdx.x + 1] = usq;
  }
}

// ---- launching -----------------------------------------------------------------------------------------

std::vector<MultiTensorLaunch> Plan(const OptimTensor* tensors, int64_t count) {
  std::vector<int64_t> sizes(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) sizes[static_cast<size_t>(i)] = tensors[i].span.n;
  return PlanMultiTensor(sizes, kOptimChunk, kOptimMaxTensors, kOptimMaxBlocks);
}

LaunchArgs Pack(const MultiTensorLaunch& l, const OptimTensor* tensors, const float* extra) {
  LaunchArgs a{};
  for (size_t j = 0; j < l.tensors.size(); ++j) {
    const OptimTensor& o = tensors[l.tensors[j]];
    a.t[j] = {o.span.params, o.span.grads, o.span.param_copy, o.state0, o.state1, o.span.n, o.span.grad_scale,
              o.span.grad_dtype, o.span.copy_dtype};
    a.extra[j] = extra != nullptr ? extra[l.tensors[j]] : 0.0f;
  }
  for (size_t b = 0; b < l.blocks.size(); ++b) {
    a.block_tensor[b] = static_cast<int16_t>(l.blocks[b].tensor);
    ZR_CHECK(l.blocks[b].chunk <= INT32_MAX, "optimizer tensor of {} chunks is too large", l.blocks[b].chunk);
    a.block_chunk[b] = static_cast<int32_t>(l.blocks[b].chunk);
  }
  return a;
}

void CheckTensors(const char* op, const OptimTensor* tensors, int64_t count, bool state0, bool state1) {
  ZR_CHECK(count >= 0 && (count == 0 || tensors != nullptr), "{}: bad tensor list", op);
  for (int64_t i = 0; i < count; ++i) {
    const OptimTensor& t = tensors[i];
    const OptimSpan& s = t.span;
    ZR_CHECK(s.n >= 0, "{}: tensor {} has negative size {}", op, i, s.n);
    if (s.n == 0) continue;
    ZR_CHECK(s.params != nullptr && s.grads != nullptr, "{}: tensor {} without params or grads", op, i);
    ZR_CHECK(s.grad_dtype == DType::kF32 || Is16Bit(s.grad_dtype), "{}: tensor {} gradients are {}", op, i,
             DTypeName(s.grad_dtype));
    ZR_CHECK(s.param_copy == nullptr || s.copy_dtype == DType::kF32 || Is16Bit(s.copy_dtype),
             "{}: tensor {} copy dtype {}", op, i, DTypeName(s.copy_dtype));
    ZR_CHECK(!state0 || t.state0 != nullptr, "{}: tensor {} has no state0", op, i);
    ZR_CHECK(!state1 || t.state1 != nullptr, "{}: tensor {} has no state1", op, i);
  }
}

template <typename Rule>
void Run(const char* op, const Rule& rule, const OptimTensor* tensors, int64_t count, const float* extra = nullptr) {
  if (count == 0) return;
  const Ctx ctx = CurrentCtx();
  for (const MultiTensorLaunch& l : Plan(tensors, count)) {
    MultiTensorKernel<Rule><<<static_cast<unsigned>(l.blocks.size()), kThreads, 0, ctx.stream>>>(rule, Pack(l, tensors, extra));
    CheckLaunch(op);
  }
}

}  // namespace

void AdamStep(const AdamHyper& h, const OptimTensor* tensors, int64_t count) {
  CheckTensors("AdamStep", tensors, count, true, true);
  Run("AdamStep", AdamRule{h, MakeAdamConstants(h)}, tensors, count);
}

void LionStep(const LionHyper& h, const OptimTensor* tensors, int64_t count) {
  CheckTensors("LionStep", tensors, count, true, false);
  Run("LionStep", LionRule{h, 1.0f - h.lr * h.weight_decay}, tensors, count);
}

void SgdStep(const SgdHyper& h, const OptimTensor* tensors, int64_t count) {
  CheckTensors("SgdStep", tensors, count, h.momentum != 0.0f, false);
  Run("SgdStep", SgdRule{h}, tensors, count);
}

void AdagradStep(const AdagradHyper& h, const OptimTensor* tensors, int64_t count) {
  CheckTensors("AdagradStep", tensors, count, true, false);
  const float clr = h.lr / (1.0f + static_cast<float>(h.step - 1) * h.lr_decay);
  Run("AdagradStep", AdagradRule{h, clr}, tensors, count);
}

void LambMoments(const LambHyper& h, const OptimTensor* tensors, int64_t count, LambNorms* norms) {
  CheckTensors("LambMoments", tensors, count, true, true);
  for (int64_t i = 0; i < count; ++i) norms[i] = LambNorms{};
  if (count == 0) return;
  const Ctx ctx = CurrentCtx();
  const std::vector<MultiTensorLaunch> launches = Plan(tensors, count);
  size_t blocks = 0;
  for (const auto& l : launches) blocks += l.blocks.size();
  Scratch partials(ctx, std::max<size_t>(1, blocks) * 2 * sizeof(double));
  size_t at = 0;
  for (const auto& l : launches) {
    LambMomentsKernel<<<static_cast<unsigned>(l.blocks.size()), kThreads, 0, ctx.stream>>>(h, Pack(l, tensors, nullptr),
                                                                    partials.as<double>() + 2 * at);
    CheckLaunch("LambMoments");
    at += l.blocks.size();
  }
  std::vector<double> host(2 * blocks);
  ZR_CUDA_CHECK(cudaMemcpyAsync(host.data(), partials.get(), host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                ctx.stream));
  SyncStream(ctx, "LambMoments");
  // Each tensor's partials in chunk order: the sum does not depend on scheduling.
  at = 0;
  for (const auto& l : launches) {
    for (const MultiTensorBlock& b : l.blocks) {
      LambNorms& n = norms[l.tensors[static_cast<size_t>(b.tensor)]];
      n.param_sq += host[2 * at];
      n.update_sq += host[2 * at + 1];
      ++at;
    }
  }
}

void LambApply(const LambHyper& h, const OptimTensor* tensors, int64_t count, const float* trust_ratios) {
  CheckTensors("LambApply", tensors, count, true, true);
  std::vector<float> scale(static_cast<size_t>(count));
  const float step_size = LambStepSize(h);
  for (int64_t i = 0; i < count; ++i) scale[static_cast<size_t>(i)] = step_size * trust_ratios[i];
  Run("LambApply", LambApplyRule{h}, tensors, count, scale.data());
}

}  // namespace zerorun::kernels::cuda
