// Host side of the shared CUDA kernel pieces: the calling thread's device and stream, launch and
// stream checks, stream-ordered scratch, and the report of bad token indexes found on the device.
#include "zerorun/kernels/cuda/common.cuh"

#include <cstdint>
#include <mutex>

#include "zerorun/core/device.h"
#include "zerorun/core/error.h"

namespace zerorun::kernels::cuda {
namespace {

// cudaMallocAsync's pool returns memory to the system at every synchronisation unless told to keep
// it; scratch is re-requested by every call, so keep it (it is reused in stream order).
void KeepPoolMemory(int device) {
  static std::mutex mu;
  static bool done[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0 || device >= 64 || done[device]) return;
  cudaMemPool_t pool = nullptr;
  ZR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  ZR_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  done[device] = true;
}

}  // namespace

Ctx CurrentCtx() {
  const Device d = KernelDevice();
  ZR_CHECK(d.is_cuda(), "cuda kernel called outside a CUDA KernelDeviceScope ({})", d.ToString());
  Stream* s = KernelStream();
  // DefaultStream checks the index against the visible devices (InvalidArgument naming cuda:i).
  Stream& stream = s != nullptr ? *s : DefaultStream(d);
  ZR_CHECK(stream.device() == d, "kernel stream is on {}, the scope's device is {}", stream.device().ToString(),
           d.ToString());
  ZR_CUDA_CHECK(cudaSetDevice(d.index));
  KeepPoolMemory(d.index);
  return {d.index, static_cast<cudaStream_t>(stream.native_handle())};
}

void CheckLaunch(const char* op) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) ZR_THROW(Error, "{} (cuda): kernel launch failed: {}", op, cudaGetErrorString(err));
}

void SyncStream(const Ctx& ctx, const char* op) {
  cudaError_t err = cudaStreamSynchronize(ctx.stream);
  if (err != cudaSuccess) ZR_THROW(Error, "{} (cuda): the stream failed: {}", op, cudaGetErrorString(err));
}

Scratch::Scratch(const Ctx& ctx, size_t bytes) : stream_(ctx.stream) {
  if (bytes == 0) return;
  cudaError_t err = cudaMallocAsync(&ptr_, bytes, stream_);
  if (err != cudaSuccess) {
    ZR_THROW(OutOfMemoryError, "cuda kernel scratch of {} bytes on cuda:{} failed: {}", bytes, ctx.device,
             cudaGetErrorString(err));
  }
}

Scratch::~Scratch() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
}

BadIndex MakeBadIndex(const Ctx& ctx, const Scratch& scratch, size_t offset) {
  BadIndex b{scratch.as<unsigned long long>(offset)};
  ZR_CUDA_CHECK(cudaMemsetAsync(b.slot, 0xff, sizeof(unsigned long long), ctx.stream));
  return b;
}

void ThrowIfBad(const Ctx& ctx, BadIndex bad, const char* op, const char* arg, const int32_t* values, int64_t V) {
  unsigned long long first = 0;
  ZR_CUDA_CHECK(cudaMemcpyAsync(&first, bad.slot, sizeof first, cudaMemcpyDeviceToHost, ctx.stream));
  SyncStream(ctx, op);
  if (first == ~0ull) return;
  int32_t value = 0;
  ZR_CUDA_CHECK(cudaMemcpy(&value, values + first, sizeof value, cudaMemcpyDeviceToHost));
  ZR_THROW(InvalidArgument, "{}: {}[{}] = {} is outside [0, {})", op, arg, first, value, V);
}

}  // namespace zerorun::kernels::cuda
