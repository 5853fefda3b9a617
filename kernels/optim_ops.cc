// The device dispatch of the optimizer updates (kernels/optim_ops.h).
#include "zerorun/kernels/optim_ops.h"

#include <atomic>

#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/optim.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels {

namespace {
std::atomic<const OptimTable*>& Slot(DeviceType type) {
  static std::atomic<const OptimTable*> slots[2] = {nullptr, nullptr};  // one per DeviceType
  return slots[static_cast<size_t>(type)];
}

const OptimTable* DeviceTable() {
  const Device d = KernelDevice();
  return d.is_cpu() ? nullptr : &OptimTableFor(d);
}
}  // namespace

void RegisterOptimTable(DeviceType type, const OptimTable* table) {
  if (type != DeviceType::kCPU) Slot(type).store(table, std::memory_order_release);
}

bool HasOptimTable(DeviceType type) {
  return type == DeviceType::kCPU || Slot(type).load(std::memory_order_acquire) != nullptr;
}

const OptimTable& OptimTableFor(Device device) {
  const OptimTable* t = device.is_cpu() ? nullptr : Slot(device.type).load(std::memory_order_acquire);
  if (t == nullptr) {
    ZR_THROW(InvalidArgument, "kernels: no optimizer kernels for {}{}", device.ToString(),
             device.is_cpu() ? " (the CPU runs kernels/cpu/optim.h directly)"
                             : ": zerorun was built without CUDA (reconfigure with -DZERORUN_CUDA=ON)");
  }
  return *t;
}

void AdamStepOnDevice(const AdamHyper& h, const OptimSpan& s, float* m, float* v, ThreadPool* pool) {
  if (const OptimTable* t = DeviceTable()) return t->adam(h, s, m, v);
  cpu::AdamStep(h, s, m, v, pool);
}

void LionStepOnDevice(const LionHyper& h, const OptimSpan& s, float* m, ThreadPool* pool) {
  if (const OptimTable* t = DeviceTable()) return t->lion(h, s, m);
  cpu::LionStep(h, s, m, pool);
}

void SgdStepOnDevice(const SgdHyper& h, const OptimSpan& s, float* momentum, ThreadPool* pool) {
  if (const OptimTable* t = DeviceTable()) return t->sgd(h, s, momentum);
  cpu::SgdStep(h, s, momentum, pool);
}

void AdagradStepOnDevice(const AdagradHyper& h, const OptimSpan& s, float* sum, ThreadPool* pool) {
  if (const OptimTable* t = DeviceTable()) return t->adagrad(h, s, sum);
  cpu::AdagradStep(h, s, sum, pool);
}

LambNorms LambMomentsOnDevice(const LambHyper& h, const OptimSpan& s, float* m, float* v, ThreadPool* pool) {
  if (const OptimTable* t = DeviceTable()) return t->lamb_moments(h, s, m, v);
  return cpu::LambMoments(h, s, m, v, pool);
}

void LambApplyOnDevice(const LambHyper& h, const OptimSpan& s, const float* m, const float* v, float trust,
                       ThreadPool* pool) {
  if (const OptimTable* t = DeviceTable()) return t->lamb_apply(h, s, m, v, trust);
  cpu::LambApply(h, s, m, v, trust, pool);
}

}  // namespace zerorun::kernels
