// Tensor views and copies, and memory accounting by category (per account, thread-safe, peaks).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "zerorun/core/device.h"
#include "zerorun/core/memory.h"
#include "zerorun/core/tensor.h"

namespace zr = zerorun;

TEST_SUITE("unit") {

TEST_CASE("views share storage and never copy") {
  zr::MemoryAccount acct("t");
  zr::ScopedMemoryAccount scope(&acct);
  zr::Tensor flat = zr::Tensor::Zeros({10}, zr::DType::kF32, zr::Device::CPU(), zr::MemCategory::kParams);
  CHECK(acct.Current(zr::MemCategory::kParams) == 40);
  zr::Tensor a = flat.View(2, {2, 2});
  zr::Tensor b = flat.View(6, {4});
  a.data_as<float>()[3] = 5.0f;   // element 2 + 3 = 5 of flat
  b.data_as<float>()[0] = 7.0f;   // element 6 of flat
  CHECK(flat.data_as<float>()[5] == 5.0f);
  CHECK(flat.data_as<float>()[6] == 7.0f);
  CHECK(acct.Current(zr::MemCategory::kParams) == 40);  // views charge nothing
  CHECK(a.storage() == flat.storage());
  CHECK(a.offset_bytes() == 8);
  CHECK_THROWS_AS(flat.View(8, {3}), zr::InvalidArgument);
  CHECK_THROWS_AS(flat.View(-1, {1}), zr::InvalidArgument);
}

TEST_CASE("slice, reshape and size") {
  zr::Tensor t = zr::Tensor::FromVector({0, 1, 2, 3, 4, 5}, {3, 2});
  zr::Tensor s = t.Slice(1, 3);
  CHECK(s.shape() == zr::Shape{2, 2});
  CHECK(s.ToVector() == std::vector<float>{2, 3, 4, 5});
  CHECK(t.Reshape({-1}).shape() == zr::Shape{6});
  CHECK(t.Reshape({2, -1}).size(-1) == 3);
  CHECK_THROWS_AS(t.Reshape({4, 2}), zr::InvalidArgument);
  CHECK_THROWS_AS(t.Slice(2, 4), zr::InvalidArgument);
  CHECK(t.Slice(3, 3).numel() == 0);
}

TEST_CASE("CopyFrom converts dtypes and To round-trips") {
  zr::Tensor src = zr::Tensor::FromVector({1.0f, -2.5f, 0.333333f, 65504.0f}, {4});
  zr::Tensor h = src.To(zr::DType::kF16);
  zr::Tensor b = src.To(zr::DType::kBF16);
  CHECK(h.dtype() == zr::DType::kF16);
  std::vector<float> hv = h.ToVector(), bv = b.ToVector();
  CHECK(hv[0] == 1.0f);
  CHECK(hv[1] == -2.5f);
  CHECK(hv[3] == 65504.0f);
  CHECK(bv[3] == 65536.0f);  // 65504 is not a bf16; nearest is 65536
  CHECK(std::fabs(hv[2] - 0.333333f) < 1e-3f);
  zr::Tensor wrong = zr::Tensor::Empty({3}, zr::DType::kF32);
  CHECK_THROWS_AS(wrong.CopyFrom(src), zr::InvalidArgument);
}

TEST_CASE("storage release returns bytes to the account; peaks stay") {
  zr::MemoryAccount acct("peaks");
  {
    zr::ScopedMemoryAccount scope(&acct);
    zr::Tensor a = zr::Tensor::Empty({1000}, zr::DType::kF32, zr::Device::CPU(), zr::MemCategory::kActivations);
    {
      zr::Tensor b = zr::Tensor::Empty({500}, zr::DType::kBF16, zr::Device::CPU(), zr::MemCategory::kGrads);
      CHECK(acct.CurrentTotal() == 5000);
    }
    CHECK(acct.Current(zr::MemCategory::kGrads) == 0);
    CHECK(acct.Peak(zr::MemCategory::kGrads) == 1000);
    CHECK(acct.PeakTotal() == 5000);
  }
  CHECK(acct.CurrentTotal() == 0);
  acct.Charge(zr::MemCategory::kNvme, 1 << 20);
  CHECK(acct.CurrentTotal() == 0);  // disk bytes are not memory
  CHECK(acct.Current(zr::MemCategory::kNvme) == 1 << 20);
  acct.ResetPeaks();
  CHECK(acct.PeakTotal() == 0);
  CHECK(acct.Summary().find("nvme 1.00 MiB") != std::string::npos);
}

TEST_CASE("a shared account lives as long as the storages charged to it") {
  auto acct = std::make_shared<zr::MemoryAccount>("engine");
  std::weak_ptr<zr::MemoryAccount> alive = acct;
  zr::Tensor kept;
  {
    zr::ScopedMemoryAccount scope(acct.get());
    kept = zr::Tensor::Zeros({16}, zr::DType::kF32, zr::Device::CPU(), zr::MemCategory::kParams);
    zr::Tensor freed = zr::Tensor::Zeros({8}, zr::DType::kF32, zr::Device::CPU(), zr::MemCategory::kGrads);
  }
  CHECK(acct->Current(zr::MemCategory::kParams) == 64);
  CHECK(acct->Current(zr::MemCategory::kGrads) == 0);
  acct.reset();  // the owner (an engine) is gone; its parameter view is not
  REQUIRE_FALSE(alive.expired());
  CHECK(alive.lock()->Current(zr::MemCategory::kParams) == 64);
  kept = zr::Tensor();  // releases into the live account, which then goes
  CHECK(alive.expired());
}

TEST_CASE("accounting is exact under concurrent allocation from many threads") {
  zr::MemoryAccount acct("mt");
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      zr::ScopedMemoryAccount scope(&acct);
      for (int i = 0; i < 200; ++i) {
        zr::Tensor x = zr::Tensor::Empty({64 + i}, zr::DType::kF32, zr::Device::CPU(), zr::MemCategory::kBuckets);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(acct.Current(zr::MemCategory::kBuckets) == 0);
  CHECK(acct.Peak(zr::MemCategory::kBuckets) >= (64 + 199) * 4);
  CHECK(acct.Peak(zr::MemCategory::kBuckets) <= 8 * (64 + 199) * 4);
  CHECK(zr::ParseMemCategory("optimizer") == zr::MemCategory::kOptimizer);
  CHECK_THROWS_AS(zr::ParseMemCategory("weights"), zr::InvalidArgument);
}

TEST_CASE("the host allocator reuses mid-size and large blocks, large ones aligned to huge pages") {
  zr::Allocator& alloc = zr::GetAllocator(zr::Device::CPU());
  alloc.EmptyCache();
  size_t bytes = (size_t{6} << 20) + 123;
  void* p = alloc.Allocate(bytes);
  CHECK(reinterpret_cast<uintptr_t>(p) % (2u << 20) == 0);
  static_cast<char*>(p)[bytes - 1] = 1;
  alloc.Deallocate(p, bytes);
  CHECK(alloc.CachedBytes() == (size_t{8} << 20));
  void* q = alloc.Allocate(bytes);
  CHECK(q == p);
  CHECK(alloc.CachedBytes() == 0);
  alloc.Deallocate(q, bytes);
  alloc.EmptyCache();
  CHECK(alloc.CachedBytes() == 0);
  // Mid-size blocks (activations of a small model) are cached by size class: eight per power of two.
  const size_t mid = (size_t{100} << 10) + 5;  // class of 64 KiB .. 128 KiB in 8 KiB steps: 104 KiB
  void* m = alloc.Allocate(mid);
  CHECK(reinterpret_cast<uintptr_t>(m) % 4096 == 0);
  static_cast<char*>(m)[mid - 1] = 1;
  alloc.Deallocate(m, mid);
  CHECK(alloc.CachedBytes() == (size_t{104} << 10));
  void* m2 = alloc.Allocate((size_t{104} << 10) - 1);  // another size of the same class
  CHECK(m2 == m);
  CHECK(alloc.CachedBytes() == 0);
  void* m3 = alloc.Allocate((size_t{104} << 10) + 1);  // the next class: not that block
  CHECK(m3 != m);
  alloc.Deallocate(m2, (size_t{104} << 10) - 1);
  alloc.Deallocate(m3, (size_t{104} << 10) + 1);
  CHECK(alloc.CachedBytes() == (size_t{104} << 10) + (size_t{112} << 10));
  alloc.EmptyCache();
  void* small = alloc.Allocate(100);
  CHECK(reinterpret_cast<uintptr_t>(small) % 64 == 0);
  alloc.Deallocate(small, 100);
}

TEST_CASE("CPU streams and events complete immediately; CUDA without a GPU is a clear error") {
  auto s = zr::CreateStream(zr::Device::CPU());
  auto e = zr::CreateEvent(zr::Device::CPU());
  e->Record(*s);
  CHECK(e->Query());
  s->Synchronize();
  CHECK(zr::Device::CUDA(1).ToString() == "cuda:1");
  if (!zr::HasDeviceBackend(zr::DeviceType::kCUDA)) {
    CHECK_THROWS_AS(zr::GetAllocator(zr::Device::CUDA(0)), zr::InvalidArgument);
  } else if (zr::GetDeviceBackend(zr::DeviceType::kCUDA).DeviceCount() == 0) {
    CHECK_THROWS_AS(zr::GetAllocator(zr::Device::CUDA(0)), zr::InvalidArgument);
  }
}

}  // TEST_SUITE
