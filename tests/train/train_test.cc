// zerorun-train as a user runs it: real processes, real files. One process alone; two ranks started
// by the `zerorun` launcher over UCX matching one rank with twice the micro-batch; determinism;
// and bad input (missing data file, token ids beyond the vocabulary, unsupported config, bad flags)
// failing with a clear message and exit status.
#include <doctest/doctest.h>
#include <rapidjson/document.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "zerorun/examples/gpt/gpt.h"
#include "zerorun/runtime/data/dataset.h"
#include "zerorun/runtime/data/sampler.h"
#include "zerorun/runtime/model_io.h"
#include "zerorun/runtime/safetensors.h"

namespace fs = std::filesystem;

namespace {

std::string BinDir() {
  const char* b = std::getenv("ZERORUN_TEST_BINARY_DIR");
  REQUIRE_MESSAGE(b != nullptr, "ZERORUN_TEST_BINARY_DIR is not set (run through ctest)");
  return std::string(b) + "/bin";
}

struct Proc {
  int status = -1;
  std::string output;  // stdout + stderr
};

Proc Run(const std::string& cmd) {
  Proc p;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) p.output.append(buf.data(), n);
  int st = ::pclose(f);
  p.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return p;
}

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("zr_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void WriteFile(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

std::string Config(int micro, int stage, const std::string& precision = "") {
  return "{\"train_micro_batch_size_per_gpu\": " + std::to_string(micro) +
         ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}," + precision +
         " \"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}}";
}

rapidjson::Document ReadJson(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  rapidjson::Document d;
  d.Parse(ss.str().c_str());
  REQUIRE_MESSAGE(!d.HasParseError(), "bad JSON in " << p.string());
  return d;
}

std::vector<double> Losses(const rapidjson::Document& d) {
  std::vector<double> out;
  for (const auto& v : d["losses"].GetArray()) out.push_back(v.GetDouble());
  return out;
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}


// Training checkpoints through zerorun-train: a run continued by a NEW PROCESS (and, below, by a
// launcher restart after a rank was killed) is the uninterrupted run bit for bit: the losses, and the
// final checkpoint's shards byte for byte (weights, fp32 masters, optimizer state; dropout on, a text
// data file, the sampler's cursor and the RNG resumed).
std::string CkptRun(const fs::path& d, const std::string& env, int ranks, const std::string& args) {
  const std::string launch = ranks == 1 ? "" : "ZERORUN_COMM_BACKEND=ucx " + BinDir() + "/zerorun --num_procs " +
                                                   std::to_string(ranks) + " --master_port " +
                                                   std::to_string(FreePort()) + " ";
  return env + " " + launch + BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() +
         " --data " + (d / "corpus.txt").string() +
         " --n_layer 2 --n_head 2 --d_model 32 --seq_len 16 --dropout 0.1 --log_every 4 " + args;
}

void WriteCkptJob(const fs::path& d, const std::string& config) {
  WriteFile(d / "ds.json", config);
  std::string text;
  for (int i = 0; text.size() < 40000; ++i) text += "checkpoint " + std::to_string(i * 7919 % 1000) + " resumes; ";
  WriteFile(d / "corpus.txt", text);
}

void CheckSameShards(const fs::path& a, const fs::path& b, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    char name[32];
    std::snprintf(name, sizeof name, "rank%05d.safetensors", r);
    std::ifstream fa(a / name, std::ios::binary), fb(b / name, std::ios::binary);
    std::stringstream sa, sb;
    sa << fa.rdbuf();
    sb << fb.rdbuf();
    INFO(name);
    REQUIRE(sa.str().size() > 0);
    CHECK(sa.str() == sb.str());
  }
}

const char* kSmall = " --steps 12 --n_layer 2 --n_head 2 --d_model 32 --seq_len 16 --vocab_size 32 --log_every 4";

}  // namespace

TEST_SUITE("multiproc") {

TEST_CASE("zerorun-train alone: learns on the synthetic corpus and writes the summary") {
  fs::path d = TempDir("alone");
  WriteFile(d / "ds.json", Config(8, 1, "\"bf16\": {\"enabled\": true},"));
  Proc p = Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() + kSmall +
               " --summary " + (d / "s_{rank}.json").string());
  INFO(p.output);
  REQUIRE(p.status == 0);
  CHECK(p.output.find("entropy floor") != std::string::npos);
  rapidjson::Document s = ReadJson(d / "s_0.json");
  for (const char* key : {"rank", "world_size", "zero_stage", "dtype", "steps", "skipped_steps", "global_samples",
                          "losses", "final_loss", "loss_scale", "lr", "tokens_per_second", "parameters",
                          "memory_bytes", "comm_bytes"}) {
    CHECK_MESSAGE(s.HasMember(key), key);
  }
  CHECK(s["steps"].GetInt() == 12);
  CHECK(s["global_samples"].GetInt() == 96);
  CHECK(std::string(s["dtype"].GetString()) == "bf16");
  std::vector<double> losses = Losses(s);
  REQUIRE(losses.size() == 12);
  CHECK(losses.back() < losses.front() - 0.3);
  CHECK(s["memory_bytes"]["peak_total"].GetInt64() > 0);
  CHECK(s["memory_bytes"]["master"]["current"].GetInt64() == 4 * s["memory_bytes"]["params"]["current"].GetInt64() / 2);
  fs::remove_all(d);
}

TEST_CASE("zerorun-train --profile_window: steps A..B timed alone; a window outside the run is refused") {
  fs::path d = TempDir("window");
  WriteFile(d / "ds.json", Config(8, 1));
  const std::string base = BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() + kSmall;
  Proc p = Run(base + " --profile_window 4:9 --summary " + (d / "s.json").string());
  INFO(p.output);
  REQUIRE(p.status == 0);
  rapidjson::Document s = ReadJson(d / "s.json");
  REQUIRE(s.HasMember("window_tokens_per_second"));
  CHECK(s["window_first_step"].GetInt64() == 4);
  CHECK(s["window_last_step"].GetInt64() == 9);
  const double step_ms = s["window_step_ms"].GetDouble();
  CHECK(step_ms > 0);
  CHECK(6 * step_ms < 1e3 * s["wall_seconds"].GetDouble());  // 6 of the 12 steps
  // 8 windows x 16 tokens per step on this rank
  CHECK(s["window_tokens_per_second"].GetDouble() == doctest::Approx(8 * 16 / (step_ms / 1e3)).epsilon(1e-9));
  Proc none = Run(base + " --summary " + (d / "none.json").string());
  REQUIRE(none.status == 0);
  CHECK_FALSE(ReadJson(d / "none.json").HasMember("window_step_ms"));
  for (const char* bad : {"5:3", "2:13", "0:4", "4"}) {
    Proc b = Run(base + " --profile_window " + bad);
    INFO(bad << ": " << b.output);
    CHECK(b.status == 2);
    CHECK(b.output.find("zerorun-train: --profile_window") != std::string::npos);
    CHECK(b.output.find("| loss ") == std::string::npos);  // refused before training
  }
  fs::remove_all(d);
}

TEST_CASE("zerorun-train: the same command twice gives bitwise identical losses") {
  fs::path d = TempDir("determinism");
  WriteFile(d / "ds.json", Config(4, 2));
  std::string cmd = BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() + kSmall;
  REQUIRE(Run(cmd + " --summary " + (d / "a.json").string()).status == 0);
  REQUIRE(Run(cmd + " --summary " + (d / "b.json").string()).status == 0);
  CHECK(Losses(ReadJson(d / "a.json")) == Losses(ReadJson(d / "b.json")));
  fs::remove_all(d);
}

TEST_CASE("zerorun-train: activation checkpointing gives identical losses with fewer activation bytes") {
  fs::path d = TempDir("ckpt");
  WriteFile(d / "ds.json", Config(8, 3, "\"bf16\": {\"enabled\": true},"));
  std::string cmd = BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() + kSmall +
                    " --dropout 0.1";
  REQUIRE(Run(cmd + " --summary " + (d / "plain.json").string()).status == 0);
  REQUIRE(Run(cmd + " --checkpoint_activations --summary " + (d / "ckpt.json").string()).status == 0);
  rapidjson::Document a = ReadJson(d / "plain.json"), b = ReadJson(d / "ckpt.json");
  CHECK(Losses(a) == Losses(b));  // dropout masks replay bit for bit
  CHECK(b["memory_bytes"]["activations"]["peak"].GetInt64() < a["memory_bytes"]["activations"]["peak"].GetInt64());
  fs::remove_all(d);
}

TEST_CASE("zerorun-train under the launcher: 2 ranks x micro 4 over UCX equal 1 rank x micro 8") {
  fs::path d = TempDir("launcher");
  WriteFile(d / "one.json", Config(8, 0));
  WriteFile(d / "two.json", Config(4, 2));
  Proc one = Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / "one.json").string() + kSmall +
                 " --summary " + (d / "one.json.out").string());
  INFO(one.output);
  REQUIRE(one.status == 0);
  Proc two = Run("ZERORUN_COMM_BACKEND=ucx " + BinDir() + "/zerorun --num_procs 2 --master_port " + std::to_string(FreePort()) + " " + BinDir() +
                 "/zerorun-train --deepspeed_config " + (d / "two.json").string() + kSmall + " --summary " +
                 (d / "two_{rank}.json").string());
  INFO(two.output);
  REQUIRE(two.status == 0);
  std::vector<double> a = Losses(ReadJson(d / "one.json.out"));
  rapidjson::Document r0 = ReadJson(d / "two_0.json"), r1 = ReadJson(d / "two_1.json");
  std::vector<double> b = Losses(r0);
  CHECK(Losses(r1) == b);  // every rank reports the global mean loss
  CHECK(std::string(r0["backend"].GetString()) == "ucx");
  CHECK(std::string(r0["gemm"].GetString()).find(" thread") != std::string::npos);  // backend, ISA, threads
  CHECK(r0["world_size"].GetInt() == 2);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) < 1e-4 * std::fabs(a[i]));
  // Stage 2: one reduce-scatter per gradient bucket (no reduce per owner).
  CHECK(r0["comm_bytes"]["reduce_scatter"]["bytes_sent"].GetInt64() > 0);
  CHECK(r0["comm_bytes"]["reduce_scatter"]["seconds"].GetDouble() > 0);
  CHECK_FALSE(r0["comm_bytes"].HasMember("reduce"));
  for (const char* t : {"forward", "backward", "step"}) CHECK_MESSAGE(r0["timers_ms"][t].GetDouble() > 0, t);
  CHECK(r0["timers_ms"]["allgather"].GetDouble() >= 0);
  // Overlapped, and one bucket per group (two buckets, two slots): no bucket was waited for in backward.
  CHECK(r0["timers_ms"]["reduce_wait"].GetDouble() == 0);
  fs::remove_all(d);
}

TEST_CASE("zerorun-train over UCX: stage 3 on 2 ranks and stage 2 on 3 ranks with accumulation follow 1 rank") {
  fs::path d = TempDir("ucx_stages");
  WriteFile(d / "one.json", Config(12, 0));
  Proc one = Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / "one.json").string() + kSmall +
                 " --summary " + (d / "one.out").string());
  REQUIRE(one.status == 0);
  std::vector<double> a = Losses(ReadJson(d / "one.out"));
  struct Case {
    int ranks, micro, gas, stage;
  };
  for (Case c : {Case{2, 6, 1, 3}, Case{3, 2, 2, 2}}) {
    CAPTURE(c.ranks);
    CAPTURE(c.stage);
    std::string cfg = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(c.micro) +
                      ", \"gradient_accumulation_steps\": " + std::to_string(c.gas) +
                      ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}, "
                      "\"zero_optimization\": {\"stage\": " + std::to_string(c.stage) +
                      ", \"stage3_param_persistence_threshold\": 100}}";
    WriteFile(d / "many.json", cfg);
    Proc many = Run("ZERORUN_COMM_BACKEND=ucx " + BinDir() + "/zerorun --num_procs " + std::to_string(c.ranks) +
                    " --master_port " + std::to_string(FreePort()) + " " + BinDir() +
                    "/zerorun-train --deepspeed_config " + (d / "many.json").string() + kSmall + " --summary " +
                    (d / "many_{rank}.json").string());
    INFO(many.output);
    REQUIRE(many.status == 0);
    std::vector<double> b = Losses(ReadJson(d / "many_0.json"));
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) < 1e-4 * std::fabs(a[i]));
  }
  fs::remove_all(d);
}

TEST_CASE("zerorun-train --save_16bit_model: 2 ranks at stage 3 over UCX write a file that loads into the model") {
  fs::path d = TempDir("save16");
  WriteFile(d / "ds.json", "{\"train_micro_batch_size_per_gpu\": 4, \"optimizer\": {\"type\": \"AdamW\", "
                           "\"params\": {\"lr\": 0.003}}, \"bf16\": {\"enabled\": true}, \"zero_optimization\": "
                           "{\"stage\": 3, \"stage3_param_persistence_threshold\": 100, "
                           "\"stage3_gather_16bit_weights_on_model_save\": true}}");
  Proc two = Run("ZERORUN_COMM_BACKEND=ucx " + BinDir() + "/zerorun --num_procs 2 --master_port " +
                 std::to_string(FreePort()) + " " + BinDir() + "/zerorun-train --deepspeed_config " +
                 (d / "ds.json").string() + kSmall + " --save_16bit_model " + (d / "out").string());
  INFO(two.output);
  REQUIRE(two.status == 0);
  CHECK(two.output.find("saved the bf16 model to " + (d / "out").string() + "/model.safetensors") !=
        std::string::npos);
  const std::string file = (d / "out" / "model.safetensors").string();
  zerorun::runtime::SafetensorsReader r(file);
  CHECK(r.metadata().at("zerorun_global_steps") == "12");
  CHECK(r.metadata().at("zerorun_world_size") == "2");
  zerorun::gpt::GptConfig gc;  // kSmall's dims, bf16
  gc.n_layer = 2;
  gc.n_head = 2;
  gc.d_model = 32;
  gc.seq_len = 16;
  gc.vocab_size = 32;
  gc.dtype = zerorun::DType::kBF16;
  zerorun::gpt::Gpt model(gc);
  zerorun::runtime::LoadSafetensorsIntoModel(model, file);  // strict: every parameter, nothing else
  CHECK(model.FindParameter("wte.weight")->engine_data().ToVector() == r.Read("wte.weight").ToVector());

  // Without the stage-3 flag the job is refused before it trains.
  WriteFile(d / "noflag.json", Config(4, 3));
  Proc noflag = Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / "noflag.json").string() + kSmall +
                    " --save_16bit_model " + (d / "out2").string());
  CHECK(noflag.status == 2);
  CHECK(noflag.output.find("stage3_gather_16bit_weights_on_model_save") != std::string::npos);
  CHECK(noflag.output.find("step ") == std::string::npos);
  CHECK_FALSE(fs::exists(d / "out2"));
  fs::remove_all(d);
}

// configs/ and the public-config fixtures (tests/train/fixtures) through zerorun-config check and
// zerorun-train. A fixture's header says what must happen: "// expect: trains" or "// expect: refused",
// "// refused: key, key" (each named by both tools) and "// warned: key, key" (exactly the keys that warn
// "has no effect").
namespace {

struct Expectation {
  bool trains = true;
  std::vector<std::string> refused, warned;
};

std::vector<std::string> CommaList(std::string s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && (item.back() == ' ' || item.back() == '\r')) item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Expectation ReadExpectation(const fs::path& p) {
  Expectation e;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line) && line.rfind("//", 0) == 0;) {
    if (line.rfind("// expect: ", 0) == 0) e.trains = line.substr(11) == "trains";
    if (line.rfind("// refused: ", 0) == 0) e.refused = CommaList(line.substr(12));
    if (line.rfind("// warned: ", 0) == 0) e.warned = CommaList(line.substr(11));
  }
  return e;
}

fs::path SourceRoot() {
  const char* b = std::getenv("ZERORUN_TEST_BINARY_DIR");
  REQUIRE(b != nullptr);
  return fs::canonical(fs::path(b) / "include" / "zerorun");
}

void CheckConfigFile(const fs::path& file, const Expectation& e) {
  INFO(file.string());
  const fs::path d = TempDir("cfg_" + file.stem().string());
  const Proc check = Run("cd " + d.string() + " && " + BinDir() + "/zerorun-config check " + file.string() +
                         " --hidden-size 32");
  const Proc train = Run("cd " + d.string() + " && " + BinDir() + "/zerorun-train --deepspeed_config " +
                         file.string() + " --steps 3 --n_layer 4 --n_head 2 --d_model 32 --seq_len 16 --vocab_size 32");
  INFO("check:\n", check.output, "\ntrain:\n", train.output);
  CHECK(check.status == train.status);  // check passes exactly the configs the engine accepts
  if (e.trains) {
    CHECK(check.status == 0);
    CHECK(train.status == 0);
    CHECK(train.output.find("done: 3 steps") != std::string::npos);
  } else {
    CHECK(check.status == 2);
    CHECK(train.status == 2);
    CHECK(train.output.find("step ") == std::string::npos);  // refused before it trains
  }
  for (const std::string& key : e.refused) {
    CHECK_MESSAGE(("\n" + check.output).find("\n" + key + ": ") != std::string::npos, "check does not name ", key);
    CHECK_MESSAGE(train.output.find(key + ": ") != std::string::npos, "zerorun-train does not name ", key);
  }
  std::vector<std::string> warned;
  std::stringstream lines(check.output);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(": accepted, has no effect in zerorun because ");
    if (line.rfind("warning: ", 0) == 0 && at != std::string::npos) warned.push_back(line.substr(9, at - 9));
  }
  CHECK(warned == e.warned);
  fs::remove_all(d);
}

}  // namespace

TEST_CASE("configs/: every example trains a few steps with zerorun-train, or is refused naming the key") {
  int n = 0;
  for (const auto& f : fs::directory_iterator(SourceRoot() / "configs")) {
    if (f.path().extension() != ".json") continue;
    ++n;
    const std::string name = f.path().filename().string();
    if (name == "zero3_nvme_offload.json") {
      // ZeRO-Infinity: its nvme_path (/local_nvme) pointed at a directory that exists here.
      const fs::path d = TempDir("cfg_nvme_swap");
      std::ifstream in(f.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t before = text.size();
      for (size_t at; (at = text.find("/local_nvme")) != std::string::npos;) text.replace(at, 11, d.string());
      REQUIRE(text.size() != before);
      WriteFile(d / name, text);
      CheckConfigFile(d / name, {});
      for (const auto& left : fs::directory_iterator(d)) CHECK(left.path().filename() == name);  // no swap dirs left
      fs::remove_all(d);
      continue;
    }
    CheckConfigFile(f.path(), {});
  }
  CHECK(n >= 7);
}

TEST_CASE("public DeepSpeed configs (tests/train/fixtures): each trains or is refused naming every key it cannot honour") {
  int n = 0;
  for (const auto& f : fs::directory_iterator(SourceRoot() / "tests" / "train" / "fixtures")) {
    if (f.path().extension() != ".json") continue;
    ++n;
    CheckConfigFile(f.path(), ReadExpectation(f.path()));
  }
  CHECK(n >= 12);
}

// zerorun-train with <d>/<cfg> on 2 processes over UCX through the launcher: 4 steps of a small GPT,
// each rank's summary in <d>/<cfg>_<rank>.out.
Proc RunTwoRanks(const fs::path& d, const std::string& cfg, const std::string& extra = "") {
  return Run("ZERORUN_LOG_LEVEL=info ZERORUN_COMM_BACKEND=ucx " + BinDir() + "/zerorun --num_procs 2 --master_port " +
             std::to_string(FreePort()) + " " + BinDir() + "/zerorun-train --deepspeed_config " + (d / cfg).string() +
             " --steps 4 --n_layer 4 --n_head 2 --d_model 32 --seq_len 16 --vocab_size 32" + extra + " --summary " +
             (d / (cfg + "_{rank}.out")).string());
}

TEST_CASE("zerorun-train: activation checkpointing from the config, 2 ranks at stage 3 over UCX, equals none") {
  fs::path d = TempDir("ckpt_cfg");
  const std::string base = "{\"train_micro_batch_size_per_gpu\": 4, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                           "{\"lr\": 0.003}}, \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                           "\"stage3_param_persistence_threshold\": 100}";
  WriteFile(d / "plain.json", base + "}");
  WriteFile(d / "ckpt.json", base + ", \"activation_checkpointing\": {\"cpu_checkpointing\": true, "
                                    "\"contiguous_memory_optimization\": true, \"number_checkpoints\": 2, "
                                    "\"profile\": true}}");
  const Proc plain = RunTwoRanks(d, "plain.json", " --dropout 0.1"), ckpt = RunTwoRanks(d, "ckpt.json", " --dropout 0.1");
  INFO(plain.output, ckpt.output);
  REQUIRE(plain.status == 0);
  REQUIRE(ckpt.status == 0);
  CHECK(ckpt.output.find("activation checkpointing: 2 checkpoint(s): h.0..h.1, h.2..h.3, inputs in host memory, "
                         "one contiguous buffer") != std::string::npos);
  CHECK(ckpt.output.find("activation checkpoints (mean per micro-step") != std::string::npos);
  CHECK(ckpt.output.find("gemm: ") != std::string::npos);  // the GEMM backend, ISA and threads, at start-up
  for (int r = 0; r < 2; ++r) {
    rapidjson::Document a = ReadJson(d / ("plain.json_" + std::to_string(r) + ".out"));
    rapidjson::Document b = ReadJson(d / ("ckpt.json_" + std::to_string(r) + ".out"));
    CHECK(Losses(a) == Losses(b));
    CHECK(b["memory_bytes"]["host_activations"]["current"].GetInt64() == 2 * 4 * 16 * 32 * 2);  // 2 slots (B,T,C) bf16
    CHECK(b["memory_bytes"]["activations"]["peak"].GetInt64() < a["memory_bytes"]["activations"]["peak"].GetInt64());
  }
  fs::remove_all(d);
}

TEST_CASE("zerorun-train: ZeRO-Infinity (parameters and optimizer state on NVMe), 2 processes over UCX, equals none") {
  fs::path d = TempDir("infinity");
  fs::create_directories(d / "swap");
  const std::string base = "{\"train_micro_batch_size_per_gpu\": 4, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                           "{\"lr\": 0.003}}, \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                           "\"stage3_param_persistence_threshold\": 0, \"stage3_prefetch_bucket_size\": 4000";
  WriteFile(d / "plain.json", base + "}}");
  const std::string swap = (d / "swap").string();
  WriteFile(d / "nvme.json", base + ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" + swap +
                                 "\"}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" + swap +
                                 "\", \"buffer_count\": 3}}}");
  const Proc plain = RunTwoRanks(d, "plain.json"), nvme = RunTwoRanks(d, "nvme.json");
  INFO(plain.output, nvme.output);
  REQUIRE(plain.status == 0);
  REQUIRE(nvme.status == 0);
  CHECK(nvme.output.find("offload: parameter shards in nvme " + swap) != std::string::npos);
  CHECK(nvme.output.find("offload: optimizer state in nvme " + swap) != std::string::npos);
  for (int r = 0; r < 2; ++r) {
    rapidjson::Document a = ReadJson(d / ("plain.json_" + std::to_string(r) + ".out"));
    rapidjson::Document b = ReadJson(d / ("nvme.json_" + std::to_string(r) + ".out"));
    CHECK(Losses(a) == Losses(b));
    CHECK(b["memory_bytes"]["params"]["current"].GetInt64() == 0);  // no shard in (device) memory between steps
    CHECK(a["memory_bytes"]["params"]["current"].GetInt64() > 0);
  }
  CHECK(fs::is_empty(d / "swap"));  // both ranks removed their swap directories
  fs::remove_all(d);
}

TEST_CASE("zerorun-train: dataloader_drop_last false keeps an epoch's partial last batch, true drops it") {
  fs::path d = TempDir("drop_last");
  std::string text;
  for (int i = 0; i < 16 * 10 + 1; ++i) text += static_cast<char>('a' + (i * 7 + i / 5) % 26);
  WriteFile(d / "text.txt", text);  // 10 windows of T = 16: batches of 4, 4, 2 rows
  const std::string base = "{\"train_micro_batch_size_per_gpu\": 4, \"optimizer\": {\"type\": \"AdamW\"}";
  WriteFile(d / "keep.json", base + "}");
  WriteFile(d / "drop.json", base + ", \"dataloader_drop_last\": true}");
  auto run = [&](const std::string& cfg) {
    return Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / cfg).string() + " --data " +
               (d / "text.txt").string() + " --steps 6 --n_layer 1 --n_head 2 --d_model 16 --seq_len 16 --summary " +
               (d / (cfg + ".out")).string());
  };
  const Proc keep = run("keep.json"), drop = run("drop.json");
  INFO(keep.output, drop.output);
  REQUIRE(keep.status == 0);
  REQUIRE(drop.status == 0);
  const std::vector<double> k = Losses(ReadJson(d / "keep.json.out")), p = Losses(ReadJson(d / "drop.json.out"));
  REQUIRE(k.size() == 6);
  REQUIRE(p.size() == 6);
  CHECK(k[0] == p[0]);  // the same first two batches
  CHECK(k[1] == p[1]);
  CHECK(k[2] != p[2]);  // step 3: the partial batch of 2 rows, or (drop) the next epoch's first batch
  fs::remove_all(d);
}

TEST_CASE("zerorun-train: bad input fails with a clear message") {
  fs::path d = TempDir("bad");
  WriteFile(d / "ds.json", Config(2, 0));
  std::string base = BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() + kSmall;

  Proc missing = Run(base + " --data " + (d / "nope.bin").string());
  CHECK(missing.status == 1);
  CHECK(missing.output.find("nope.bin") != std::string::npos);

  WriteFile(d / "text.txt", std::string(4000, 'a') + "z");  // 'z' = 122 >= vocab 100
  Proc vocab = Run(base + " --vocab_size 100 --data " + (d / "text.txt").string());
  CHECK(vocab.status == 1);
  CHECK(vocab.output.find("text.txt") != std::string::npos);
  CHECK(vocab.output.find("122") != std::string::npos);

  // A valid DeepSpeed config asking for something not implemented (partial optimizer offload).
  WriteFile(d / "offload.json", "{\"train_micro_batch_size_per_gpu\": 2, \"optimizer\": {\"type\": \"Adam\"}, "
                                "\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}, "
                                "\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}}}");
  Proc offload = Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / "offload.json").string() + kSmall);
  CHECK(offload.status == 2);
  CHECK(offload.output.find("zero_optimization.offload_optimizer.ratio: 0.5 is not supported by zerorun") !=
        std::string::npos);

  WriteFile(d / "typo.json", "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_clipp1ng\": 1.0}");
  Proc typo = Run(BinDir() + "/zerorun-train --deepspeed_config " + (d / "typo.json").string() + kSmall);
  CHECK(typo.status == 2);
  CHECK(typo.output.find("gradient_clipping") != std::string::npos);

  Proc flag = Run(base + " --stpes 3");
  CHECK(flag.status == 2);
  CHECK(flag.output.find("--stpes") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("zerorun-train --device: a bad value, a host backend with cuda, and cuda without a GPU are refused") {
  const std::string bin = BinDir() + "/zerorun-train --steps 1";
  Proc bad = Run(bin + " --device gpu");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("--device expects cpu or cuda, got 'gpu'") != std::string::npos);
  Proc ucx = Run(bin + " --device cuda --backend ucx");
  CHECK(ucx.status == 2);
  CHECK(ucx.output.find("--backend ucx cannot move") != std::string::npos);
  Proc nccl = Run(bin + " --device cpu --backend nccl");
  CHECK(nccl.status == 2);
  // Without a visible GPU (this machine; CUDA_VISIBLE_DEVICES hides any) --device cuda stops at once.
  Proc none = Run("CUDA_VISIBLE_DEVICES= " + bin + " --device cuda");
  CHECK(none.status == 2);
  const bool named = none.output.find("CUDA device(s) are visible") != std::string::npos ||
                     none.output.find("built without CUDA") != std::string::npos;
  CHECK_MESSAGE(named, none.output);
}

TEST_CASE("zerorun-train --save_dir/--load_dir: 12 steps = 6 + save + a new process loading + 6, bitwise") {
  struct Job {
    int ranks;
    std::string config;
  };
  const std::vector<Job> jobs = {
      {2, R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
              "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
              "zero_optimization": {"stage": 3}})"},
      {1, R"({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true, "initial_scale_power": 8},
              "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}, "zero_optimization": {"stage": 1}})"}};
  for (const Job& job : jobs) {
    fs::path d = TempDir("ckpt_resume");
    WriteCkptJob(d, job.config);
    INFO(job.config);
    Proc straight = Run(CkptRun(d, "", job.ranks, "--steps 12 --save_dir " + (d / "straight").string() +
                                                      " --summary " + (d / "straight_{rank}.json").string()));
    INFO(straight.output);
    REQUIRE(straight.status == 0);
    Proc first = Run(CkptRun(d, "", job.ranks, "--steps 6 --save_dir " + (d / "resumed").string()));
    INFO(first.output);
    REQUIRE(first.status == 0);
    Proc second = Run(CkptRun(d, "", job.ranks, "--steps 12 --load_dir " + (d / "resumed").string() + " --save_dir " +
                                                    (d / "resumed").string() + " --summary " +
                                                    (d / "resumed_{rank}.json").string()));
    INFO(second.output);
    REQUIRE(second.status == 0);
    CHECK(second.output.find("resumed from") != std::string::npos);
    std::vector<double> all = Losses(ReadJson(d / "straight_0.json"));
    std::vector<double> tail = Losses(ReadJson(d / "resumed_0.json"));
    REQUIRE(all.size() == 12);
    REQUIRE(tail.size() == 6);
    CHECK(std::vector<double>(all.begin() + 6, all.end()) == tail);
    CheckSameShards(d / "straight" / "global_step12", d / "resumed" / "global_step12", job.ranks);
    fs::remove_all(d);
  }
}

// Loss-spike rollback. The data: 3201 bytes of clean text (200 windows at T = 16) and one 17-byte
// document of bytes the text never has (one window): the step that trains on it spikes (its grad norm
// is over 14 sd above the last 20 steps' mean, clean steps stay under 5 at micro batch 4; measured).
struct SpikeJob {
  fs::path d;
  std::string Cmd(int ranks, const std::string& args) const {
    const std::string launch = ranks == 1 ? "" : "ZERORUN_COMM_BACKEND=ucx " + BinDir() + "/zerorun --num_procs " +
                                                     std::to_string(ranks) + " --master_port " +
                                                     std::to_string(FreePort()) + " ";
    return launch + BinDir() + "/zerorun-train --deepspeed_config " + (d / "ds.json").string() + " --data '" +
           (d / "data" / "*.txt").string() + "' --n_layer 2 --n_head 2 --d_model 32 --seq_len 16 --log_every 10 " + args;
  }
  // A guarded 120-step run checkpointing to d/<ckpt> every `interval` steps, its summary to d/<summary>;
  // the run must succeed.
  Proc Guarded(int ranks, int interval, const std::string& ckpt, const std::string& summary) const {
    Proc p = Run(Cmd(ranks, "--steps 120 --spike_threshold 8 --save_dir " + (d / ckpt).string() + " --save_interval " +
                                std::to_string(interval) + " --summary " + (d / summary).string()));
    INFO(p.output);
    REQUIRE(p.status == 0);
    return p;
  }
  // The (epoch, batch) of rank `rank` (of `world`) that hold the poison window, epochs 0..2.
  std::set<std::pair<int64_t, int64_t>> PoisonedBatches(int64_t micro, int rank, int world) const {
    auto ds = zerorun::data::OpenByteTextFiles(zerorun::data::ExpandDataPaths((d / "data" / "*.txt").string()), 256);
    zerorun::data::SamplerOptions so;
    so.batch_size = micro;
    so.seq_len = 16;
    so.rank = rank;
    so.world_size = world;
    so.seed = 1234;  // zerorun-train's default --seed
    zerorun::data::DistributedSampler sampler(*ds, so);
    const int64_t poison = sampler.num_windows() - 1;  // the last document's only window
    std::set<std::pair<int64_t, int64_t>> out;
    for (int64_t e = 0; e < 3; ++e) {
      for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
        for (int64_t w : sampler.WindowsOfBatch(e, b)) {
          if (w == poison) out.insert({e, b});
        }
      }
    }
    return out;
  }
};

SpikeJob MakeSpikeJob(const std::string& name, const std::string& config) {
  SpikeJob j{TempDir(name)};
  fs::create_directories(j.d / "data");
  WriteFile(j.d / "ds.json", config);
  std::string text;
  for (int i = 0; text.size() < 3201; ++i) text += "checkpoint " + std::to_string(i * 7919 % 1000) + " resumes; ";
  WriteFile(j.d / "data" / "a_clean.txt", text.substr(0, 3201));
  std::string poison;
  for (int i = 0; i < 17; ++i) poison += static_cast<char>(0x80 + (i * 37) % 128);
  WriteFile(j.d / "data" / "b_poison.txt", poison);
  return j;
}

std::vector<std::pair<int64_t, int64_t>> SkippedBatches(const rapidjson::Document& summary) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& rb : summary["rollbacks"].GetArray()) {
    for (const auto& eb : rb["skipped_batches"].GetArray()) out.emplace_back(eb[0].GetInt64(), eb[1].GetInt64());
  }
  return out;
}

std::vector<int64_t> RollbackSteps(const rapidjson::Document& summary, const char* key) {
  std::vector<int64_t> out;
  for (const auto& rb : summary["rollbacks"].GetArray()) out.push_back(rb[key].GetInt64());
  return out;
}

TEST_CASE("zerorun-train --spike_threshold: a poisoned batch is rolled back to the last checkpoint and skipped, "
          "bitwise equal to the same run checkpointing every step") {
  SpikeJob job = MakeSpikeJob("spike", Config(4, 1));
  const std::string guard = " --steps 120 --spike_threshold 8 --save_dir ";
  Proc plain = Run(job.Cmd(1, "--steps 120 --summary " + (job.d / "plain.json").string()));
  REQUIRE(plain.status == 0);
  Proc every4 = job.Guarded(1, 4, "ck4", "g4.json");
  job.Guarded(1, 1, "ck1", "g1.json");
  rapidjson::Document p = ReadJson(job.d / "plain.json"), g4 = ReadJson(job.d / "g4.json"), g1 = ReadJson(job.d / "g1.json");
  CHECK(!p.HasMember("rollbacks"));  // no guard: the key is not written

  // Which batches should be skipped, from the sampler alone: 50 batches per epoch; the run draws them in
  // order and trains on all but the poisoned ones that come after the 20-step window has filled.
  const auto poisoned = job.PoisonedBatches(4, 0, 1);
  REQUIRE(poisoned.size() == 3);  // one per epoch
  std::vector<std::pair<int64_t, int64_t>> expected;
  for (int64_t g = 0, step = 0; step < 120; ++g) {
    std::pair<int64_t, int64_t> eb{g / 50, g % 50};
    if (poisoned.count(eb) && step + 1 > 20) {
      expected.push_back(eb);
    } else {
      ++step;
    }
  }
  REQUIRE(expected.size() >= 2);
  CHECK(SkippedBatches(g4) == expected);
  CHECK(SkippedBatches(g1) == expected);
  // The same steps spiked; every-4 went back to the last multiple of 4, every-1 to the step before.
  const std::vector<int64_t> spiked = RollbackSteps(g4, "step");
  CHECK(RollbackSteps(g1, "step") == spiked);
  for (size_t i = 0; i < spiked.size(); ++i) {
    CHECK(RollbackSteps(g4, "restored_step")[i] == (spiked[i] - 1) / 4 * 4);
    CHECK(RollbackSteps(g1, "restored_step")[i] == spiked[i] - 1);
    CHECK(g4["rollbacks"][static_cast<rapidjson::SizeType>(i)]["zscore"].GetDouble() > 8);
  }
  const std::string first = "loss spike at step " + std::to_string(spiked[0]) + ": ";
  CHECK(every4.output.find(first) != std::string::npos);
  // Replaying steps from an older checkpoint changes nothing: losses and the final shards bitwise equal.
  const std::vector<double> l4 = Losses(g4), l1 = Losses(g1), lp = Losses(p);
  REQUIRE(l4.size() == 120);
  CHECK(l4 == l1);
  CheckSameShards(job.d / "ck4" / "global_step120", job.d / "ck1" / "global_step120", 1);
  // Up to the first spike the guarded run is the plain one; from there it is not (it never saw the batch).
  CHECK(std::vector<double>(lp.begin(), lp.begin() + spiked[0] - 1) == std::vector<double>(l4.begin(), l4.begin() + spiked[0] - 1));
  CHECK(lp[static_cast<size_t>(spiked[0] - 1)] != l4[static_cast<size_t>(spiked[0] - 1)]);
  CHECK(g4["steps"].GetInt64() == 120);

  // More spikes than --spike_max_rollbacks allows: an error naming the step and the flag.
  Proc capped = Run(job.Cmd(1, guard + (job.d / "ckc").string() + " --save_interval 4 --spike_max_rollbacks 1"));
  INFO(capped.output);
  CHECK(capped.status == 1);
  CHECK(capped.output.find("step " + std::to_string(spiked[1]) + ": ") != std::string::npos);
  CHECK(capped.output.find("already rolled back 1 time(s) (--spike_max_rollbacks)") != std::string::npos);
  // No checkpoints to roll back to: refused before anything runs.
  Proc refused = Run(job.Cmd(1, "--steps 5 --spike_threshold 8 --save_dir " + (job.d / "ckr").string()));
  CHECK(refused.status == 2);
  CHECK(refused.output.find("--spike_threshold needs --save_dir and --save_interval") != std::string::npos);
  CHECK(Run(job.Cmd(1, "--steps 5 --spike_threshold -1")).status == 2);
  CHECK(Run(job.Cmd(1, "--steps 5 --spike_window 1")).status == 2);
  fs::remove_all(job.d);
}

TEST_CASE("zerorun-train --spike_threshold over UCX: 2 ranks at stage 2 with accumulation roll back together, "
          "each skipping its own batches; a launcher restart restores the window and rolls back as the unbroken run") {
  // Micro 1 x accumulation 2 x 2 ranks: the global batch of the 1-rank case above, so the poison is as
  // loud (the all-reduced loss and the global norm are what every rank judges).
  const std::string config = R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}, "zero_optimization": {"stage": 2}})";
  SpikeJob job = MakeSpikeJob("spike2", config);
  const std::string guard = " --steps 120 --spike_threshold 8 --save_dir ";
  job.Guarded(2, 4, "ck4", "a_{rank}.json");
  job.Guarded(2, 1, "ck1", "b_{rank}.json");
  rapidjson::Document a0 = ReadJson(job.d / "a_0.json"), a1 = ReadJson(job.d / "a_1.json");
  rapidjson::Document b0 = ReadJson(job.d / "b_0.json");
  REQUIRE(a0["rollbacks"].Size() >= 2);
  const std::vector<int64_t> spiked = RollbackSteps(a0, "step");
  CHECK(RollbackSteps(a1, "step") == spiked);  // every rank decided alike
  CHECK(RollbackSteps(b0, "step") == spiked);
  // Each rank skipped its two micro-batches of each spiked step, and one rank's held the poison.
  const auto s0 = SkippedBatches(a0), s1 = SkippedBatches(a1);
  REQUIRE(s0.size() == 2 * spiked.size());
  REQUIRE(s1.size() == s0.size());
  const auto p0 = job.PoisonedBatches(1, 0, 2), p1 = job.PoisonedBatches(1, 1, 2);
  for (size_t i = 0; i < spiked.size(); ++i) {
    INFO("rollback " << i);
    const bool on0 = p0.count(s0[2 * i]) || p0.count(s0[2 * i + 1]);
    const bool on1 = p1.count(s1[2 * i]) || p1.count(s1[2 * i + 1]);
    CHECK((on0 || on1));
  }
  const std::vector<double> la = Losses(a0);
  REQUIRE(la.size() == 120);
  CHECK(Losses(b0) == la);
  CHECK(Losses(a1) == la);
  CheckSameShards(job.d / "ck4" / "global_step120", job.d / "ck1" / "global_step120", 2);

  // Rank 1 dies two steps before the first spike; the restarted job resumes from the checkpoint before
  // it with the spike window that checkpoint stored, so it sees the same spike and ends as run a.
  const int64_t kill_step = spiked[0] - 2;
  const int64_t resumed_at = kill_step / 4 * 4;
  const std::string dir = (job.d / "job").string();
  std::string cmd = "ZERORUN_TRAIN_TEST_KILL=" + std::to_string(kill_step) + ":1 " +
                    job.Cmd(2, guard + dir + " --save_interval 4 --load_dir " + dir + " --summary " +
                                   (job.d / "c_{rank}.json").string());
  cmd.replace(cmd.find("--num_procs"), 0, "--max_restarts 1 ");
  Proc c = Run(cmd);
  INFO(c.output);
  REQUIRE(c.status == 0);
  CHECK(c.output.find("restarting") != std::string::npos);
  CHECK(c.output.find("resumed from") != std::string::npos);
  rapidjson::Document c0 = ReadJson(job.d / "c_0.json");
  CHECK(RollbackSteps(c0, "step") == spiked);
  const std::vector<double> lc = Losses(c0);
  REQUIRE(lc.size() == static_cast<size_t>(120 - resumed_at));
  CHECK(std::vector<double>(la.begin() + resumed_at, la.end()) == lc);
  CheckSameShards(job.d / "ck4" / "global_step120", fs::path(dir) / "global_step120", 2);
  fs::remove_all(job.d);
}

TEST_CASE("zerorun-train --eval_batches: the final model's held-out loss, the same at 1 and 2 ranks, dropout off") {
  fs::path d = TempDir("eval");
  WriteCkptJob(d, Config(4, 2));
  std::string held_out;
  for (int i = 0; held_out.size() < 20000; ++i) held_out += "checkpoint " + std::to_string(i * 104729 % 1000) + " resumes; ";
  WriteFile(d / "held_out.txt", held_out);
  const std::string eval = " --eval_data " + (d / "held_out.txt").string();
  Proc train = Run(CkptRun(d, "", 1, "--steps 6 --save_dir " + (d / "ck").string() + " --eval_batches 8" + eval +
                                         " --summary " + (d / "train.json").string()));
  INFO(train.output);
  REQUIRE(train.status == 0);
  CHECK(train.output.find("eval: loss ") != std::string::npos);
  const rapidjson::Document t = ReadJson(d / "train.json");
  REQUIRE(t.HasMember("eval_loss"));
  CHECK(t["eval_batches"].GetInt64() == 8);
  const double trained = t["eval_loss"].GetDouble();
  CHECK(trained > 0);
  CHECK(trained < Losses(t).front());  // 6 steps of training lowered the held-out loss below step 1's
  // The saved model evaluated again by 1 and by 2 ranks (no further steps): the same 8 batches, so
  // the same loss up to the GEMMs' rounding. Dropout (0.1 in these jobs) would make them differ.
  for (int ranks : {1, 2}) {
    const fs::path out = d / ("again" + std::to_string(ranks) + "_{rank}.json");
    Proc again = Run(CkptRun(d, "", ranks, "--steps 6 --load_dir " + (d / "ck").string() + " --eval_batches 8" + eval +
                                               " --summary " + out.string()));
    INFO(again.output);
    REQUIRE(again.status == 0);
    for (int r = 0; r < ranks; ++r) {
      const rapidjson::Document a = ReadJson(d / ("again" + std::to_string(ranks) + "_" + std::to_string(r) + ".json"));
      REQUIRE(a.HasMember("eval_loss"));
      CHECK(a["eval_loss"].GetDouble() == doctest::Approx(trained).epsilon(1e-5));
    }
  }
  // Without evaluation the summary has no eval_loss; bad combinations are refused.
  Proc none = Run(CkptRun(d, "", 1, "--steps 2 --summary " + (d / "none.json").string()));
  REQUIRE(none.status == 0);
  CHECK_FALSE(ReadJson(d / "none.json").HasMember("eval_loss"));
  Proc no_data = Run(CkptRun(d, "", 1, "--steps 2 --eval_batches 4"));
  CHECK(no_data.status == 2);
  CHECK(no_data.output.find("--eval_batches with --data files needs --eval_data") != std::string::npos);
  Proc no_batches = Run(CkptRun(d, "", 1, "--steps 2" + eval));
  CHECK(no_batches.status == 2);
  CHECK(no_batches.output.find("--eval_data without --eval_batches") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("zerorun-train: a rank killed mid-run, the launcher restarts the job, it resumes from latest and ends bitwise equal") {
  fs::path d = TempDir("ckpt_restart");
  WriteCkptJob(d, R"({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
                      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}, "zero_optimization": {"stage": 2}})");
  Proc straight = Run(CkptRun(d, "", 2, "--steps 12 --save_dir " + (d / "straight").string() + " --summary " +
                                            (d / "straight_{rank}.json").string()));
  INFO(straight.output);
  REQUIRE(straight.status == 0);
  // Rank 1 SIGKILLs itself after step 7 in the first generation; checkpoints every 4 steps.
  const std::string job = (d / "job").string();
  Proc restarted = Run(CkptRun(d, "ZERORUN_TRAIN_TEST_KILL=7:1", 2,
                               "--steps 12 --save_interval 4 --save_dir " + job + " --load_dir " + job +
                                   " --summary " + (d / "job_{rank}.json").string()));
  INFO(restarted.output);
  REQUIRE(restarted.status != 0);  // without --max_restarts the job fails
  fs::remove_all(job);
  const std::string cmd = CkptRun(d, "ZERORUN_TRAIN_TEST_KILL=7:1", 2,
                                  "--steps 12 --save_interval 4 --save_dir " + job + " --load_dir " + job +
                                      " --summary " + (d / "job_{rank}.json").string());
  // The launcher's own flag goes before the program.
  const std::string with_restart = std::string(cmd).replace(cmd.find("--num_procs"), 0, "--max_restarts 1 ");
  Proc ok = Run(with_restart);
  INFO(ok.output);
  REQUIRE(ok.status == 0);
  CHECK(ok.output.find("restarting") != std::string::npos);
  CHECK(ok.output.find("resumed from") != std::string::npos);
  CHECK(ok.output.find("global_step4") != std::string::npos);
  std::vector<double> all = Losses(ReadJson(d / "straight_0.json"));
  std::vector<double> tail = Losses(ReadJson(d / "job_0.json"));
  REQUIRE(tail.size() == 8);  // steps 5-12, after resuming at step 4
  CHECK(std::vector<double>(all.begin() + 4, all.end()) == tail);
  CheckSameShards(d / "straight" / "global_step12", fs::path(job) / "global_step12", 2);
  fs::remove_all(d);
}

}  // TEST_SUITE
