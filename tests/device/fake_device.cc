// The recording fake CUDA device (fake_device.h).
#include "fake_device.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "zerorun/comm/device_staging.h"
#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/tensor.h"
#include "zerorun/kernels/cpu/optim.h"
#include "zerorun/kernels/kernel_table.h"
#include "zerorun/kernels/optim_ops.h"

namespace zrtest::fake {

namespace {

using Clock = std::vector<uint64_t>;  // clock[s]: the last op of stream s known to be ordered before

void Merge(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}
uint64_t At(const Clock& c, int s) { return static_cast<size_t>(s) < c.size() ? c[static_cast<size_t>(s)] : 0; }

struct Rec {
  uintptr_t begin = 0, end = 0;
  int stream = 0;
  uint64_t tick = 0;
  bool write = false;
  std::string what;
};

class FakeStream;

}  // namespace

struct FakeCudaDevice::Impl {
  mutable std::mutex mu;
  std::vector<Clock> streams;  // per stream id
  Clock host;
  std::vector<Rec> live;
  std::vector<std::string> violations;
  int64_t violation_count = 0;
  Counts counts;
  int64_t since_prune = 0;

  int NewStream() {
    std::lock_guard<std::mutex> lock(mu);
    streams.emplace_back();
    return static_cast<int>(streams.size()) - 1;
  }
  // One op on stream s touching [p, p + bytes): checks it against every live access and records it.
  void Op(int s, const char* what, const void* p, size_t bytes, bool write) {
    std::lock_guard<std::mutex> lock(mu);
    Clock& c = streams[static_cast<size_t>(s)];
    Merge(c, host);
    if (c.size() <= static_cast<size_t>(s)) c.resize(static_cast<size_t>(s) + 1, 0);
    const uint64_t tick = ++c[static_cast<size_t>(s)];
    if (p == nullptr || bytes == 0) return;
    const uintptr_t b = reinterpret_cast<uintptr_t>(Untag(p)), e = b + bytes;
    for (const Rec& r : live) {
      if (r.end <= b || e <= r.begin || (!r.write && !write) || r.stream == s) continue;
      if (At(c, r.stream) >= r.tick) continue;
      ++violation_count;
      if (violations.size() < 64) {
        violations.push_back(Format("{} on stream {} {} {} bytes at +{} that {} on stream {} {} (op {} of that "
                                    "stream), with no event or synchronisation between them",
                                    what, s, write ? "writes" : "reads", bytes, b - std::min(b, r.begin), r.what,
                                    r.stream, r.write ? "wrote" : "read", r.tick));
      }
    }
    live.push_back({b, e, s, tick, write, what});
    if (++since_prune >= 512) Prune();
  }
  // Drops accesses every stream and the host are already ordered after (they can conflict with nothing).
  void Prune() {
    since_prune = 0;
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Rec& r) {
                                if (At(host, r.stream) < r.tick) return false;
                                for (const Clock& c : streams) {
                                  if (At(c, r.stream) < r.tick) return false;
                                }
                                return true;
                              }),
               live.end());
  }
  void Forget(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    const uintptr_t b = reinterpret_cast<uintptr_t>(Untag(p)), e = b + bytes;
    live.erase(std::remove_if(live.begin(), live.end(), [&](const Rec& r) { return r.begin >= b && r.end <= e; }),
               live.end());
  }
  Clock StreamClock(int s) {
    std::lock_guard<std::mutex> lock(mu);
    Clock c = streams[static_cast<size_t>(s)];
    Merge(c, host);
    return c;
  }
  void Block(int s, const Clock& c) {
    std::lock_guard<std::mutex> lock(mu);
    Merge(streams[static_cast<size_t>(s)], c);
    ++counts.stream_waits;
  }
  void HostWaits(const Clock& c) {
    std::lock_guard<std::mutex> lock(mu);
    Merge(host, c);
    ++counts.host_syncs;
  }
};

namespace {

FakeCudaDevice::Impl* g_impl = nullptr;
FakeCudaDevice::Impl& I() {
  ZR_CHECK(g_impl != nullptr, "the fake CUDA device is not installed");
  return *g_impl;
}

class FakeStream final : public Stream {
 public:
  FakeStream() : id_(I().NewStream()) {}
  Device device() const override { return Device::CUDA(0); }
  void Synchronize() override { I().HostWaits(I().StreamClock(id_)); }
  int id() const { return id_; }

 private:
  int id_;
};

class FakeEvent final : public Event {
 public:
  void Record(Stream& s) override {
    clock_ = I().StreamClock(static_cast<FakeStream&>(s).id());
    std::lock_guard<std::mutex> lock(I().mu);
    ++I().counts.events_recorded;
  }
  void Block(Stream& s) override { I().Block(static_cast<FakeStream&>(s).id(), clock_); }
  bool Query() override {
    Synchronize();  // work runs synchronously: recorded work is complete
    return true;
  }
  void Synchronize() override { I().HostWaits(clock_); }

 private:
  Clock clock_;
};

class FakeAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) ZR_THROW(OutOfMemoryError, "fake cuda:0: {} bytes", bytes);
    std::memset(p, 0xA5, bytes);  // garbage, as cudaMalloc's
    std::lock_guard<std::mutex> lock(I().mu);
    I().counts.device_bytes_allocated += static_cast<int64_t>(bytes);
    return static_cast<char*>(p) + kTag;
  }
  void Deallocate(void* p, size_t bytes) override {
    if (p == nullptr) return;
    ZR_CHECK(IsTagged(p), "fake cuda:0: freeing a pointer it did not allocate");
    I().Forget(p, bytes);
    {
      std::lock_guard<std::mutex> lock(I().mu);
      I().counts.device_bytes_allocated -= static_cast<int64_t>(bytes);
    }
    std::free(Untag(p));
  }
};

class FakeBackend final : public DeviceBackend {
 public:
  int DeviceCount() const override { return 1; }
  Allocator& GetAllocator(int index) override {
    Check(index);
    return allocator_;
  }
  Allocator& GetPinnedHostAllocator() override { return pinned_; }
  std::unique_ptr<Stream> CreateStream(int index) override {
    Check(index);
    return std::make_unique<FakeStream>();
  }
  Stream& DefaultStream(int index) override {
    Check(index);
    return default_;
  }
  std::unique_ptr<Event> CreateEvent(int index) override {
    Check(index);
    return std::make_unique<FakeEvent>();
  }
  void Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream* stream) override {
    if (bytes == 0) return;
    ZR_CHECK(IsTagged(dst) == dst_device.is_cuda() && IsTagged(src) == src_device.is_cuda(),
             "fake copy: pointer and device disagree ({} -> {})", src_device.ToString(), dst_device.ToString());
    FakeStream& s = stream != nullptr ? static_cast<FakeStream&>(*stream) : default_;
    {
      std::lock_guard<std::mutex> lock(I().mu);
      ++I().counts.copies;
    }
    if (src_device.is_cuda()) I().Op(s.id(), "copy (source)", src, bytes, false);
    if (dst_device.is_cuda()) I().Op(s.id(), "copy (destination)", dst, bytes, true);
    std::memmove(Untag(dst), Untag(src), bytes);
    if (stream == nullptr) s.Synchronize();  // synchronous with the host, as cudaMemcpy
  }
  FakeStream& default_stream() { return default_; }

 private:
  static void Check(int index) { ZR_CHECK(index == 0, "fake cuda:{}: only cuda:0 exists", index); }
  FakeAllocator allocator_;
  FakeStream default_;
  struct PinnedFake final : public Allocator {
    void* Allocate(size_t bytes) override { return bytes ? std::aligned_alloc(256, (bytes + 255) / 256 * 256) : nullptr; }
    void Deallocate(void* p, size_t) override { std::free(p); }
  } pinned_;
};

FakeBackend* g_backend = nullptr;

// ---- kernels: untag, record, run the CPU kernel -----------------------------------------------------

int KStream() {
  Stream* s = kernels::KernelStream();
  return s != nullptr ? static_cast<FakeStream*>(s)->id() : g_backend->default_stream().id();
}
size_t B(int64_t n, DType t) { return static_cast<size_t>(std::max<int64_t>(n, 0)) * DTypeSize(t); }

// Records one kernel's accesses, then returns the host pointers.
struct K {
  explicit K(const char* name) : name_(name), s_(KStream()) {
    std::lock_guard<std::mutex> lock(I().mu);
    ++I().counts.kernels;
  }
  // Reads (R), writes (W) or both (RW) [p, p + bytes) of device memory; returns the host address.
  template <typename T>
  T* R(T* p, size_t bytes) { return Touch(p, bytes, true, false); }
  template <typename T>
  T* W(T* p, size_t bytes) { return Touch(p, bytes, false, true); }
  template <typename T>
  T* RW(T* p, size_t bytes) { return Touch(p, bytes, true, true); }
  template <typename T>
  T* Touch(T* p, size_t bytes, bool read, bool write) {
    if (p != nullptr) {
      ZR_CHECK(IsTagged(p), "kernel {} on cuda:0 got a host pointer", name_);
      if (read) I().Op(s_, name_, p, bytes, false);
      if (write) I().Op(s_, name_, p, bytes, true);
    }
    return static_cast<T*>(Untag(p));
  }
  // A kernel returning a host value waits for its stream (as the CUDA table does).
  void HostSync() { I().HostWaits(I().StreamClock(s_)); }
  const char* name_;
  int s_;
};

const kernels::KernelTable& Cpu() { return kernels::CpuKernelTable(); }

kernels::KernelTable MakeTable() {
  using namespace kernels;
  KernelTable t;
  t.name = "fake-cuda";
  t.gemm = [](const GemmParams& p0) {
    K k("gemm");
    GemmParams p = p0;
    const int64_t rows_a = p.trans_a == Trans::kN ? p.m : p.k, rows_b = p.trans_b == Trans::kN ? p.k : p.n;
    const int64_t batch = std::max<int64_t>(p.batch, 1);
    auto span = [&](int64_t rows, int64_t ld, int64_t stride) { return (batch - 1) * stride + rows * ld; };
    p.a = k.R(p.a, B(span(rows_a, p.lda, p.stride_a), p.a_type));
    p.b = k.R(p.b, B(span(rows_b, p.ldb, p.stride_b), p.b_type));
    p.bias = k.R(p.bias, B(p.n, p.bias_type));
    if (p.beta != 0.0f) k.R(p.c, B(span(p.m, p.ldc, p.stride_c), p.c_type));
    p.c = k.W(p.c, B(span(p.m, p.ldc, p.stride_c), p.c_type));
    Cpu().gemm(p);
  };
  t.bias_add = [](void* out, DType ot, const void* bias, DType bt, int64_t N, int64_t C) {
    K k("bias_add");
    Cpu().bias_add(k.RW(out, B(N * C, ot)), ot, k.R(bias, B(C, bt)), bt, N, C);
  };
  t.bias_backward = [](void* db, DType dbt, const void* dout, DType dt, int64_t N, int64_t C) {
    K k("bias_backward");
    Cpu().bias_backward(k.RW(db, B(C, dbt)), dbt, k.R(dout, B(N * C, dt)), dt, N, C);
  };
  t.embedding_forward = [](void* out, DType ot, const int32_t* tokens, const void* wte, const void* wpe, DType pt,
                           int64_t Bn, int64_t T, int64_t C, int64_t V) {
    K k("embedding_forward");
    Cpu().embedding_forward(k.W(out, B(Bn * T * C, ot)), ot, k.R(tokens, B(Bn * T, DType::kI32)), k.R(wte, B(V * C, pt)),
                            k.R(wpe, B(T * C, pt)), pt, Bn, T, C, V);
    k.HostSync();
  };
  t.embedding_backward = [](void* dwte, void* dwpe, DType gt, const void* dout, DType dt, const int32_t* tokens,
                            int64_t Bn, int64_t T, int64_t C, int64_t V) {
    K k("embedding_backward");
    void* w = k.RW(dwte, B(V * C, gt));
    void* p = k.RW(dwpe, B(T * C, gt));
    Cpu().embedding_backward(w, p, gt, k.R(dout, B(Bn * T * C, dt)), dt, k.R(tokens, B(Bn * T, DType::kI32)), Bn, T, C, V);
    k.HostSync();
  };
  t.layernorm_forward = [](void* out, float* mean, float* rstd, const void* x, const void* w, const void* b, int64_t N,
                           int64_t C, float eps, DType at, DType pt) {
    K k("layernorm_forward");
    Cpu().layernorm_forward(k.W(out, B(N * C, at)), k.W(mean, B(N, DType::kF32)), k.W(rstd, B(N, DType::kF32)),
                            k.R(x, B(N * C, at)), k.R(w, B(C, pt)), k.R(b, B(C, pt)), N, C, eps, at, pt);
  };
  t.layernorm_backward = [](void* dx, void* dw, void* db, const void* dout, const void* x, const void* w,
                            const float* mean, const float* rstd, int64_t N, int64_t C, DType at, DType pt, DType gt) {
    K k("layernorm_backward");
    void* hdw = k.RW(dw, B(C, gt));
    void* hdb = k.RW(db, B(C, gt));
    Cpu().layernorm_backward(k.W(dx, B(N * C, at)), hdw, hdb, k.R(dout, B(N * C, at)), k.R(x, B(N * C, at)),
                             k.R(w, B(C, pt)), k.R(mean, B(N, DType::kF32)), k.R(rstd, B(N, DType::kF32)), N, C, at, pt, gt);
  };
  t.rmsnorm_forward = [](void* out, float* rstd, const void* x, const void* w, int64_t N, int64_t C, float eps, DType at,
                         DType pt) {
    K k("rmsnorm_forward");
    Cpu().rmsnorm_forward(k.W(out, B(N * C, at)), k.W(rstd, B(N, DType::kF32)), k.R(x, B(N * C, at)), k.R(w, B(C, pt)),
                          N, C, eps, at, pt);
  };
  t.rmsnorm_backward = [](void* dx, void* dw, const void* dout, const void* x, const void* w, const float* rstd,
                          int64_t N, int64_t C, DType at, DType pt, DType gt) {
    K k("rmsnorm_backward");
    void* hdw = k.RW(dw, B(C, gt));
    Cpu().rmsnorm_backward(k.W(dx, B(N * C, at)), hdw, k.R(dout, B(N * C, at)), k.R(x, B(N * C, at)), k.R(w, B(C, pt)),
                           k.R(rstd, B(N, DType::kF32)), N, C, at, pt, gt);
  };
  t.gelu_forward = [](void* out, const void* x, int64_t n, DType ty, GeluApprox a) {
    K k("gelu_forward");
    const void* hx = k.R(x, B(n, ty));
    Cpu().gelu_forward(k.W(out, B(n, ty)), hx, n, ty, a);
  };
  t.gelu_backward = [](void* dx, const void* dout, const void* x, int64_t n, DType ty, GeluApprox a) {
    K k("gelu_backward");
    const void* hd = k.R(dout, B(n, ty));
    const void* hx = k.R(x, B(n, ty));
    Cpu().gelu_backward(k.W(dx, B(n, ty)), hd, hx, n, ty, a);
  };
  t.silu_forward = [](void* out, const void* x, int64_t n, DType ty) {
    K k("silu_forward");
    const void* hx = k.R(x, B(n, ty));
    Cpu().silu_forward(k.W(out, B(n, ty)), hx, n, ty);
  };
  t.silu_backward = [](void* dx, const void* dout, const void* x, int64_t n, DType ty) {
    K k("silu_backward");
    const void* hd = k.R(dout, B(n, ty));
    const void* hx = k.R(x, B(n, ty));
    Cpu().silu_backward(k.W(dx, B(n, ty)), hd, hx, n, ty);
  };
  t.swiglu_forward = [](void* out, const void* in, int64_t N, int64_t H, DType ty) {
    K k("swiglu_forward");
    const void* hi = k.R(in, B(2 * N * H, ty));
    Cpu().swiglu_forward(k.W(out, B(N * H, ty)), hi, N, H, ty);
  };
  t.swiglu_backward = [](void* din, const void* dout, const void* in, int64_t N, int64_t H, DType ty) {
    K k("swiglu_backward");
    const void* hd = k.R(dout, B(N * H, ty));
    const void* hi = k.R(in, B(2 * N * H, ty));
    Cpu().swiglu_backward(k.W(din, B(2 * N * H, ty)), hd, hi, N, H, ty);
  };
  t.add = [](void* out, const void* a, const void* b, int64_t n, DType ty) {
    K k("add");
    const void* ha = k.R(a, B(n, ty));
    const void* hb = k.R(b, B(n, ty));
    Cpu().add(k.W(out, B(n, ty)), ha, hb, n, ty);
  };
  t.axpy = [](void* y, DType yt, const void* x, DType xt, float alpha, int64_t n) {
    K k("axpy");
    const void* hx = k.R(x, B(n, xt));
    Cpu().axpy(k.RW(y, B(n, yt)), yt, hx, xt, alpha, n);
  };
  t.scale = [](void* out, const void* x, float alpha, int64_t n, DType ty) {
    K k("scale");
    const void* hx = k.R(x, B(n, ty));
    Cpu().scale(k.W(out, B(n, ty)), hx, alpha, n, ty);
  };
  t.fill = [](void* out, float v, int64_t n, DType ty) {
    K k("fill");
    Cpu().fill(k.W(out, B(n, ty)), v, n, ty);
  };
  t.copy = [](void* dst, DType dt, const void* src, DType st, int64_t n) {
    K k("copy");
    const void* hs = k.R(src, B(n, st));
    Cpu().copy(k.W(dst, B(n, dt)), dt, hs, st, n);
  };
  t.dropout_forward = [](void* out, const void* x, int64_t n, DType ty, float p, uint64_t seed, uint64_t st,
                         uint64_t off) {
    K k("dropout_forward");
    const void* hx = k.R(x, B(n, ty));
    Cpu().dropout_forward(k.W(out, B(n, ty)), hx, n, ty, p, seed, st, off);
  };
  t.dropout_backward = [](void* dx, const void* dout, int64_t n, DType ty, float p, uint64_t seed, uint64_t st,
                          uint64_t off) {
    K k("dropout_backward");
    const void* hd = k.R(dout, B(n, ty));
    Cpu().dropout_backward(k.W(dx, B(n, ty)), hd, n, ty, p, seed, st, off);
  };
  t.softmax_forward = [](void* out, const void* x, int64_t N, int64_t C, DType ty) {
    K k("softmax_forward");
    const void* hx = k.R(x, B(N * C, ty));
    Cpu().softmax_forward(k.W(out, B(N * C, ty)), hx, N, C, ty);
  };
  t.softmax_backward = [](void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType ty) {
    K k("softmax_backward");
    const void* hd = k.R(dout, B(N * C, ty));
    const void* hy = k.R(y, B(N * C, ty));
    Cpu().softmax_backward(k.W(dx, B(N * C, ty)), hd, hy, N, C, ty);
  };
  t.attention_forward = [](void* out, float* att, const void* qkv, int64_t Bn, int64_t T, int64_t C, int64_t NH,
                           DType ty) {
    K k("attention_forward");
    const void* hq = k.R(qkv, B(Bn * T * 3 * C, ty));
    Cpu().attention_forward(k.W(out, B(Bn * T * C, ty)), k.W(att, B(Bn * NH * T * T, DType::kF32)), hq, Bn, T, C, NH, ty);
  };
  t.attention_backward = [](void* dqkv, const void* dout, const void* qkv, const float* att, int64_t Bn, int64_t T,
                            int64_t C, int64_t NH, DType ty) {
    K k("attention_backward");
    const void* hd = k.R(dout, B(Bn * T * C, ty));
    const void* hq = k.R(qkv, B(Bn * T * 3 * C, ty));
    const float* ha = k.R(att, B(Bn * NH * T * T, DType::kF32));
    Cpu().attention_backward(k.W(dqkv, B(Bn * T * 3 * C, ty)), hd, hq, ha, Bn, T, C, NH, ty);
  };
  t.cross_entropy = [](void* dlogits, float* losses, const void* logits, const int32_t* targets, int64_t N, int64_t V,
                       DType ty, int32_t ignore, float gs) {
    K k("cross_entropy");
    const void* hl = k.R(logits, B(N * V, ty));
    const int32_t* ht = k.R(targets, B(N, DType::kI32));
    float* hls = k.W(losses, B(N, DType::kF32));
    void* hd = k.W(dlogits, B(N * V, ty));
    k.HostSync();
    return Cpu().cross_entropy(hd, hls, hl, ht, N, V, ty, ignore, gs);
  };
  t.sum_squares = [](const void* x, int64_t n, DType ty) {
    K k("sum_squares");
    const void* hx = k.R(x, B(n, ty));
    k.HostSync();
    return Cpu().sum_squares(hx, n, ty);
  };
  t.all_finite = [](const void* x, int64_t n, DType ty) {
    K k("all_finite");
    const void* hx = k.R(x, B(n, ty));
    k.HostSync();
    return Cpu().all_finite(hx, n, ty);
  };
  return t;
}

kernels::OptimSpan Span(K& k, const kernels::OptimSpan& s0) {
  kernels::OptimSpan s = s0;
  s.grads = k.R(s.grads, B(s.n, s.grad_dtype));
  s.params = k.RW(s.params, B(s.n, DType::kF32));
  s.param_copy = k.W(s.param_copy, B(s.n, s.copy_dtype));
  return s;
}
float* State(K& k, float* p, int64_t n) { return k.RW(p, B(n, DType::kF32)); }

kernels::OptimTable MakeOptimTable() {
  using namespace kernels;
  OptimTable t;
  t.name = "fake-cuda";
  t.adam = [](const AdamHyper& h, const OptimSpan& s, float* m, float* v) {
    K k("adam");
    OptimSpan hs = Span(k, s);
    cpu::AdamStep(h, hs, State(k, m, s.n), State(k, v, s.n));
  };
  t.lion = [](const LionHyper& h, const OptimSpan& s, float* m) {
    K k("lion");
    OptimSpan hs = Span(k, s);
    cpu::LionStep(h, hs, State(k, m, s.n));
  };
  t.sgd = [](const SgdHyper& h, const OptimSpan& s, float* m) {
    K k("sgd");
    OptimSpan hs = Span(k, s);
    cpu::SgdStep(h, hs, State(k, m, s.n));
  };
  t.adagrad = [](const AdagradHyper& h, const OptimSpan& s, float* sum) {
    K k("adagrad");
    OptimSpan hs = Span(k, s);
    cpu::AdagradStep(h, hs, State(k, sum, s.n));
  };
  t.lamb_moments = [](const LambHyper& h, const OptimSpan& s, float* m, float* v) {
    K k("lamb_moments");
    OptimSpan hs = Span(k, s);
    float* hm = State(k, m, s.n);
    float* hv = State(k, v, s.n);
    k.HostSync();
    return cpu::LambMoments(h, hs, hm, hv);
  };
  t.lamb_apply = [](const LambHyper& h, const OptimSpan& s, const float* m, const float* v, float trust) {
    K k("lamb_apply");
    OptimSpan hs = Span(k, s);
    cpu::LambApply(h, hs, k.R(m, B(s.n, DType::kF32)), k.R(v, B(s.n, DType::kF32)), trust);
  };
  return t;
}

}  // namespace

namespace {
struct Saved {
  DeviceBackend* backend = nullptr;
  const kernels::KernelTable* table = nullptr;
  const kernels::OptimTable* optim = nullptr;
};
Saved g_saved;
kernels::KernelTable g_table;
kernels::OptimTable g_optim;
}  // namespace

FakeCudaDevice::FakeCudaDevice() : impl_(std::make_unique<Impl>()) {
  ZR_CHECK(g_impl == nullptr, "one FakeCudaDevice at a time");
  g_impl = impl_.get();
  g_saved.backend = HasDeviceBackend(DeviceType::kCUDA) ? &GetDeviceBackend(DeviceType::kCUDA) : nullptr;
  g_saved.table = kernels::HasKernelTable(DeviceType::kCUDA) ? &kernels::KernelTableFor(Device::CUDA(0)) : nullptr;
  g_saved.optim = kernels::HasOptimTable(DeviceType::kCUDA) ? &kernels::OptimTableFor(Device::CUDA(0)) : nullptr;
  g_backend = new FakeBackend();
  g_table = MakeTable();
  g_optim = MakeOptimTable();
  RegisterDeviceBackend(DeviceType::kCUDA, g_backend);
  kernels::RegisterKernelTable(DeviceType::kCUDA, &g_table);
  kernels::RegisterOptimTable(DeviceType::kCUDA, &g_optim);
}

FakeCudaDevice::~FakeCudaDevice() {
  RegisterDeviceBackend(DeviceType::kCUDA, g_saved.backend);
  kernels::RegisterKernelTable(DeviceType::kCUDA, g_saved.table);
  kernels::RegisterOptimTable(DeviceType::kCUDA, g_saved.optim);
  delete g_backend;
  g_backend = nullptr;
  g_impl = nullptr;
}

Counts FakeCudaDevice::counts() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->counts;
}

std::vector<std::string> FakeCudaDevice::violations() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->violations;
}

int64_t FakeCudaDevice::violation_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->violation_count;
}

void FakeCudaDevice::Access(const char* what, Stream* stream, const void* p, size_t bytes, bool write) {
  FakeStream& s = stream != nullptr ? static_cast<FakeStream&>(*stream) : g_backend->default_stream();
  impl_->Op(s.id(), what, p, bytes, write);
}

// ---- the fake device communicator -----------------------------------------------------------------

namespace {

class FakeDeviceComm final : public comm::Communicator {
 public:
  explicit FakeDeviceComm(comm::Communicator& inner)
      : Communicator("fake-device", inner.name(), inner.rank(), inner.size(), comm::CommOptions{}),
        inner_(inner),
        stream_(CreateStream(Device::CUDA(0))),
        done_(CreateEvent(Device::CUDA(0))) {}
  ~FakeDeviceComm() override { StopExecutor(); }

  Device device() const override { return Device::CUDA(0); }

 protected:
  void OnSubmit(comm::OpDesc& op) override {
    // Where the submitting thread's stream stands: the op must run after what was enqueued there.
    Stream* s = kernels::KernelDevice() == Device::CUDA(0) && kernels::KernelStream() != nullptr
                    ? kernels::KernelStream()
                    : &DefaultStream(Device::CUDA(0));
    auto ready = std::shared_ptr<Event>(CreateEvent(Device::CUDA(0)));
    ready->Record(*s);
    op.backend_state = ready;
  }

  void Execute(comm::OpDesc& op) override {
    using comm::OpType;
    if (op.backend_state) std::static_pointer_cast<Event>(op.backend_state)->Block(*stream_);
    // Host buffers through device scratch, as the NCCL backend stages them.
    const bool staged = staging_.Stage(op, size(), rank(), *stream_, [](const void* p) { return !IsTagged(p); });
    // NCCL takes device memory only: a host buffer here would be an invalid pointer on a GPU.
    for (const void* p : {static_cast<const void*>(op.send), static_cast<const void*>(op.recv)}) {
      if (p != nullptr && op.count > 0 && !IsTagged(p)) {
        ZR_THROW(CommError, "{}: a host buffer handed to a device communicator",
                 op.Describe(rank(), size(), name()));
      }
    }
    const size_t es = DTypeSize(op.dtype), n = op.count * es, w = static_cast<size_t>(size());
    {
      std::lock_guard<std::mutex> lock(I().mu);
      ++I().counts.collectives;
    }
    const char* name = comm::OpTypeName(op.op);
    FakeCudaDevice::Impl& im = I();
    const int sid = static_cast<FakeStream&>(*stream_).id();
    comm::Work work;
    switch (op.op) {
      case OpType::kAllReduce:
        im.Op(sid, name, op.send, n, false);
        im.Op(sid, name, op.recv, n, true);
        work = inner_.AllReduce(Untag(op.send), Untag(op.recv), op.count, op.dtype, op.reduce);
        break;
      case OpType::kReduceScatter:
        im.Op(sid, name, op.send, n * w, false);
        im.Op(sid, name, op.recv, n, true);
        work = inner_.ReduceScatter(Untag(op.send), Untag(op.recv), op.count, op.dtype, op.reduce);
        break;
      case OpType::kAllGather:
        im.Op(sid, name, op.send, n, false);
        im.Op(sid, name, op.recv, n * w, true);
        work = inner_.AllGather(Untag(op.send), Untag(op.recv), op.count, op.dtype);
        break;
      case OpType::kBroadcast:
        im.Op(sid, name, op.recv, n, true);
        work = inner_.Broadcast(Untag(op.recv), op.count, op.dtype, op.root);
        break;
      case OpType::kReduce:
        im.Op(sid, name, op.send, n, false);
        im.Op(sid, name, op.recv, op.recv ? n : 0, true);
        work = inner_.Reduce(Untag(op.send), Untag(op.recv), op.count, op.dtype, op.reduce, op.root);
        break;
      case OpType::kBarrier:
        work = inner_.Barrier();
        break;
      case OpType::kSend:
        im.Op(sid, name, op.send, n, false);
        work = inner_.Send(Untag(op.send), op.count, op.dtype, op.root, op.tag);
        break;
      case OpType::kRecv:
        im.Op(sid, name, op.recv, n, true);
        work = inner_.Recv(Untag(op.recv), op.count, op.dtype, op.root, op.tag);
        break;
    }
    work.Wait();
    done_->Record(*stream_);
    done_->Synchronize();  // the Work completes once the device work has (as the NCCL backend polls)
    if (staged) staging_.Unstage(op, *stream_);
  }

  std::unique_ptr<Communicator> CreateSubgroup(const std::string&, const std::vector<int>&, int) override {
    ZR_THROW(InvalidArgument, "the fake device communicator has no subgroups");
  }
  std::vector<int64_t> AllGatherHost(const std::vector<int64_t>& mine, int) override {
    std::vector<int64_t> out(mine.size() * static_cast<size_t>(size()));
    inner_.AllGather(mine.data(), out.data(), mine.size(), DType::kI64).Wait();
    return out;
  }

 private:
  comm::Communicator& inner_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> done_;
  comm::HostStaging staging_{Device::CUDA(0)};
};

}  // namespace

std::unique_ptr<comm::Communicator> MakeFakeDeviceComm(comm::Communicator& inner) {
  return std::make_unique<FakeDeviceComm>(inner);
}

}  // namespace zrtest::fake
