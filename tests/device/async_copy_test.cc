// Copy scheduling for offload on a device (core/async_copy.h), checked by the fake device's ordering
// model: every copy after its producer, every consumer after its copy.
#include <doctest/doctest.h>

#include "fake_device.h"
#include "zerorun/core/async_copy.h"
#include "zerorun/kernels/ops.h"

using namespace zerorun;
using zrtest::fake::FakeCudaDevice;

TEST_SUITE("unit") {

TEST_CASE("AsyncCopier: D2H after the producing kernel and H2D before the consuming one, on a stream of its own") {
  FakeCudaDevice fake;
  const Device cuda = Device::CUDA(0);
  Tensor grads = Tensor::Empty({1000}, DType::kF32, cuda);
  Tensor host = PinnedHostTensor({1000}, DType::kF32, cuda);
  CHECK(host.device().is_cpu());
  CHECK(host.storage()->category() == MemCategory::kPinned);
  AsyncCopier copier(cuda);
  CHECK(&copier.stream() != &DefaultStream(cuda));
  {
    kernels::KernelDeviceScope scope(cuda);
    kernels::Fill(grads.data(), 2.5f, 1000, DType::kF32);  // "backward" produces the gradients
  }
  AsyncCopier::Ticket down = copier.Copy(host, grads);  // ordered after the fill by the event
  {
    kernels::KernelDeviceScope scope(cuda);
    kernels::Fill(grads.data(), 0.0f, 1000, DType::kF32);  // the next micro-step reuses the buffer: a race
  }
  REQUIRE(fake.violation_count() == 1);  // the copy's read vs the refill: the copier cannot order that
  CHECK(fake.violations()[0].find("fill") != std::string::npos);
  CHECK(fake.violations()[0].find("copy (source)") != std::string::npos);

  AsyncCopier::Wait(down);  // the host has seen the copy finish: later work is ordered after it

  // The right way: the refill waits for the copy.
  const int64_t v = fake.violation_count();
  {
    kernels::KernelDeviceScope scope(cuda);
    kernels::Fill(grads.data(), 2.5f, 1000, DType::kF32);
  }
  down = copier.Copy(host, grads);
  AsyncCopier::WaitOn(down, DefaultStream(cuda));
  {
    kernels::KernelDeviceScope scope(cuda);
    kernels::Fill(grads.data(), 0.0f, 1000, DType::kF32);
  }
  AsyncCopier::Wait(down);  // the host reads the pinned copy only after this
  CHECK(host.ToVector() == std::vector<float>(1000, 2.5f));
  CHECK(fake.violation_count() == v);

  // H2D: updated parameters back; the consumer waits on its stream (no host block).
  Tensor params = Tensor::Empty({1000}, DType::kF32, cuda);
  AsyncCopier::Ticket up = copier.Copy(params, host);
  AsyncCopier::WaitOn(up, DefaultStream(cuda));
  {
    kernels::KernelDeviceScope scope(cuda);
    CHECK(kernels::SumSquares(params.data(), 1000, DType::kF32) == doctest::Approx(1000 * 6.25));
  }
  CHECK(fake.violation_count() == v);
  CHECK(copier.copies() == 3);

  // A consumer that does not wait races the copy.
  up = copier.Copy(params, host);
  {
    kernels::KernelDeviceScope scope(cuda);
    kernels::Scale(params.data(), params.data(), 2.0f, 1000, DType::kF32);
  }
  CHECK(fake.violation_count() > v);
}

TEST_CASE("AsyncCopier: refuses copies that do not cross its device and the host, and works on the CPU") {
  FakeCudaDevice fake;
  AsyncCopier copier(Device::CUDA(0));
  Tensor a = Tensor::Zeros({4}, DType::kF32);
  Tensor b = Tensor::Zeros({4}, DType::kF32);
  CHECK_THROWS_WITH_AS(copier.Copy(a, b), doctest::Contains("is not between cuda:0 and the host"), InvalidArgument);
  Tensor d = Tensor::Zeros({3}, DType::kF32, Device::CUDA(0));
  CHECK_THROWS_WITH_AS(copier.Copy(d, a), doctest::Contains("sizes differ"), InvalidArgument);

  AsyncCopier cpu(Device::CPU());
  Tensor src = Tensor::FromVector({1, 2, 3, 4}, {4});
  AsyncCopier::Wait(cpu.Copy(a, src));
  CHECK(a.ToVector() == std::vector<float>{1, 2, 3, 4});
}

}  // TEST_SUITE
