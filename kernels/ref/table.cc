// Assembles the reference table from its families.
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels {

const KernelTable& RefKernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    t.name = "ref";
    ref::FillGemm(t);
    ref::FillEmbedding(t);
    ref::FillNorm(t);
    ref::FillActivation(t);
    ref::FillElementwise(t);
    ref::FillSoftmax(t);
    ref::FillAttention(t);
    return t;
  }();
  return table;
}

}  // namespace zerorun::kernels
