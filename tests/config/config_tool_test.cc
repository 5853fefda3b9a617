// zerorun-config's exit codes and output, and the example configs in configs/ (every one must load).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "config_test_util.h"
#include "zerorun/runtime/engine_validate.h"

using namespace zr_config_test;
namespace fs = std::filesystem;

namespace {

std::string BinDir() {
  const char* d = std::getenv("ZERORUN_TEST_BINARY_DIR");
  return d ? std::string(d) + "/bin" : std::string("bin");
}

fs::path SourceDir() {
  // The build tree links include/zerorun to the source root.
  if (const char* d = std::getenv("ZERORUN_TEST_BINARY_DIR")) return fs::canonical(fs::path(d) / "include" / "zerorun");
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

struct Run {
  int rc;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Run Tool(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("zr_cfg_tool_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd = BinDir() + "/zerorun-config " + args + " >" + (dir / "out").string() + " 2>" +
                          (dir / "err").string();
  const int status = std::system(cmd.c_str());
  Run r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(dir / "out"), Slurp(dir / "err")};
  fs::remove_all(dir);
  return r;
}

fs::path WriteTemp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("configs/: every example config loads at world sizes 1, 2 and 4; warnings and refusals are declared") {
    int n = 0;
    for (const auto& e : fs::directory_iterator(SourceDir() / "configs")) {
      if (e.path().extension() != ".json") continue;
      ++n;
      for (int w : {1, 2, 4}) {
        rt::LoadOptions o = Opts(w);
        try {
          const rt::Config c = rt::LoadConfigFile(e.path().string(), o);
          CHECK(c.scheduler.type != rt::SchedulerKind::kNone);
          // Every warning is a key declared "warned"; no example is refused by the engine (tests/train
          // runs each example through zerorun-train).
          for (const rt::ConfigIssue& i : c.warnings()) {
            const rt::KeyDisposition* d = rt::FindKeyDisposition(i.path);
            CHECK_MESSAGE((d && d->use == rt::KeyUse::kWarned), e.path().string(), ": ", i.ToString());
          }
          for (const rt::ConfigIssue& i : rt::EngineConfigProblems(c, w)) {
            FAIL_CHECK(e.path().string(), " at world size ", w, " is refused: ", i.ToString());
          }
        } catch (const zerorun::Error& err) {
          FAIL_CHECK(e.path().string(), " at world size ", w, ": ", err.what());
        }
      }
    }
    CHECK(n >= 7);
  }
}

TEST_SUITE("multiproc") {
  TEST_CASE("tool: check exit codes and one error per line starting with the JSON path") {
    const fs::path good = WriteTemp("good.json", R"({"train_batch_size": 32, "optimizer": {"type": "AdamW"},
        "zero_optimization": {"reduce_scatter": false, "stage": 2}})");
    Run r = Tool("check " + good.string() + " --world-size 2");
    CHECK(r.rc == 0);
    CHECK(r.err.find("warning: zero_optimization.reduce_scatter: accepted, has no effect in zerorun because ") !=
          std::string::npos);
    // A valid DeepSpeed config the engine refuses: check fails as the engine would, naming every key.
    const fs::path refused = WriteTemp("refused.json", R"({"train_batch_size": 32,
        "zero_optimization": {"cpu_offload": true, "stage": 2}, "bf16": {"enabled": true}, "mup": {"width": 2}})");
    r = Tool("check " + refused.string() + " --world-size 2");
    CHECK(r.rc == 2);
    const auto refusal = Lines(r.err);
    REQUIRE(refusal.size() == 3);  // CPU optimizer offload (from cpu_offload) is acted on
    CHECK(refusal[0] == "warning: zero_optimization.cpu_offload: Config parameter cpu_offload is deprecated use "
                        "offload_optimizer instead");
    CHECK(refusal[1].rfind("optimizer: the config has no optimizer section", 0) == 0);
    CHECK(refusal[2].rfind("mup: the section is not supported by zerorun", 0) == 0);
    CHECK(Tool("check " + refused.string() + " --world-size 3").rc == 2);
    r = Tool("explain " + refused.string() + " --world-size 2");
    CHECK(r.rc == 0);  // explain shows what the file means, and what the engine refuses
    CHECK(r.out.find("Refused by the engine") != std::string::npos);
    fs::remove(refused);

    const fs::path bad = WriteTemp("bad.json", R"({"train_batch_size": 33, "train_micro_batch_size_per_gpu": 17,
        "gradient_clipp1ng": 1, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})");
    r = Tool("check " + bad.string() + " --world-size 2");
    CHECK(r.rc == 2);
    const auto lines = Lines(r.err);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0].rfind("gradient_clipp1ng: unknown key \"gradient_clipp1ng\"; did you mean \"gradient_clipping\"?", 0) == 0);
    CHECK(lines[1].rfind("train_batch_size: Gradient accumulation steps: 0 has to be greater than 0 (derived", 0) == 0);
    CHECK(lines[2] == "zero_optimization.offload_param.nvme_path: required when device is \"nvme\"; missing");
    r = Tool("check " + bad.string() + " --world-size 2 --allow-unknown");
    CHECK(r.rc == 2);
    CHECK(Lines(r.err).size() == 3);  // 2 errors + 1 warning
    CHECK(Lines(r.err)[2].rfind("warning: gradient_clipp1ng: unknown key", 0) == 0);
    fs::remove(good);
    fs::remove(bad);
  }

  TEST_CASE("tool: syntax errors, missing files and bad flags exit 2") {
    const fs::path syn = WriteTemp("syn.json", "{\n  \"train_batch_size\": 8,\n  \"fp16\": {enabled: true}\n}\n");
    Run r = Tool("check " + syn.string());
    CHECK(r.rc == 2);
    CHECK(r.err.rfind(syn.string() + ":3:12: JSON syntax error", 0) == 0);
    r = Tool("check /nonexistent/x.json");
    CHECK(r.rc == 2);
    CHECK(r.err.find("/nonexistent/x.json") != std::string::npos);
    CHECK(Tool("check").rc == 2);
    CHECK(Tool("frobnicate x.json").rc == 2);
    CHECK(Tool("check " + syn.string() + " --world-size 0").rc == 2);
    CHECK(Tool("check " + syn.string() + " --world-size two").rc == 2);
    CHECK(Tool("check " + syn.string() + " --json").rc == 2);  // --json belongs to explain
    CHECK(Tool("check " + syn.string() + " --bogus").rc == 2);
    CHECK(Tool("").rc == 2);
    fs::remove(syn);
  }

  TEST_CASE("tool: explain shows origins, the batch identity and bucket bytes; --json is the effective config") {
    const fs::path p = WriteTemp("ex.json", R"({"train_batch_size": 64, "gradient_accumulation_steps": 4, "bf16": {"enabled": true},
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1000, "reduce_bucket_size": 1e6}})");
    Run r = Tool("explain " + p.string() + " --world-size 2");
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("train_batch_size = micro × accumulation × world: 64 = 8 × 4 × 2") != std::string::npos);
    CHECK(r.out.find("reduce bucket:     1000000 elements × 2 B (bf16) = 2000000 B") != std::string::npos);
    CHECK(r.out.find("prefetch bucket:   1000 elements × 2 B (bf16) = 2000 B") != std::string::npos);
    CHECK(r.out.find("[file (alias stage3_prefetch_bucket_size)]") != std::string::npos);
    CHECK(r.out.find("train_micro_batch_size_per_gpu = 8") != std::string::npos);
    CHECK(r.out.find("derived: (train_batch_size // world) // gradient_accumulation_steps = (64 // 2) // 4") !=
          std::string::npos);
    r = Tool("explain " + p.string() + " --world-size 2 --json");
    REQUIRE(r.rc == 0);
    // The effective JSON loads again to the same values (with all three batch keys given).
    const rt::Config again = Load(r.out, 2);
    CHECK(again.train_batch_size() == 64);
    CHECK(again.micro_batch_per_gpu() == 8);
    CHECK(again.zero_optimization.prefetch_bucket_size == 1000);
    CHECK(again.zero_optimization.overlap_comm == true);
    CHECK(r.out.find("\"prefetch_bucket_size\": 1000") != std::string::npos);
    CHECK(r.out.find("\"train_micro_batch_size_per_gpu\": 8") != std::string::npos);
    fs::remove(p);
  }
}
