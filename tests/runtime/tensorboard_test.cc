// TensorBoard event files: CRC-32C against published check values and a bitwise reference; the TFRecord
// framing and the tensorflow.Event payloads decoded by an independent reader (`protoc --decode` on the
// published schema subset), from the monitor alone and from a training run (tags, steps, values).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime/engine_test_util.h"
#include "zerorun/core/rng.h"
#include "zerorun/runtime/observe/crc32c.h"
#include "zerorun/runtime/observe/tensorboard.h"

namespace fs = std::filesystem;
using namespace zerorun;
using runtime::Crc32c;
using runtime::MaskCrc32c;

namespace {

// Bit-at-a-time CRC-32C: the definition, independent of the library's tables.
uint32_t BitwiseCrc32c(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path ProtoDir() {
  const char* d = std::getenv("ZERORUN_TEST_BINARY_DIR");
  REQUIRE_MESSAGE(d != nullptr, "ZERORUN_TEST_BINARY_DIR is not set (run through ctest)");
  return fs::path(d) / "include" / "zerorun" / "runtime" / "observe";
}

struct Scalar {
  std::string tag;
  double value = 0;
};
struct DecodedEvent {
  int64_t step = 0;
  std::string file_version;
  std::vector<Scalar> values;
};

// One record's payload through `protoc --decode=zerorun.tb.Event`, parsed from protobuf text format.
DecodedEvent Decode(const std::string& payload, const fs::path& scratch) {
  {
    std::ofstream out(scratch, std::ios::binary);
    out << payload;
  }
  const std::string cmd = "protoc --proto_path='" + ProtoDir().string() + "' --decode=zerorun.tb.Event "
                          "tensorboard_event.proto < '" + scratch.string() + "' 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int status = ::pclose(f);
  REQUIRE_MESSAGE(status == 0, "protoc --decode failed: " << text);
  DecodedEvent ev;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t b = line.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    line = line.substr(b);
    auto unquote = [](const std::string& s) { return s.substr(s.find('"') + 1, s.rfind('"') - s.find('"') - 1); };
    if (line.rfind("step: ", 0) == 0) ev.step = std::stoll(line.substr(6));
    if (line.rfind("file_version: ", 0) == 0) ev.file_version = unquote(line);
    if (line.rfind("tag: ", 0) == 0) ev.values.push_back({unquote(line), 0});
    if (line.rfind("simple_value: ", 0) == 0) {
      REQUIRE(!ev.values.empty());
      ev.values.back().value = std::stod(line.substr(14));
    }
  }
  return ev;
}

// Splits a TFRecord file, checking both masked CRCs of every record with the bitwise CRC.
std::vector<std::string> Records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    REQUIRE(pos + 12 <= bytes.size());
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, bytes.data() + pos, 8);
    std::memcpy(&len_crc, bytes.data() + pos + 8, 4);
    CHECK(len_crc == MaskCrc32c(BitwiseCrc32c(reinterpret_cast<const unsigned char*>(bytes.data() + pos), 8)));
    REQUIRE(pos + 12 + len + 4 <= bytes.size());
    std::string payload = bytes.substr(pos + 12, len);
    uint32_t data_crc;
    std::memcpy(&data_crc, bytes.data() + pos + 12 + len, 4);
    CHECK(data_crc == MaskCrc32c(BitwiseCrc32c(reinterpret_cast<const unsigned char*>(payload.data()), len)));
    out.push_back(std::move(payload));
    pos += 12 + len + 4;
  }
  return out;
}

std::vector<DecodedEvent> DecodeFile(const fs::path& file, const fs::path& scratch) {
  std::vector<DecodedEvent> out;
  for (const std::string& r : Records(ReadFile(file))) out.push_back(Decode(r, scratch));
  return out;
}

fs::path OnlyEventFile(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  }
  REQUIRE(files.size() == 1);
  return files[0];
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("crc32c: published check values and the bitwise definition") {
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);
  unsigned char zeros[32] = {};
  unsigned char ones[32];
  unsigned char inc[32];
  std::memset(ones, 0xFF, sizeof ones);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  CHECK(Crc32c(zeros, 32) == 0x8A9136AAu);  // RFC 3720 (iSCSI) B.4
  CHECK(Crc32c(ones, 32) == 0x62A8AB43u);
  CHECK(Crc32c(inc, 32) == 0x46DD794Eu);
  Rng rng(3, 0);
  std::vector<unsigned char> data(1000);
  for (auto& b : data) b = static_cast<unsigned char>(rng.NextU32());
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 999, 1000}) {
    CHECK(Crc32c(data.data(), n) == BitwiseCrc32c(data.data(), n));
    // Continuing from a partial checksum gives the checksum of the whole.
    CHECK(Crc32c(data.data() + n / 3, n - n / 3, Crc32c(data.data(), n / 3)) == BitwiseCrc32c(data.data(), n));
  }
}

TEST_CASE("tensorboard monitor: TFRecord framing, file_version first, one Event per step") {
  fs::path base = fs::temp_directory_path() / ("zr_tb_" + std::to_string(::getpid()));
  fs::remove_all(base);
  std::string path;
  {
    runtime::TensorBoardMonitor mon(base.string(), "job1");
    path = mon.path();
    mon.Write({{"Train/Samples/lr", 0.001, 8}, {"Train/Samples/loss_scale", 65536, 8}});
    mon.Write({{"Train/Samples/lr", 0.0005, 16}, {"Train/Samples/train_loss", 2.5, 16}, {"x", -1.25, 24}});
    mon.Flush();
  }
  CHECK(fs::path(path).parent_path() == base / "job1");
  std::vector<DecodedEvent> ev = DecodeFile(path, base / "scratch.bin");
  REQUIRE(ev.size() == 4);
  CHECK(ev[0].file_version == "brain.Event:2");
  CHECK(ev[0].values.empty());
  CHECK(ev[1].step == 8);
  REQUIRE(ev[1].values.size() == 2);
  CHECK(ev[1].values[0].tag == "Train/Samples/lr");
  CHECK(ev[1].values[0].value == doctest::Approx(0.001).epsilon(1e-6));
  CHECK(ev[1].values[1].tag == "Train/Samples/loss_scale");
  CHECK(ev[1].values[1].value == 65536);
  CHECK(ev[2].step == 16);
  REQUIRE(ev[2].values.size() == 2);
  CHECK(ev[2].values[1].tag == "Train/Samples/train_loss");
  CHECK(ev[2].values[1].value == 2.5);
  CHECK(ev[3].step == 24);
  REQUIRE(ev[3].values.size() == 1);
  CHECK(ev[3].values[0].value == -1.25);
  fs::remove_all(base);
}

TEST_CASE("tensorboard monitor: an unusable output path is an IoError naming it") {
  CHECK_THROWS_WITH_AS(runtime::TensorBoardMonitor("/proc/zr_no_such_dir", "job"),
                       doctest::Contains("/proc/zr_no_such_dir"), IoError);
}

TEST_CASE("tensorboard from the engine: DeepSpeed's tags and zerorun's, per boundary, equal to the CSV") {
  fs::path base = fs::temp_directory_path() / ("zr_tb_engine_" + std::to_string(::getpid()));
  fs::remove_all(base);
  zrtest::RunSpec s;
  s.world = 2;
  s.stage = 2;
  s.micro = 4;
  s.gas = 2;
  s.steps = 3;
  s.dtype = DType::kF16;
  s.extra_json = Format(R"(, "wall_clock_breakdown": true, "steps_per_print": 1000,
      "tensorboard": {{"enabled": true, "output_path": "{}", "job_name": "tb"}},
      "csv_monitor": {{"enabled": true, "output_path": "{}", "job_name": "csv"}})", base.string(), base.string());
  zrtest::RunResult res = zrtest::Train(s);
  std::vector<DecodedEvent> ev = DecodeFile(OnlyEventFile(base / "tb"), base / "scratch.bin");
  REQUIRE(ev.size() == 4);  // file_version + one per boundary
  CHECK(ev[0].file_version == "brain.Event:2");
  const int64_t tbs = s.micro * s.gas * s.world;
  for (int step = 1; step <= 3; ++step) {
    const DecodedEvent& e = ev[static_cast<size_t>(step)];
    CHECK(e.step == step * tbs);
    std::map<std::string, double> v;
    for (const Scalar& sc : e.values) v[sc.tag] = sc.value;
    for (const char* tag : {"Train/Samples/lr", "Train/Samples/loss_scale", "Train/Samples/train_loss",
                            "Train/Samples/elapsed_time_ms_forward", "Train/Samples/elapsed_time_ms_backward",
                            "Train/Samples/elapsed_time_ms_backward_allreduce", "Train/Samples/elapsed_time_ms_step",
                            "Train/Samples/tokens_per_second", "Train/Samples/peak_memory_MiB",
                            "Train/Samples/memory_MiB/params", "Train/Samples/memory_MiB/master",
                            "Train/Samples/memory_MiB/optimizer", "Train/Samples/comm_bytes/reduce_scatter",
                            "Train/Samples/comm_bytes/all_gather"}) {
      CHECK_MESSAGE(v.count(tag) == 1, "step " << step << " lacks " << tag);
    }
    CHECK(v["Train/Samples/lr"] == doctest::Approx(0.01).epsilon(1e-6));
    CHECK(v["Train/Samples/loss_scale"] == res.scales[static_cast<size_t>(step - 1)]);
    CHECK(v["Train/Samples/tokens_per_second"] > 0);
    CHECK(v["Train/Samples/comm_bytes/reduce_scatter"] > 0);
    if (v.count("Train/Samples/grad_norm")) CHECK(v["Train/Samples/grad_norm"] > 0);
    // The CSV monitor got the same value for every tag (its own file per tag).
    for (const auto& [tag, value] : v) {
      std::string file = tag;
      for (char& c : file) c = c == '/' ? '_' : c;
      std::ifstream in(base / "csv" / (file + ".csv"));
      REQUIRE_MESSAGE(in.good(), "no csv for " << tag);
      std::string line;
      std::getline(in, line);  // header
      bool found = false;
      while (std::getline(in, line)) {
        const size_t comma = line.find(',');
        if (std::stoll(line.substr(0, comma)) != step * tbs) continue;
        found = true;
        CHECK(std::stod(line.substr(comma + 1)) == doctest::Approx(value).epsilon(1e-6));
      }
      CHECK_MESSAGE(found, "the csv of " << tag << " has no row for step " << step * tbs);
    }
  }
  fs::remove_all(base);
}

TEST_CASE("tensorboard from the engine: the numerics tags every numerics.interval steps, equal to the CSV") {
  fs::path base = fs::temp_directory_path() / ("zr_tb_numerics_" + std::to_string(::getpid()));
  fs::remove_all(base);
  zrtest::RunSpec s;
  s.world = 2;
  s.stage = 2;
  s.micro = 4;
  s.steps = 4;
  s.dtype = DType::kF16;
  s.extra_json = Format(R"(, "steps_per_print": 1000, "numerics": {{"enabled": true, "interval": 2}},
      "tensorboard": {{"enabled": true, "output_path": "{}", "job_name": "tb"}},
      "csv_monitor": {{"enabled": true, "output_path": "{}", "job_name": "csv"}})", base.string(), base.string());
  zrtest::Train(s);
  std::vector<DecodedEvent> ev = DecodeFile(OnlyEventFile(base / "tb"), base / "scratch.bin");
  REQUIRE(ev.size() == 5);
  const char* kTags[] = {"grad_max_abs", "grad_norm", "grad_zero_fraction", "grad_nonfinite_fraction",
                         "fp16_underflow_fraction", "fp16_overflow_fraction"};
  for (int step = 1; step <= 4; ++step) {
    CAPTURE(step);
    std::map<std::string, double> v;
    for (const Scalar& sc : ev[static_cast<size_t>(step)].values) v[sc.tag] = sc.value;
    for (int g = 0; g < 2; ++g) {  // TinyGpt's two groups
      for (const char* t : kTags) {
        const std::string tag = Format("Numerics/group{}/{}", g, t);
        CHECK_MESSAGE(v.count(tag) == (step % 2 == 0 ? 1u : 0u), tag);  // steps 2 and 4 only
      }
    }
    if (step % 2 != 0) continue;
    CHECK(v["Numerics/group0/grad_max_abs"] > 0);
    CHECK(v["Numerics/group0/grad_norm"] >= v["Numerics/group0/grad_max_abs"]);
    CHECK(v["Numerics/group0/grad_zero_fraction"] >= 0);
    CHECK(v["Numerics/group0/grad_zero_fraction"] <= 1);
    CHECK(v["Numerics/group0/grad_nonfinite_fraction"] == 0);
    // The CSV monitor has the same number.
    std::ifstream in(base / "csv" / "Numerics_group0_grad_norm.csv");
    REQUIRE(in.good());
    std::string line;
    std::getline(in, line);  // header
    bool found = false;
    while (std::getline(in, line)) {
      const size_t comma = line.find(',');
      if (std::stoll(line.substr(0, comma)) != step * s.micro * s.world) continue;
      found = true;
      CHECK(std::stod(line.substr(comma + 1)) == doctest::Approx(v["Numerics/group0/grad_norm"]).epsilon(1e-6));
    }
    CHECK(found);
  }
  fs::remove_all(base);
}

}  // TEST_SUITE
