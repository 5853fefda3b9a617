// Assembles the CPU table: the reference table, overridden family by family by the fast kernels.
#include "zerorun/kernels/cpu/cpu.h"

namespace zerorun::kernels {

const KernelTable& CpuKernelTable() {
  static const KernelTable table = [] {
    KernelTable t = RefKernelTable();
    t.name = "cpu";
    cpu::FillGemm(t);
    cpu::FillElementwise(t);
    cpu::FillActivation(t);
    cpu::FillNorm(t);
    cpu::FillSoftmax(t);
    cpu::FillAttention(t);
    cpu::FillEmbedding(t);
    return t;
  }();
  return table;
}

}  // namespace zerorun::kernels
