// An engine constructor that throws after the strategy partitioned the model (a monitor that cannot
// open its file, a bad ZERORUN_PEAK_TFLOPS) leaves the model as it was: no observer, parameters with
// their own storage and values, usable by a second engine. Before, they pointed into the failed
// engine's freed buffers (ASan: use after free on the next access).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/runtime/engine_test_util.h"

namespace fs = std::filesystem;
using namespace zerorun;

TEST_SUITE("unit") {

TEST_CASE("engine: a constructor that throws after partitioning leaves the model as it was, at every stage") {
  const fs::path dir = fs::temp_directory_path() / ("zr_ctor_fail_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "a_file";
  std::ofstream(file) << "not a directory";
  for (int stage : {0, 1, 2, 3}) {
    for (int world : {1, 2}) {
      INFO("stage " << stage << ", world " << world);
      comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
        gpt::GptConfig gc = zrtest::TinyGpt(DType::kF32);
        gpt::Gpt model(gc);
        model.Initialize(11);
        std::vector<std::vector<float>> values;
        std::vector<const void*> storage;
        for (nn::Parameter* p : model.Parameters()) {
          values.push_back(p->engine_data().ToVector());
          storage.push_back(p->engine_data().data());
        }
        zrtest::RunSpec s;
        s.world = world;
        s.stage = stage;
        s.micro = 2;
        // rank 0 opens the TensorBoard file after the strategy is built; under a regular file it cannot
        s.extra_json = ", \"tensorboard\": {\"enabled\": true, \"output_path\": \"" + (file / "tb").string() + "\"}";
        bool threw = false;
        try {
          runtime::Engine engine(model, zrtest::LoadSpecConfig(s), comm);
        } catch (const Error& e) {
          threw = true;
          CHECK(std::string(e.what()).find((file / "tb").string()) != std::string::npos);
        }
        if (comm.rank() == 0) CHECK(threw);
        size_t i = 0;
        for (nn::Parameter* p : model.Parameters()) {
          REQUIRE(p->engine_data().defined());
          CHECK(p->available());
          if (threw) {
            CHECK(p->engine_data().data() == storage[i]);  // its own tensor again, not a view of the engine's
            CHECK(p->engine_data().ToVector() == values[i]);
          }
          ++i;
        }
        // Only rank 0 opens the file, so only its engine threw; the others' engines were built and are
        // gone again. A second engine on this model, on every rank:
        s.extra_json.clear();
        runtime::Engine again(model, zrtest::LoadSpecConfig(s), comm);
        auto [x, y] = zrtest::MicroBatch(0, 0, comm.rank(), world, 2, 1, gc.seq_len, gc.vocab_size);
        const float loss = again.Forward(x, y);
        again.Backward();
        again.Step();
        CHECK(std::isfinite(loss));
        CHECK(again.global_steps() == 1);
      });
    }
  }
  fs::remove_all(dir);
}

}  // TEST_SUITE
