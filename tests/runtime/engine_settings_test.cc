// The config keys the engine applies beyond the training step (runtime/engine_settings.h):
// fp16.auto_cast, log_level, comms_logger, dump_state, timers.throughput.enabled.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine_test_util.h"
#include "zerorun/core/log.h"
#include "zerorun/runtime/engine_settings.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/loss.h"

using namespace zrtest;
namespace rt = zerorun::runtime;
namespace fs = std::filesystem;

namespace {

// A model that takes floating-point features (B, 4) in its own dtype: one Linear to V logits.
class FeatureModel final : public nn::LossModule {
 public:
  explicit FeatureModel(DType dtype) : LossModule("FeatureModel") {
    nn::LinearOptions lo;
    lo.dtype = dtype;
    lin_ = AddModule("lin", std::make_unique<nn::Linear>(4, 8, lo));
    loss_ = AddModule("loss", std::make_unique<nn::CrossEntropyLoss>());
  }
  DType seen = DType::kI32;

 protected:
  float OnForwardLoss(const Tensor& x, const Tensor& targets) override {
    seen = x.dtype();
    return loss_->Forward(lin_->Forward(x), targets);
  }
  void OnBackwardLoss(float scale) override { lin_->Backward(loss_->Backward(scale)); }

 private:
  nn::Linear* lin_;
  nn::CrossEntropyLoss* loss_;
};

rt::Config Cfg(const std::string& extra, int world = 1) {
  rt::LoadOptions lo;
  lo.world_size = world;
  lo.log_warnings = false;
  return rt::LoadConfigString(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"})" + extra + "}",
                              lo);
}

// Log lines written while `fn` runs, at info level, and the level restored after.
std::string CaptureLog(const std::function<void()>& fn) {
  const fs::path p = fs::temp_directory_path() / ("zr_settings_log_" + std::to_string(::getpid()));
  const LogLevel before = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  SetLogFile(p.string());
  fn();
  SetLogFile("");
  SetLogLevel(before);
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  fs::remove(p);
  return ss.str();
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("fp16.auto_cast: floating-point inputs reach an fp16 model as fp16; without it the model refuses fp32") {
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    Tensor x = Tensor::FromVector({0.5f, -1, 2, 0.25f, 1, 1, -2, 3}, {2, 4});  // fp32 features
    Tensor y = Tensor::Empty({2}, DType::kI32);
    y.data_as<int32_t>()[0] = 1;
    y.data_as<int32_t>()[1] = 5;
    {
      FeatureModel m(DType::kF16);
      m.Initialize(3);
      rt::Engine e(m, Cfg(R"(, "fp16": {"enabled": true, "auto_cast": true})"), comm);
      const float loss = e.Forward(x, y);
      CHECK(m.seen == DType::kF16);
      CHECK(loss > 0);
      e.Backward();
      e.Step();
      // Token ids are not floating point: they pass unchanged.
      CHECK(rt::AutoCastInput(e.config(), y).dtype() == DType::kI32);
      CHECK(rt::AutoCastInput(e.config(), x).ToVector() == x.ToVector());  // the values, in fp16
    }
    FeatureModel m(DType::kF16);
    m.Initialize(3);
    rt::Engine e(m, Cfg(R"(, "fp16": {"enabled": true})"), comm);
    CHECK_THROWS_AS(e.Forward(x, y), InvalidArgument);  // Linear refuses fp32 input
    CHECK(m.seen == DType::kF32);
  });
}

TEST_CASE("log_level sets zerorun's level (DeepSpeed names); ZERORUN_LOG_LEVEL in the environment wins") {
  const LogLevel before = GetLogLevel();
  const char* env = std::getenv("ZERORUN_LOG_LEVEL");
  const std::string saved = env ? env : "";
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    unsetenv("ZERORUN_LOG_LEVEL");
    for (auto [name, level] : {std::pair{"error", LogLevel::kError}, std::pair{"critical", LogLevel::kError},
                               std::pair{"debug", LogLevel::kDebug}, std::pair{"warning", LogLevel::kWarning}}) {
      gpt::Gpt model(TinyGpt(DType::kF32));
      model.Initialize(1);
      SetLogLevel(LogLevel::kInfo);
      rt::Engine e(model, Cfg(std::string(R"(, "log_level": ")") + name + "\""), comm);
      CHECK_MESSAGE(GetLogLevel() == level, name);
    }
    setenv("ZERORUN_LOG_LEVEL", "info", 1);
    SetLogLevel(LogLevel::kInfo);
    gpt::Gpt model(TinyGpt(DType::kF32));
    model.Initialize(1);
    rt::Engine e(model, Cfg(R"(, "log_level": "error")"), comm);
    CHECK(GetLogLevel() == LogLevel::kInfo);
  });
  if (env) setenv("ZERORUN_LOG_LEVEL", saved.c_str(), 1);
  else unsetenv("ZERORUN_LOG_LEVEL");
  SetLogLevel(before);
}

TEST_CASE("comms_logger: the section reaches the communicator's logger; without it the logger is untouched") {
  for (bool on : {true, false}) {
    int records = -1;
    comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
      gpt::Gpt model(TinyGpt(DType::kF32));
      model.Initialize(1);
      rt::Engine e(model, Cfg(on ? R"(, "comms_logger": {"enabled": true, "prof_all": false, "prof_ops": ["all_reduce"]})" : "", 2), comm);
      auto [x, y] = MicroBatch(0, 0, comm.rank(), 2, 2, 1, 8, 16);
      e.Forward(x, y);
      e.Backward();
      e.Step();
      if (comm.rank() == 0) {
        records = static_cast<int>(comm.Records().size());
        for (const comm::CommRecord& r : comm.Records()) CHECK(r.op == comm::OpType::kAllReduce);
      }
    });
    CHECK_MESSAGE((on ? records > 0 : records == 0), "comms_logger ", on);
  }
}

TEST_CASE("dump_state logs the engine's layout and effective config; timers.throughput.enabled gates samples/s") {
  for (bool throughput : {true, false}) {
    const std::string log = CaptureLog([&] {
      comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
        gpt::Gpt model(TinyGpt(DType::kF32));
        model.Initialize(1);
        rt::Engine e(model,
                     Cfg(std::string(R"(, "dump_state": true, "steps_per_print": 1, "timers": {"throughput": {"enabled": )") +
                         (throughput ? "true" : "false") + "}}"),
                     comm);
        for (int step = 0; step < 3; ++step) {
          auto [x, y] = MicroBatch(step, 0, 0, 1, 2, 1, 8, 16);
          e.Forward(x, y);
          e.Backward();
          e.Step();
        }
      });
    });
    CHECK(log.find("engine state (dump_state): rank 0 of 1, ZeRO stage 0, fp32") != std::string::npos);
    CHECK(log.find("Effective values (origin)") != std::string::npos);
    CHECK(log.find("step=3") != std::string::npos);
    CHECK((log.find("samples/s=") != std::string::npos) == throughput);
  }
}

}  // TEST_SUITE
