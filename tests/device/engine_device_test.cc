// The module graph, the engine and zero/ on Device::CUDA(0), through the recording fake device
// (fake_device.h): one code path, no host access to device memory (tagged addresses would fault),
// training bitwise equal to the CPU run, and every kernel, copy and collective ordered after what it
// depends on.
#include <doctest/doctest.h>

#include <filesystem>
#include <mutex>
#include <unistd.h>

#include "fake_device.h"
#include "tests/runtime/engine_test_util.h"
#include "zerorun/core/format.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/safetensors.h"

using namespace zerorun;
using zrtest::fake::FakeCudaDevice;

namespace {

struct DeviceRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // per rank
};

// Trains the tiny GPT (fused attention) per `s`; with `fake` on the fake CUDA device of every rank
// (the ranks share the one fake cuda:0, which is enough for the ordering model).
DeviceRun TrainOn(const zrtest::RunSpec& s, FakeCudaDevice* fake) {
  DeviceRun out;
  out.params.resize(static_cast<size_t>(s.world));
  std::vector<std::vector<double>> losses(static_cast<size_t>(s.world));
  std::mutex mu;
  comm::RunLocalRanks(s.world, [&](comm::Communicator& local) {
    std::unique_ptr<comm::Communicator> dev;
    if (fake != nullptr) dev = zrtest::fake::MakeFakeDeviceComm(local);
    comm::Communicator& c = dev ? *dev : local;
    runtime::Config cfg = zrtest::LoadSpecConfig(s);
    gpt::GptConfig gc = zrtest::TinyGpt(s.dtype);
    gc.fused_attention = true;
    gc.dropout = 0.1f;
    gpt::Gpt model(gc);
    model.Initialize(s.seed);  // on the host: the engine copies the values to the device
    runtime::Engine engine(model, cfg, c);
    std::vector<double> l;
    for (int step = 0; step < s.steps; ++step) {
      double sum = 0;
      for (int m = 0; m < s.gas; ++m) {
        auto [x, y] = zrtest::MicroBatch(step, m, c.rank(), s.world, s.micro, s.gas, gc.seq_len, gc.vocab_size);
        sum += engine.Forward(x, y);
        engine.Backward();
        engine.Step();
      }
      l.push_back(sum / static_cast<double>(s.gas));
    }
    std::vector<float> flat = zrtest::FlatParameters(engine);
    std::lock_guard<std::mutex> lock(mu);
    losses[static_cast<size_t>(c.rank())] = l;
    out.params[static_cast<size_t>(c.rank())] = flat;
  });
  out.losses = losses[0];
  return out;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("fake device: tensors live behind tagged addresses; copies and kernels go through the abstraction") {
  FakeCudaDevice fake;
  Tensor h = Tensor::FromVector({1, 2, 3, 4}, {4});
  Tensor d = Tensor::Empty({4}, DType::kF32, Device::CUDA(0));
  CHECK(zrtest::fake::IsTagged(d.data()));
  d.CopyFrom(h);
  {
    kernels::KernelDeviceScope scope(Device::CUDA(0));
    kernels::Scale(d.data(), d.data(), 2.0f, 4, DType::kF32);
    CHECK(kernels::SumSquares(d.data(), 4, DType::kF32) == doctest::Approx(4.0 * 30));
  }
  CHECK(d.ToVector() == std::vector<float>{2, 4, 6, 8});
  CHECK(fake.counts().kernels == 2);
  CHECK(fake.counts().copies >= 2);
  CHECK(fake.violation_count() == 0);
}

TEST_CASE("fake device: the checker reports work on two streams with no event between them, and not with one") {
  FakeCudaDevice fake;
  const Device cuda = Device::CUDA(0);
  Tensor d = Tensor::Zeros({256}, DType::kF32, cuda);
  std::unique_ptr<Stream> side = CreateStream(cuda);
  {
    kernels::KernelDeviceScope scope(cuda, side.get());
    kernels::Fill(d.data(), 1.0f, 256, DType::kF32);  // produced on the side stream
  }
  {
    kernels::KernelDeviceScope scope(cuda);  // consumed on the default stream: a race
    kernels::Scale(d.data(), d.data(), 2.0f, 256, DType::kF32);
  }
  REQUIRE(fake.violation_count() >= 1);
  CHECK(fake.violations()[0].find("scale on stream") != std::string::npos);
  CHECK(fake.violations()[0].find("fill") != std::string::npos);

  side->Synchronize();  // the host has seen both streams finish: what follows is ordered after them
  DefaultStream(cuda).Synchronize();
  const int64_t before = fake.violation_count();
  std::unique_ptr<Event> ev = CreateEvent(cuda);
  {
    kernels::KernelDeviceScope scope(cuda, side.get());
    kernels::Fill(d.data(), 3.0f, 256, DType::kF32);
    ev->Record(*side);
  }
  ev->Block(DefaultStream(cuda));
  {
    kernels::KernelDeviceScope scope(cuda);
    kernels::Scale(d.data(), d.data(), 2.0f, 256, DType::kF32);  // ordered by the event
  }
  CHECK(fake.violation_count() == before);
}

TEST_CASE("device communicator: a collective is ordered after the kernels of the stream that submitted it") {
  FakeCudaDevice fake;
  const Device cuda = Device::CUDA(0);
  comm::RunLocalRanks(2, [&](comm::Communicator& local) {
    auto c = zrtest::fake::MakeFakeDeviceComm(local);
    Tensor t = Tensor::Zeros({64}, DType::kF32, cuda);
    std::unique_ptr<Stream> side = CreateStream(cuda);
    // Produced on `side` and submitted from a scope on `side`: OnSubmit's event orders the collective.
    kernels::KernelDeviceScope scope(cuda, side.get());
    kernels::Fill(t.data(), static_cast<float>(c->rank() + 1), 64, DType::kF32);
    c->AllReduce(t, comm::ReduceOp::kSum).Wait();
    CHECK(t.ToVector() == std::vector<float>(64, 3.0f));
  });
  CHECK(fake.counts().collectives == 2);
  CHECK(fake.violation_count() == 0);

  // The same produced on `side` but submitted from the default stream: the collective races the fill.
  comm::RunLocalRanks(1, [&](comm::Communicator& local) {
    auto c = zrtest::fake::MakeFakeDeviceComm(local);
    Tensor t = Tensor::Zeros({64}, DType::kF32, cuda);
    std::unique_ptr<Stream> side = CreateStream(cuda);
    {
      kernels::KernelDeviceScope scope(cuda, side.get());
      kernels::Fill(t.data(), 1.0f, 64, DType::kF32);
    }
    kernels::KernelDeviceScope scope(cuda);
    c->AllReduce(t, comm::ReduceOp::kSum).Wait();
  });
  REQUIRE(fake.violation_count() >= 1);
  CHECK(fake.violations()[0].find("all_reduce") != std::string::npos);
}

TEST_CASE("engine on a CUDA device (fake): stages 0-3, fp32 and bf16, one and two ranks, bitwise the CPU run") {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int world : {1, 2}) {
      for (int stage : {0, 1, 2, 3}) {
        CAPTURE(DTypeName(dtype));
        CAPTURE(world);
        CAPTURE(stage);
        zrtest::RunSpec s;
        s.world = world;
        s.stage = stage;
        s.dtype = dtype;
        s.micro = 2;
        s.gas = 2;
        s.steps = 3;
        DeviceRun cpu = TrainOn(s, nullptr);
        FakeCudaDevice fake;
        DeviceRun dev = TrainOn(s, &fake);
        CHECK(dev.losses == cpu.losses);
        CHECK(dev.params == cpu.params);
        const zrtest::fake::Counts n = fake.counts();
        CHECK(n.kernels > 100);
        CHECK(n.copies > 0);
        if (world > 1) CHECK(n.collectives > 0);
        for (const std::string& v : fake.violations()) MESSAGE(v);
        CHECK(fake.violation_count() == 0);
      }
    }
  }
}

TEST_CASE("engine on a CUDA device (fake): CPU optimizer offload, stages 1-3, bitwise the CPU run with offload") {
  for (int world : {1, 2}) {
    for (int stage : {1, 2, 3}) {
      CAPTURE(world);
      CAPTURE(stage);
      zrtest::RunSpec s;
      s.world = world;
      s.stage = stage;
      s.dtype = DType::kBF16;
      s.micro = 2;
      s.gas = 2;
      s.steps = 3;
      s.zero_json = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
      DeviceRun cpu = TrainOn(s, nullptr);
      FakeCudaDevice fake;
      DeviceRun dev = TrainOn(s, &fake);
      CHECK(dev.losses == cpu.losses);
      CHECK(dev.params == cpu.params);
      CHECK(fake.counts().copies > 0);
      for (const std::string& v : fake.violations()) MESSAGE(v);
      CHECK(fake.violation_count() == 0);
    }
  }
}

TEST_CASE("engine on a CUDA device (fake): parameter offload (cpu, nvme) with CPU optimizer offload, bitwise") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("zr_device_param_offload_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (int world : {1, 2}) {
    for (const char* device : {"cpu", "nvme"}) {
      CAPTURE(world);
      CAPTURE(std::string(device));
      zrtest::RunSpec s;
      s.world = world;
      s.stage = 3;
      s.dtype = DType::kBF16;
      s.micro = 2;
      s.gas = 2;
      s.steps = 3;
      s.zero_json = Format(R"(, "stage3_param_persistence_threshold": 0,
          "offload_optimizer": {{"device": "cpu", "pin_memory": true}},
          "offload_param": {{"device": "{}", "nvme_path": "{}", "buffer_count": 2}})", device, dir.string());
      DeviceRun cpu = TrainOn(s, nullptr);
      FakeCudaDevice fake;
      DeviceRun dev = TrainOn(s, &fake);
      CHECK(dev.losses == cpu.losses);
      CHECK(dev.params == cpu.params);
      CHECK(fake.counts().copies > 0);  // every gather copies its shard host -> device first
      for (const std::string& v : fake.violations()) MESSAGE(v);
      CHECK(fake.violation_count() == 0);
    }
  }
  // Without optimizer offload the update would run on the device over host shards: refused by name.
  zrtest::RunSpec s;
  s.stage = 3;
  s.dtype = DType::kBF16;
  s.micro = 2;
  s.steps = 1;
  s.zero_json = R"(, "offload_param": {"device": "cpu"})";
  FakeCudaDevice fake;
  std::string msg;
  try {
    TrainOn(s, &fake);
  } catch (const ConfigError& e) {
    msg = e.what();
  }
  CHECK(msg.find("zero_optimization.offload_param on cuda") != std::string::npos);
  CHECK(msg.find("needs offload_optimizer") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("engine on a CUDA device (fake): Save16BitModel stages device tensors through the host") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("zr_device_save_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  FakeCudaDevice fake;
  zrtest::RunSpec s;
  s.world = 2;
  s.stage = 3;
  s.dtype = DType::kBF16;
  s.micro = 2;
  s.steps = 2;
  s.zero_json = R"(, "stage3_gather_16bit_weights_on_model_save": true)";
  comm::RunLocalRanks(s.world, [&](comm::Communicator& local) {
    auto c = zrtest::fake::MakeFakeDeviceComm(local);
    runtime::Config cfg = zrtest::LoadSpecConfig(s);
    gpt::GptConfig gc = zrtest::TinyGpt(s.dtype);
    gpt::Gpt model(gc);
    model.Initialize(s.seed);
    runtime::Engine engine(model, cfg, *c);
    for (int step = 0; step < s.steps; ++step) {
      auto [x, y] = zrtest::MicroBatch(step, 0, c->rank(), s.world, s.micro, 1, gc.seq_len, gc.vocab_size);
      engine.Forward(x, y);
      engine.Backward();
      engine.Step();
    }
    CHECK(engine.Save16BitModel(dir.string()));
    std::vector<Tensor> gathered = engine.GatherParameters();
    if (c->rank() == 0) {
      runtime::SafetensorsReader reader((dir / "model.safetensors").string());
      std::vector<nn::Parameter*> params = model.Parameters();
      REQUIRE(params.size() == gathered.size());
      for (size_t i = 0; i < params.size(); ++i) {
        CAPTURE(params[i]->name());
        CHECK(gathered[i].device() == Device::CUDA(0));
        CHECK(reader.Read(params[i]->name()).ToVector() == gathered[i].ToVector());
      }
    }
  });
  CHECK(fake.violation_count() == 0);
  fs::remove_all(dir);
}

}  // TEST_SUITE
