// Backend selection: the public entries follow SetKernelBackend; both tables are complete.
#include <doctest/doctest.h>

#include "kernel_test_util.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

TEST_SUITE("unit") {

TEST_CASE("every table entry is set and the backend switch routes calls") {
  for (const KernelTable* k : {&RefKernelTable(), &CpuKernelTable()}) {
    CAPTURE(k->name);
    // The table is a struct of pointers after the name: every one must be non-null.
    const auto* begin = reinterpret_cast<const char*>(k) + sizeof(const char*);
    const auto* end = reinterpret_cast<const char*>(k + 1);
    for (const char* p = begin; p < end; p += sizeof(void*)) {
      void* fn;
      std::memcpy(&fn, p, sizeof fn);
      CHECK(fn != nullptr);
    }
  }
  Backend before = ActiveBackend();
  SetKernelBackend(Backend::kRef);
  CHECK(&ActiveKernelTable() == &RefKernelTable());
  CHECK(std::string(BackendName(ActiveBackend())) == "ref");
  SetKernelBackend(Backend::kCpu);
  CHECK(&ActiveKernelTable() == &CpuKernelTable());
  SetKernelBackend(before);
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
