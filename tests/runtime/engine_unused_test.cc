// zero_optimization.ignore_unused_parameters at every stage (DeepSpeed's
// TestStage2IgnoreUnusedParameters, rephrased): a trainable parameter that gets no gradient in a
// backward counts as zero when the option is true (the default) and is an error naming it when false.
#include <doctest/doctest.h>

#include <memory>
#include <mutex>
#include <string>

#include "engine_test_util.h"
#include "zerorun/runtime/nn/linear.h"

using namespace zrtest;

namespace {

// loss = 0.5 · mean(used(x)²); `unused` is a trainable layer the forward never calls.
class PartlyUsed final : public nn::LossModule {
 public:
  PartlyUsed() : LossModule("PartlyUsed") {
    used_ = AddModule("used", std::make_unique<nn::Linear>(4, 3));
    unused_ = AddModule("unused", std::make_unique<nn::Linear>(4, 3));
  }
  nn::Linear* unused() const { return unused_; }

 protected:
  float OnForwardLoss(const Tensor& inputs, const Tensor&) override {
    y_ = used_->Forward(inputs);  // (B, 3)
    double sum = 0;
    for (float v : y_.ToVector()) sum += 0.5 * static_cast<double>(v) * v;
    return static_cast<float>(sum / static_cast<double>(y_.numel()));
  }
  void OnBackwardLoss(float grad_scale) override {
    Tensor dy = Tensor::Empty(y_.shape(), DType::kF32);
    const float* y = y_.data_as<float>();
    float* d = dy.data_as<float>();
    for (int64_t i = 0; i < y_.numel(); ++i) d[i] = grad_scale * y[i] / static_cast<float>(y_.numel());
    used_->Backward(dy);
  }

 private:
  nn::Linear* used_ = nullptr;
  nn::Linear* unused_ = nullptr;
  Tensor y_;
};

std::string Json(int stage, bool ignore) {
  return Format(R"({{"train_micro_batch_size_per_gpu": 2,
    "optimizer": {{"type": "Adam", "params": {{"lr": 0.05, "weight_decay": 0}}}},
    "zero_optimization": {{"stage": {}, "ignore_unused_parameters": {}, "stage3_param_persistence_threshold": 0}}}})",
                stage, ignore ? "true" : "false");
}

Tensor Inputs(int step, int rank) {
  Tensor x = Tensor::Empty({2, 4}, DType::kF32);
  for (int64_t i = 0; i < 8; ++i) x.data_as<float>()[i] = static_cast<float>((i * 7 + step * 3 + rank) % 5) - 2.0f;
  return x;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("ignore_unused_parameters: true counts missing gradients as zero, false names the parameters") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 2}) {
      CAPTURE(stage);
      CAPTURE(world);
      std::mutex mu;
      std::vector<std::string> errors;
      bool unused_unchanged = true, trained = true;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        runtime::LoadOptions lo;
        lo.world_size = world;
        lo.log_warnings = false;
        for (bool ignore : {true, false}) {
          PartlyUsed model;
          model.Initialize(11);
          std::vector<float> unused_before = model.unused()->weight()->engine_data().ToVector();
          runtime::Engine engine(model, runtime::LoadConfigString(Json(stage, ignore), lo), c);
          Tensor none = Tensor::Empty({0}, DType::kI32);
          if (!ignore) {
            engine.Forward(Inputs(0, c.rank()), none);
            try {
              engine.Backward();
            } catch (const InvalidArgument& e) {
              std::lock_guard<std::mutex> lock(mu);
              errors.push_back(e.what());
            }
            continue;
          }
          double first = 0, last = 0;
          for (int step = 0; step < 5; ++step) {
            double loss = engine.Forward(Inputs(step, c.rank()), none);
            engine.Backward();
            engine.Step();
            if (step == 0) first = loss;
            last = loss;
          }
          std::vector<Tensor> params = engine.GatherParameters();
          const auto& plist = model.Parameters();
          std::lock_guard<std::mutex> lock(mu);
          for (size_t i = 0; i < plist.size(); ++i) {
            // Adam with zero gradients and no weight decay leaves a parameter exactly where it was.
            if (plist[i] == model.unused()->weight()) unused_unchanged &= params[i].ToVector() == unused_before;
          }
          trained &= last < first;
        }
      });
      CHECK(unused_unchanged);
      CHECK(trained);
      REQUIRE(errors.size() == static_cast<size_t>(world));
      for (const std::string& e : errors) {
        CHECK(e.find("2 trainable parameter(s) got no gradient") != std::string::npos);
        CHECK(e.find("unused.weight") != std::string::npos);
        CHECK(e.find("unused.bias") != std::string::npos);
        CHECK(e.find(": used.") == std::string::npos);  // the used layer is not named
        CHECK(e.find(", used.") == std::string::npos);
        CHECK(e.find("ignore_unused_parameters") != std::string::npos);
      }
    }
  }
}

}  // TEST_SUITE
