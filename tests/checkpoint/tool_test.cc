// zerorun-ckpt as a user runs it (real processes, real files): inspect (text and JSON), verify (exit
// 0, or 1 naming the damage), export (fp32 and bf16 values equal the reassembled masters, Hugging
// Face sharding with an index), the export's memory bounded by its read buffer rather than the largest
// tensor (measured by the tool as peak RSS), and bad usage and bad input.
#include <doctest/doctest.h>
#include <rapidjson/document.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "ckpt_test_util.h"
#include "zerorun/runtime/safetensors.h"

using namespace ckpttest;

namespace {

std::string Tool() {
  const char* b = std::getenv("ZERORUN_TEST_BINARY_DIR");
  REQUIRE_MESSAGE(b != nullptr, "ZERORUN_TEST_BINARY_DIR is not set (run through ctest)");
  return std::string(b) + "/bin/zerorun-ckpt";
}

struct Proc {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Proc Run(const std::string& args) {
  const fs::path errfile = fs::temp_directory_path() / ("zr_ckpt_tool_err_" + std::to_string(::getpid()));
  Proc p;
  FILE* f = ::popen((Tool() + " " + args + " 2>" + errfile.string()).c_str(), "r");
  REQUIRE(f != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) p.out.append(buf.data(), n);
  int st = ::pclose(f);
  p.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  p.err = ReadBytes(errfile);
  fs::remove(errfile);
  return p;
}

std::string Q(const fs::path& p) { return "'" + p.string() + "'"; }

fs::path SavedPair(const std::string& name) {
  fs::path d = TempDir(name);
  CheckpointWriteOptions o;
  o.save_dir = d.string();
  o.tag = "global_step3";
  TrainingState s;
  s.global_steps = 3;
  s.micro_steps = 6;
  s.global_samples = 48;
  WriteSynthetic(SyntheticManifest(), Layout::kFlat, 2, o, 3, TrainingStateToJson(s));
  o.tag = "global_step6";
  s.global_steps = 6;
  WriteSynthetic(SyntheticManifest(), Layout::kPerParam, 3, o, 6, TrainingStateToJson(s));
  return d;
}

uint64_t Field(const std::string& out, const std::string& key) {
  size_t at = out.find(key + " ");
  REQUIRE_MESSAGE(at != std::string::npos, out);
  return std::stoull(out.substr(at + key.size() + 1));
}

}  // namespace

TEST_SUITE("multiproc") {

TEST_CASE("zerorun-ckpt inspect: tags, world size, stage, dtypes, steps and sizes, as text and JSON") {
  fs::path d = SavedPair("inspect");
  Proc p = Run("inspect " + Q(d));
  CHECK(p.status == 0);
  CHECK(Contains(p.out, "checkpoint " + (d / "global_step6").string() + " (tag global_step6, latest)"));
  CHECK(Contains(p.out, "saved by 3 ranks, ZeRO stage 2, model dtype BF16, optimizer Adam, format version 1"));
  CHECK(Contains(p.out, "steps: global 6, micro 6, skipped 0, samples 48"));
  CHECK(Contains(p.out, "tensors: 7 ("));
  CHECK(Contains(p.out, "exp_avg F32"));
  CHECK(Contains(p.out, "tags in " + d.string() + ": global_step3 global_step6 (latest)"));
  p = Run("inspect " + Q(d) + " --tag global_step3 --json");
  REQUIRE(p.status == 0);
  rapidjson::Document doc;
  doc.Parse(p.out.c_str());
  REQUIRE_FALSE(doc.HasParseError());
  CHECK(std::string(doc["tag"].GetString()) == "global_step3");
  CHECK_FALSE(doc["latest"].GetBool());
  CHECK(doc["world_size"].GetInt() == 2);
  CHECK(doc["tags"].Size() == 2);
  CHECK(doc["state"]["global_steps"].GetInt() == 3);
  CHECK(std::string(doc["slots"]["param"]["dtype"].GetString()) == "BF16");
  int64_t elements = 0;
  for (const CheckpointTensor& t : SyntheticManifest().tensors) elements += t.numel();
  CHECK(doc["elements"].GetInt64() == elements);
  CHECK(doc["slots"]["fp32"]["bytes"].GetUint64() == static_cast<uint64_t>(elements - 18) * 4);  // frozen: no fp32
  uint64_t sum = 0;
  for (const auto& v : doc["rank_bytes"].GetArray()) sum += v.GetUint64();
  CHECK(sum == doc["total_bytes"].GetUint64());
  CHECK(sum == fs::file_size(d / "global_step3" / CheckpointShardFile(0)) +
                   fs::file_size(d / "global_step3" / CheckpointShardFile(1)));
  // A checkpoint directory given directly works the same.
  CHECK(Run("inspect " + Q(d / "global_step3")).status == 0);
  fs::remove_all(d);
}

TEST_CASE("zerorun-ckpt verify: OK for an intact checkpoint, exit 1 naming file, tensor and rank otherwise") {
  fs::path d = SavedPair("verify");
  Proc p = Run("verify " + Q(d));
  CHECK(p.status == 0);
  CHECK(Contains(p.out, "OK " + (d / "global_step6").string() + ": 3 ranks"));
  const fs::path dir = d / "global_step6";
  CheckpointRankIndex index = CheckpointRankIndexFromJson(ReadBytes(dir / CheckpointIndexFile(1)), "i");
  const CheckpointChunk& c = index.chunks.back();
  std::string b = ReadBytes(dir / CheckpointShardFile(1));
  b[index.data_begin + c.data_begin] = static_cast<char>(b[index.data_begin + c.data_begin] ^ 1);
  WriteBytes(dir / CheckpointShardFile(1), b);
  p = Run("verify " + Q(d));
  CHECK(p.status == 1);
  CHECK(Contains(p.err, CheckpointShardFile(1) + " (rank 1): checksum mismatch in tensor '" + c.tensor + "' slot '" +
                            c.slot + "'"));
  CHECK(Contains(p.err, "1 problem found"));
  // The other checkpoint is untouched.
  CHECK(Run("verify " + Q(d) + " --tag global_step3").status == 0);
  fs::remove(dir / CheckpointIndexFile(2));
  p = Run("verify " + Q(d));
  CHECK(p.status == 1);
  CHECK(Contains(p.err, "the files of rank 2 are missing"));
  fs::remove_all(d);
}

TEST_CASE("zerorun-ckpt export: fp32 masters (param where none), bf16, and Hugging Face shards with an index") {
  fs::path d = SavedPair("export");
  const CheckpointManifest m = SyntheticManifest();
  Proc p = Run("export " + Q(d) + " --out " + Q(d / "out32"));
  REQUIRE_MESSAGE(p.status == 0, p.err);
  CHECK(Contains(p.out, "exported 7 tensors"));
  SafetensorsReader r32((d / "out32" / "model.safetensors").string());
  CHECK(r32.metadata().at("format") == "pt");
  CHECK(r32.metadata().at("zerorun_global_steps") == "6");
  REQUIRE(r32.tensors().size() == m.tensors.size());
  for (const CheckpointTensor& t : m.tensors) {
    CAPTURE(t.name);
    const CheckpointSlot* s = t.FindSlot(kSlotFp32) ? t.FindSlot(kSlotFp32) : t.FindSlot(kSlotParam);
    Tensor got = r32.Read(t.name);
    CHECK(got.dtype() == DType::kF32);
    CHECK(got.shape() == t.shape);
    CHECK(got.ToVector() == SlotValues(t, *s, 0, t.numel(), 6).ToVector());
  }
  CHECK_FALSE(fs::exists(d / "out32" / "model.safetensors.index.json"));

  p = Run("export " + Q(d) + " --tag global_step3 --out " + Q(d / "out16") + " --dtype bf16 --max_shard_size 2KB");
  REQUIRE_MESSAGE(p.status == 0, p.err);
  rapidjson::Document index;
  const std::string text = ReadBytes(d / "out16" / "model.safetensors.index.json");
  index.Parse(text.c_str());
  REQUIRE_FALSE(index.HasParseError());
  const auto& map = index["weight_map"];
  CHECK(map.MemberCount() == m.tensors.size());
  std::set<std::string> files;
  uint64_t total = 0;
  for (const CheckpointTensor& t : m.tensors) {
    CAPTURE(t.name);
    const std::string file = map[t.name.c_str()].GetString();
    files.insert(file);
    SafetensorsReader r((d / "out16" / file).string());
    Tensor got = r.Read(t.name);
    CHECK(got.dtype() == DType::kBF16);
    const CheckpointSlot* s = t.FindSlot(kSlotFp32) ? t.FindSlot(kSlotFp32) : t.FindSlot(kSlotParam);
    Tensor want = SlotValues(t, *s, 0, t.numel(), 3).To(DType::kBF16);
    CHECK(SameBytes(got, want));
    total += want.nbytes();
  }
  CHECK(index["metadata"]["total_size"].GetUint64() == total);
  CHECK(files.size() >= 2);
  CHECK(files.count("model-00001-of-0000" + std::to_string(files.size()) + ".safetensors") == 1);
  // --slot picks another slot; one that a tensor lacks is named.
  p = Run("export " + Q(d) + " --out " + Q(d / "outm") + " --slot exp_avg");
  CHECK(p.status == 1);
  CHECK(Contains(p.err, "tensor 'lm_head.frozen' has no slot 'exp_avg' (saved: param)"));
  fs::remove_all(d);
}

TEST_CASE("zerorun-ckpt export: memory stays at the read buffer, not the largest tensor (peak RSS measured)") {
  // One 64 MiB fp32 tensor (16 Mi elements) in 4 per-rank chunks, plus a small one.
  fs::path d = TempDir("export_mem");
  CheckpointManifest m;
  m.zero_stage = 3;
  m.tensors = {{"big", {4096, 4096}, {{kSlotFp32, DType::kF32}}}, {"small", {3}, {{kSlotFp32, DType::kF32}}}};
  CheckpointWriteOptions o;
  o.save_dir = d.string();
  o.tag = "t";
  comm::RunLocalRanks(4, [&](comm::Communicator& comm) {
    CheckpointContents c;
    c.manifest = m;
    c.chunks = LayoutChunks(m, Layout::kPerParam, 4, comm.rank());
    Tensor held;
    c.fetch = [&](size_t i) {
      held = Tensor::Empty({c.chunks[i].numel}, DType::kF32);
      float* p = held.data_as<float>();
      for (int64_t k = 0; k < c.chunks[i].numel; ++k) p[k] = static_cast<float>(c.chunks[i].offset + k) * 0.5f;
      return held;
    };
    WriteCheckpoint(comm, o, c);
  });
  const uint64_t largest = uint64_t{64} << 20;
  Proc small = Run("export " + Q(d) + " --out " + Q(d / "a") + " --buffer_size 4MiB");
  REQUIRE_MESSAGE(small.status == 0, small.err);
  Proc large = Run("export " + Q(d) + " --out " + Q(d / "b") + " --buffer_size 128MiB");
  REQUIRE_MESSAGE(large.status == 0, large.err);
  const uint64_t grew_small = Field(small.out, "peak_rss_bytes") - Field(small.out, "start_rss_bytes");
  const uint64_t grew_large = Field(large.out, "peak_rss_bytes") - Field(large.out, "start_rss_bytes");
  MESSAGE("export of a 64 MiB tensor: peak RSS grew by " << grew_small / 1024 << " KiB with a 4 MiB buffer, "
          << grew_large / 1024 << " KiB with a 128 MiB buffer");
  // The 4 MiB buffer + one 4 MiB checksum block + the safetensors writer's 1 MiB + the O_DIRECT file's
  // 16 MiB of write buffers (runtime/checkpoint_env.cc), and 4 MiB of slack: none of it tensor-sized.
  CHECK(grew_small < uint64_t{29} << 20);
  CHECK(grew_large > largest * 9 / 10);   // the measurement sees a tensor-sized buffer when there is one
  SafetensorsReader r((d / "a" / "model.safetensors").string());
  Tensor big = r.Read("big");
  const float* p = big.data_as<float>();
  int64_t wrong = 0;
  for (int64_t k = 0; k < big.numel(); ++k) wrong += p[k] != static_cast<float>(k) * 0.5f;
  CHECK(wrong == 0);
  CHECK(ReadBytes(d / "a" / "model.safetensors") == ReadBytes(d / "b" / "model.safetensors"));
  fs::remove_all(d);
}

TEST_CASE("zerorun-ckpt: bad usage exits 2, bad input exits 1 with the reason") {
  fs::path d = TempDir("tool_bad");
  Proc p = Run("");
  CHECK(p.status == 2);
  CHECK(Contains(p.err, "usage: zerorun-ckpt inspect"));
  CHECK(Run("frobnicate " + Q(d)).status == 2);
  CHECK(Contains(Run("export " + Q(d)).err, "export needs --out DIR"));
  CHECK(Contains(Run("export " + Q(d) + " --out x --dtype fp8").err, "--dtype must be fp32, bf16 or fp16"));
  CHECK(Contains(Run("export " + Q(d) + " --out x --max_shard_size lots").err, "--max_shard_size needs a positive size"));
  CHECK(Contains(Run("verify " + Q(d) + " --json").err, "unknown flag '--json' for verify"));
  p = Run("inspect " + Q(d / "absent"));
  CHECK(p.status == 1);
  CHECK(Contains(p.err, "holds no checkpoint: no 'latest' file and no manifest.json"));
  fs::create_directories(d / "ds" / "global_step1");
  WriteBytes(d / "ds" / "latest", "global_step1");
  WriteBytes(d / "ds" / "global_step1" / "mp_rank_00_model_states.pt", "PK\x03\x04");
  p = Run("verify " + Q(d / "ds"));
  CHECK(p.status == 1);
  CHECK(Contains(p.err, "zerorun does not read torch pickles"));
  fs::remove_all(d);
}

}  // TEST_SUITE
