// Assembles the CUDA kernel table and registers it for DeviceType::kCUDA at load time, so
// KernelDeviceScope(Device::CUDA(i)) routes the public entries (ops.h) here in CUDA builds.
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {

const KernelTable& CudaKernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    t.name = "cuda";
    FillGemm(t);
    FillEmbedding(t);
    FillNorm(t);
    FillActivation(t);
    FillElementwise(t);
    FillReduce(t);
    FillSoftmax(t);
    FillAttention(t);
    return t;
  }();
  return table;
}

namespace {
const bool kRegistered = [] {
  RegisterKernelTable(DeviceType::kCUDA, &CudaKernelTable());
  return true;
}();
}  // namespace

}  // namespace zerorun::kernels::cuda
