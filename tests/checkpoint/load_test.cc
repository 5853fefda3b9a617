// Loading bad checkpoints: each failure a CheckpointError that names the file, the rank and the
// tensor, found before any tensor is used — a truncated shard, one flipped byte (data or header), a
// missing rank's files, an index from another save, a manifest of another model, a checkpoint
// directory that is a file, a DeepSpeed .pt checkpoint (refused with how to convert), a missing
// `latest` (nothing to load, as DeepSpeed), and reads the checkpoint cannot serve.
#include <doctest/doctest.h>

#include "ckpt_test_util.h"
#include "zerorun/runtime/safetensors.h"

using namespace ckpttest;

namespace {

// A 3-rank per-parameter checkpoint of the synthetic model (values of version 7) at dir/tag.
fs::path Saved(const std::string& name, const std::string& tag = "global_step7") {
  fs::path d = TempDir(name);
  CheckpointWriteOptions o;
  o.save_dir = d.string();
  o.tag = tag;
  WriteSynthetic(SyntheticManifest(), Layout::kPerParam, 3, o, 7);
  return d;
}

void FlipByte(const fs::path& p, uint64_t offset) {
  std::string b = ReadBytes(p);
  REQUIRE(offset < b.size());
  b[offset] = static_cast<char>(b[offset] ^ 0x20);
  WriteBytes(p, b);
}

std::string OpenError(const fs::path& dir) {
  return ErrorOf<CheckpointError>([&] { CheckpointReader r(dir.string()); });
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("bad checkpoint: a truncated shard is found when opening, naming the file and rank") {
  fs::path d = Saved("truncated");
  const fs::path shard = d / "global_step7" / CheckpointShardFile(1);
  std::string b = ReadBytes(shard);
  WriteBytes(shard, b.substr(0, b.size() - 10));
  std::string err = OpenError(d / "global_step7");
  CHECK(Contains(err, shard.string() + " (rank 1) is " + std::to_string(b.size() - 10) + " bytes but its index records " +
                          std::to_string(b.size()) + ": truncated shard"));
  CheckpointVerifyReport r = VerifyCheckpoint((d / "global_step7").string());
  REQUIRE(r.problems.size() == 1);
  CHECK(Contains(r.problems[0], "truncated shard"));
  // Truncated below the safetensors header: the same check catches it first.
  WriteBytes(shard, b.substr(0, 5));
  CHECK(Contains(OpenError(d / "global_step7"), "is 5 bytes but its index records"));
  fs::remove_all(d);
}

TEST_CASE("bad checkpoint: one flipped byte fails the read of that chunk, naming file, tensor, slot and rank") {
  fs::path d = Saved("flipped");
  const fs::path dir = d / "global_step7";
  CheckpointRankIndex index = CheckpointRankIndexFromJson(ReadBytes(dir / CheckpointIndexFile(2)), "rank00002.json");
  // The exp_avg chunk of the 4099-element tensor on rank 2.
  const CheckpointChunk* chunk = nullptr;
  for (const CheckpointChunk& c : index.chunks) {
    if (c.tensor == "h.0.mlp.w" && c.slot == "exp_avg") chunk = &c;
  }
  REQUIRE(chunk != nullptr);
  FlipByte(dir / CheckpointShardFile(2), index.data_begin + chunk->data_begin + 5);
  CheckpointReader reader(dir.string());  // opening reads no tensor data
  std::string err = ErrorOf<CheckpointError>([&] { reader.ReadTensor("h.0.mlp.w", "exp_avg"); });
  CHECK(Contains(err, (dir / CheckpointShardFile(2)).string() + " (rank 2): checksum mismatch in tensor 'h.0.mlp.w' "
                      "slot 'exp_avg'"));
  CHECK(Contains(err, "the shard is corrupt"));
  // Everything else still reads, and the same tensor's other slots too.
  CHECK_NOTHROW(reader.ReadTensor("h.0.mlp.w", "fp32"));
  CHECK_NOTHROW(reader.ReadTensor("wte.weight", "exp_avg"));
  // Ranks 0 and 1's part of the corrupt slot read fine: only the touched blocks are checked.
  std::vector<float> part(100);
  reader.Read({{"h.0.mlp.w", "exp_avg", 0, 100, part.data(), DType::kF32}});
  CheckpointVerifyReport r = VerifyCheckpoint(dir.string());
  REQUIRE(r.problems.size() == 1);
  CHECK(Contains(r.problems[0], "rank 2"));
  CHECK(Contains(r.problems[0], "'h.0.mlp.w' slot 'exp_avg'"));
  CHECK(r.chunks > 10);

  // A flipped byte in a shard's header: the header no longer parses or no longer matches the index.
  fs::path d2 = Saved("flipped_header");
  FlipByte(d2 / "global_step7" / CheckpointShardFile(0), 12);
  CheckpointReader r2((d2 / "global_step7").string());
  err = ErrorOf<CheckpointError>([&] { r2.ReadTensor("wte.weight", "fp32"); });
  CHECK(Contains(err, CheckpointShardFile(0)));
  CheckpointVerifyReport v2 = VerifyCheckpoint((d2 / "global_step7").string());
  CHECK_FALSE(v2.ok());
  CHECK(Contains(v2.problems[0], CheckpointShardFile(0)));
  fs::remove_all(d);
  fs::remove_all(d2);
}

TEST_CASE("bad checkpoint: missing ranks' files are listed, all of them, before anything is read") {
  fs::path d = Saved("missing");
  const fs::path dir = d / "global_step7";
  fs::remove(dir / CheckpointIndexFile(1));
  fs::remove(dir / CheckpointShardFile(1));
  std::string err = OpenError(dir);
  CHECK(Contains(err, "checkpoint " + dir.string() + " is incomplete: the files of rank 1 are missing (world size 3): "
                      "rank00001.json, rank00001.safetensors"));
  fs::remove(dir / CheckpointShardFile(2));
  err = OpenError(dir);
  CHECK(Contains(err, "the files of ranks 1, 2 are missing (world size 3): rank00001.json, rank00001.safetensors, "
                      "rank00002.safetensors"));
  CheckpointVerifyReport r = VerifyCheckpoint(dir.string());
  CHECK_FALSE(r.ok());
  CHECK(Contains(r.problems[0], "ranks 1, 2"));
  // An index from another save of the same tag.
  fs::path other = Saved("missing_other");
  fs::path d3 = Saved("missing_mixed");
  fs::copy_file(other / "global_step7" / CheckpointIndexFile(1), d3 / "global_step7" / CheckpointIndexFile(1),
                fs::copy_options::overwrite_existing);
  CHECK(Contains(OpenError(d3 / "global_step7"), CheckpointIndexFile(1) + " belongs to another save"));
  fs::remove_all(d);
  fs::remove_all(other);
  fs::remove_all(d3);
}

TEST_CASE("bad checkpoint: a manifest of another model names the first differing tensors") {
  const CheckpointManifest m = SyntheticManifest();
  std::vector<CheckpointModelTensor> model;
  for (const CheckpointTensor& t : m.tensors) model.push_back({t.name, t.shape});
  CHECK_NOTHROW(CheckCheckpointMatchesModel(m, "/ck/a", model));
  model[1].shape = {8};                      // h.0.attn.w: [7] saved
  model.push_back({"h.2.attn.w", {4, 4}});   // not saved
  model.erase(model.begin() + 2);            // h.0.attn.b saved, not in the model
  std::string err = ErrorOf<CheckpointError>([&] { CheckCheckpointMatchesModel(m, "/ck/a", model); });
  CHECK(err == "checkpoint /ck/a does not match the model (saved from another model?): 'h.0.attn.w' has shape [7] "
               "in the checkpoint and [8] in the model; 'h.2.attn.w' is in the model but not in the checkpoint; "
               "'h.0.attn.b' is in the checkpoint but not in the model");
  // Not strict (load_module_strict false): names may differ, shapes may not.
  err = ErrorOf<CheckpointError>([&] { CheckCheckpointMatchesModel(m, "/ck/a", model, false); });
  CHECK(err == "checkpoint /ck/a does not match the model (saved from another model?): 'h.0.attn.w' has shape [7] "
               "in the checkpoint and [8] in the model");
  // Many differences: the first five and a count.
  std::vector<CheckpointModelTensor> other;
  for (int i = 0; i < 9; ++i) other.push_back({"x" + std::to_string(i), {1}});
  err = ErrorOf<CheckpointError>([&] { CheckCheckpointMatchesModel(m, "/ck/a", other); });
  CHECK(Contains(err, "'x0' is in the model but not in the checkpoint; 'x1'"));
  CHECK(Contains(err, "; ... and 11 more"));
}

TEST_CASE("bad checkpoint: a checkpoint directory that is a file") {
  fs::path d = TempDir("isfile");
  WriteBytes(d / "ckpt", "x");
  CHECK(OpenError(d / "ckpt") == "checkpoint directory " + (d / "ckpt").string() + " is a file, not a directory");
  CHECK(ErrorOf<CheckpointError>([&] { ResolveCheckpointDir((d / "ckpt").string(), ""); }) ==
        "checkpoint directory " + (d / "ckpt").string() + " is a file, not a directory");
  CHECK(Contains(ErrorOf<CheckpointError>([&] { ReadLatestCheckpointTag((d / "ckpt").string()); }), "is a file"));
  CHECK(Contains(ErrorOf<CheckpointError>([&] { ListCheckpointTags((d / "ckpt").string()); }), "is a file"));
  // The tag inside a save directory is a file.
  fs::create_directories(d / "save");
  WriteBytes(d / "save" / "latest", "t1");
  WriteBytes(d / "save" / "t1", "x");
  std::optional<std::string> dir = ResolveCheckpointDir((d / "save").string(), "");
  REQUIRE(dir.has_value());
  CHECK(Contains(OpenError(*dir), "is a file, not a directory"));
  fs::remove_all(d);
}

TEST_CASE("bad checkpoint: a DeepSpeed .pt checkpoint is refused with how to convert it") {
  fs::path d = TempDir("deepspeed");
  WriteBytes(d / "latest", "global_step10");
  fs::create_directories(d / "global_step10");
  WriteBytes(d / "global_step10" / "mp_rank_00_model_states.pt", std::string("PK\x03\x04", 4) + "torch zip");
  WriteBytes(d / "global_step10" / "zero_pp_rank_0_mp_rank_00_optim_states.pt", std::string("PK\x03\x04", 4));
  WriteBytes(d / "global_step10" / "zero_to_fp32.py", "#!/usr/bin/env python\n");
  std::optional<std::string> dir = ResolveCheckpointDir(d.string(), "");
  REQUIRE(dir.has_value());
  std::string err = OpenError(*dir);
  CHECK(Contains(err, (d / "global_step10").string() + " is a DeepSpeed/PyTorch checkpoint (it holds "));
  CHECK(Contains(err, "zerorun does not read torch pickles"));
  CHECK(Contains(err, "zero_to_fp32.py <checkpoint_dir> <output_dir> --safe_serialization"));
  CHECK(Contains(err, "LoadSafetensorsIntoModel"));
  CHECK(Contains(err, "load_module_only"));
  // A save directory of .pt files without `latest`, and a single torch file (zip or raw pickle).
  fs::remove(d / "latest");
  CHECK(Contains(ErrorOf<CheckpointError>([&] { ResolveCheckpointDir((d / "global_step10").string(), ""); }),
                 "zerorun does not read torch pickles"));
  WriteBytes(d / "model.bin", std::string("\x80\x02}q\x00", 5));
  CHECK(Contains(DescribeTorchCheckpoint((d / "model.bin").string()), "a torch.save file"));
  CHECK(Contains(ErrorOf<CheckpointError>([&] { ResolveCheckpointDir((d / "model.bin").string(), ""); }),
                 "zerorun does not read torch pickles"));
  CHECK(DescribeTorchCheckpoint((d / "latest-none").string()).empty());
  fs::remove_all(d);
}

TEST_CASE("checkpoint load: no latest means nothing to load; a missing tag lists the ones there") {
  fs::path d = TempDir("nolatest");
  CHECK_FALSE(ResolveCheckpointDir((d / "absent").string(), "").has_value());  // first run of a job
  CHECK_FALSE(ResolveCheckpointDir(d.string(), "").has_value());
  CHECK_FALSE(ReadLatestCheckpointTag(d.string()).has_value());
  fs::remove_all(d);
  fs::path s = Saved("tags", "a");
  CheckpointWriteOptions o;
  o.save_dir = s.string();
  o.tag = "b";
  o.save_latest = false;
  WriteSynthetic(SyntheticManifest(), Layout::kFlat, 1, o, 1);
  CHECK(ErrorOf<CheckpointError>([&] { ResolveCheckpointDir(s.string(), "c"); }) ==
        "checkpoint " + (s / "c").string() + " does not exist; checkpoints in " + s.string() + ": a, b");
  WriteBytes(s / "latest", "gone\n");
  CHECK(Contains(ErrorOf<CheckpointError>([&] { ResolveCheckpointDir(s.string(), ""); }),
                 (s / "gone").string() + " does not exist (named by latest)"));
  WriteBytes(s / "latest", "../etc");
  CHECK(Contains(ErrorOf<CheckpointError>([&] { ReadLatestCheckpointTag(s.string()); }), "does not hold a usable tag"));
  // A checkpoint directory given directly.
  CHECK(ResolveCheckpointDir((s / "b").string(), "") == std::optional<std::string>((s / "b").string()));
  // No manifest: not a checkpoint.
  fs::create_directories(s / "empty");
  CHECK(Contains(OpenError(s / "empty"), "has no manifest.json: not a zerorun checkpoint"));
  WriteBytes(s / "empty" / "manifest.json", "{\"format\": \"zerorun-checkpoint\"");
  CHECK(Contains(OpenError(s / "empty"), (s / "empty" / "manifest.json").string() + ": not valid JSON"));
  fs::remove_all(s);
}

TEST_CASE("checkpoint load: reads convert floating dtypes exactly and refuse what the checkpoint lacks") {
  fs::path d = Saved("reads");
  const CheckpointManifest m = SyntheticManifest();
  CheckpointReader reader((d / "global_step7").string());
  const CheckpointTensor& t = *m.FindTensor("wte.weight");
  // bf16 "param" read as fp32 is exact; fp32 masters read as bf16 round to nearest even.
  Tensor as_f32 = reader.ReadTensor(t.name, kSlotParam, DType::kF32);
  CHECK(as_f32.ToVector() == SlotValues(t, *t.FindSlot(kSlotParam), 0, t.numel(), 7).ToVector());
  Tensor as_bf16 = reader.ReadTensor(t.name, kSlotFp32, DType::kBF16);
  Tensor want = SlotValues(t, *t.FindSlot(kSlotFp32), 0, t.numel(), 7).To(DType::kBF16);
  CHECK(SameBytes(as_bf16, want));
  CHECK(as_bf16.shape() == t.shape);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { reader.ReadTensor("nope", kSlotFp32); }), "has no tensor 'nope'"));
  CHECK(Contains(ErrorOf<CheckpointError>([&] { reader.ReadTensor("lm_head.frozen", kSlotFp32); }),
                 "tensor 'lm_head.frozen' has no slot 'fp32' (saved: param)"));
  std::vector<int32_t> ints(4);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { reader.Read({{t.name, kSlotFp32, 0, 4, ints.data(), DType::kI32}}); }),
                 "is stored as fp32 and cannot be read as int32"));
  std::vector<float> buf(4);
  CHECK(Contains(ErrorOf<InvalidArgument>([&] { reader.Read({{t.name, kSlotFp32, 126, 4, buf.data(), DType::kF32}}); }),
                 "wanted elements [126, 130) are outside its 128 elements"));
  fs::remove_all(d);
}

TEST_CASE("checkpoint read: spread over threads it reads what one thread reads, and reports the first bad block") {
  fs::path d = TempDir("spread");
  CheckpointWriteOptions o;
  o.save_dir = d.string();
  o.tag = "global_step7";
  o.checksum_block_bytes = 256;  // the 4099-element tensor spans tens of blocks per rank
  const CheckpointManifest m = SyntheticManifest();
  WriteSynthetic(m, Layout::kPerParam, 3, o, 7);
  const fs::path dir = d / "global_step7";
  // Every slot of every tensor in one call, on one thread and spread.
  const auto read_all = [&](CheckpointReader& reader, std::vector<Tensor>* out) {
    std::vector<CheckpointReadRequest> rq;
    for (const CheckpointTensor& t : m.tensors) {
      for (const CheckpointSlot& s : t.slots) {
        out->push_back(Tensor::Empty({t.numel()}, s.dtype));
        rq.push_back({t.name, s.name, 0, t.numel(), out->back().data(), s.dtype});
      }
    }
    reader.Read(rq);
  };
  CheckpointReader one(dir.string()), spread(dir.string());
  one.set_parallel_bytes(UINT64_MAX);
  spread.set_parallel_bytes(0);
  std::vector<Tensor> a, b;
  read_all(one, &a);
  read_all(spread, &b);
  REQUIRE(a.size() == b.size());
  size_t k = 0;
  for (const CheckpointTensor& t : m.tensors) {
    for (const CheckpointSlot& s : t.slots) {
      CAPTURE(t.name);
      CAPTURE(s.name);
      CHECK(SameBytes(b[k], SlotValues(t, s, 0, t.numel(), 7)));
      CHECK(SameBytes(a[k], b[k]));
      ++k;
    }
  }
  CHECK(spread.stats().bytes_read == one.stats().bytes_read);
  CHECK(spread.stats().blocks_verified == one.stats().blocks_verified);
  CHECK(spread.stats().blocks_verified > 100);

  // Two corrupt blocks of rank 2's exp_avg chunk of the 4099-element tensor: the error is the first
  // block's, every time, however the threads interleave.
  CheckpointRankIndex index = CheckpointRankIndexFromJson(ReadBytes(dir / CheckpointIndexFile(2)), "rank00002.json");
  const CheckpointChunk* chunk = nullptr;
  for (const CheckpointChunk& c : index.chunks) {
    if (c.tensor == "h.0.mlp.w" && c.slot == "exp_avg") chunk = &c;
  }
  REQUIRE(chunk != nullptr);
  REQUIRE(chunk->hashes.size() > 12);
  FlipByte(dir / CheckpointShardFile(2), index.data_begin + chunk->data_begin + 3 * 256 + 5);
  FlipByte(dir / CheckpointShardFile(2), index.data_begin + chunk->data_begin + 4 * 256 + 9);  // the next piece's
  std::vector<float> v(4099);
  const auto first_error = [&](uint64_t parallel_bytes) {
    CheckpointReader r(dir.string());
    r.set_parallel_bytes(parallel_bytes);
    return ErrorOf<CheckpointError>([&] { r.Read({{"h.0.mlp.w", "exp_avg", 0, 4099, v.data(), DType::kF32}}); });
  };
  const std::string serial_err = first_error(UINT64_MAX);
  CHECK(Contains(serial_err, "(rank 2): checksum mismatch in tensor 'h.0.mlp.w' slot 'exp_avg'"));
  CHECK(Contains(serial_err, "block 3 of " + std::to_string(chunk->hashes.size())));
  for (int rep = 0; rep < 20; ++rep) CHECK(first_error(0) == serial_err);

  // A read failing (EIO) on one thread is the call's IoError; the others stop.
  FaultEnv env;
  env.fail_read_path = CheckpointShardFile(1);
  env.fail_read_after_bytes = 2048;
  CheckpointReader faulty(dir.string(), &env);
  faulty.set_parallel_bytes(0);
  std::vector<float> w(4099);
  std::string err = ErrorOf<IoError>([&] { faulty.Read({{"h.0.mlp.w", kSlotFp32, 0, 4099, w.data(), DType::kF32}}); });
  CHECK(Contains(err, CheckpointShardFile(1)));
  fs::remove_all(d);
}

}  // TEST_SUITE
