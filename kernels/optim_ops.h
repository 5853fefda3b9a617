// Optimizer updates on the calling thread's kernel device (KernelDeviceScope, kernels/ops.h): the
// CPU runs the SIMD kernels of kernels/cpu/optim.h (multithreaded through `pool`), another device
// runs the table its backend registered (kernels/cuda/ registers the multi-tensor kernels of
// kernels/cuda/optim.h, one tensor per call, in CUDA builds). Every pointer of the span and the state
// is memory of that device. Callers (runtime::Optimizer, zero/) call these and never name a device.
#pragma once

#include "zerorun/core/device.h"
#include "zerorun/kernels/ref/optim.h"

namespace zerorun {
class ThreadPool;
}

namespace zerorun::kernels {

struct OptimTable {
  const char* name = "";
  void (*adam)(const AdamHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq) = nullptr;
  void (*lion)(const LionHyper& h, const OptimSpan& s, float* exp_avg) = nullptr;
  void (*sgd)(const SgdHyper& h, const OptimSpan& s, float* momentum_buffer) = nullptr;
  void (*adagrad)(const AdagradHyper& h, const OptimSpan& s, float* sum) = nullptr;
  LambNorms (*lamb_moments)(const LambHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq) = nullptr;
  void (*lamb_apply)(const LambHyper& h, const OptimSpan& s, const float* exp_avg, const float* exp_avg_sq,
                     float trust_ratio) = nullptr;
};

// A device type's optimizer table (nullptr unregisters). Not for the CPU, which always has its own.
void RegisterOptimTable(DeviceType type, const OptimTable* table);
bool HasOptimTable(DeviceType type);
// The registered table of `device`'s type; InvalidArgument naming the device when there is none.
const OptimTable& OptimTableFor(Device device);

void AdamStepOnDevice(const AdamHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq,
                      ThreadPool* pool = nullptr);
void LionStepOnDevice(const LionHyper& h, const OptimSpan& s, float* exp_avg, ThreadPool* pool = nullptr);
void SgdStepOnDevice(const SgdHyper& h, const OptimSpan& s, float* momentum_buffer, ThreadPool* pool = nullptr);
void AdagradStepOnDevice(const AdagradHyper& h, const OptimSpan& s, float* sum, ThreadPool* pool = nullptr);
LambNorms LambMomentsOnDevice(const LambHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq,
                              ThreadPool* pool = nullptr);
void LambApplyOnDevice(const LambHyper& h, const OptimSpan& s, const float* exp_avg, const float* exp_avg_sq,
                       float trust_ratio, ThreadPool* pool = nullptr);

}  // namespace zerorun::kernels
