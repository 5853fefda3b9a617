// Uses zerorun's public headers the way an embedding application does, and checks the results.
#include <atomic>
#include <cstdio>
#include <vector>

#include "zerorun/core/memory.h"
#include "zerorun/core/tensor.h"
#include "zerorun/core/thread_pool.h"

int main() {
  using namespace zerorun;
  MemoryAccount account("consumer");
  ScopedMemoryAccount scope(&account);
  Tensor x = Tensor::FromVector({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}, DType::kBF16, MemCategory::kParams);
  std::vector<float> v = x.Slice(1, 2).ToVector();
  std::atomic<int> sum{0};
  ParallelFor(0, 100, 1, [&](int64_t b, int64_t e) { sum += static_cast<int>(e - b); });
  bool ok = v.size() == 2 && v[0] == 3.0f && v[1] == 4.0f && sum == 100 &&
            account.Current(MemCategory::kParams) == 8;
  std::printf("%s\n", ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 1;
}
