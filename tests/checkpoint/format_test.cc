// The format's pieces without I/O: XXH3 block checksums (the published empty-input value, streaming
// equals one-shot for any split), manifest.json and rankNNNNN.json round trips and strict parsing
// (each malformation named by JSON path), and tag validation.
#include <doctest/doctest.h>

#include "ckpt_test_util.h"
#include "zerorun/runtime/checkpoint_hash.h"
#include "zerorun/runtime/checkpoint_manifest.h"

using namespace ckpttest;

namespace {

std::vector<uint8_t> Bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n);
  Rng rng(seed, 1);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng.NextU32());
  return b;
}

CheckpointRankIndex SampleIndex() {
  CheckpointRankIndex x;
  x.tag = "global_step7";
  x.save_id = "abc-123";
  x.rank = 2;
  x.world_size = 3;
  x.shard = CheckpointShardFile(2);
  x.shard_bytes = 1000;
  x.data_begin = 200;
  x.chunks.push_back({"h.0.w", "exp_avg", 5, 100, "exp_avg/h.0.w/5", 0, 400, {0x0123456789abcdefull, 42}});
  x.chunks.push_back({"h.0.b", kSlotParam, 0, 0, "param/h.0.b/0", 400, 400, {}});
  return x;
}

// The JSON text with `from` replaced by `to` (which must occur).
std::string Edit(std::string json, const std::string& from, const std::string& to) {
  size_t at = json.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  json.replace(at, from.size(), to);
  return json;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("xxh3 block checksums: the published value, blocks, and streaming in any pieces") {
  CHECK(Xxh3("", 0) == 0x2d06800538d394c2ull);  // XXH3_64bits of empty input, seed 0 (xxHash spec)
  CHECK(HashToHex(0x2d06800538d394c2ull) == "2d06800538d394c2");
  uint64_t h = 0;
  CHECK(HashFromHex("2D06800538D394C2", &h));
  CHECK(h == 0x2d06800538d394c2ull);
  CHECK_FALSE(HashFromHex("2d06800538d394c", &h));
  CHECK_FALSE(HashFromHex("2d06800538d394cg", &h));

  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{4099}}) {
    for (uint64_t block : {uint64_t{8}, uint64_t{64}, uint64_t{4096}}) {
      CAPTURE(n);
      CAPTURE(block);
      std::vector<uint8_t> b = Bytes(n, n + block);
      std::vector<uint64_t> one = HashBlocks(b.data(), b.size(), block);
      CHECK(one.size() == (n + block - 1) / block);
      for (size_t k = 0; k < one.size(); ++k) {
        const size_t lo = k * block, len = std::min<size_t>(block, n - lo);
        CHECK(one[k] == Xxh3(b.data() + lo, len));
      }
      for (size_t piece : {size_t{1}, size_t{3}, size_t{64}, size_t{5000}}) {
        BlockHasher hasher(block);
        for (size_t at = 0; at < n; at += piece) hasher.Update(b.data() + at, std::min(piece, n - at));
        CHECK(hasher.Finish() == one);
      }
      // A flipped bit changes exactly the block that holds it.
      if (n > 0) {
        std::vector<uint8_t> c = b;
        c[n / 2] ^= 0x10;
        std::vector<uint64_t> other = HashBlocks(c.data(), c.size(), block);
        for (size_t k = 0; k < one.size(); ++k) CHECK((other[k] != one[k]) == (k == (n / 2) / block));
      }
    }
  }
}

TEST_CASE("manifest.json and rank indexes round trip field for field") {
  CheckpointManifest m = SyntheticManifest(DType::kF16);
  m.tag = "global_step12";
  m.save_id = "4d2-17f-99";
  m.world_size = 5;
  m.zero_stage = 3;
  m.checksum_block_bytes = 1 << 16;
  m.state_json = R"({"global_steps":12,"x":[1,2.5]})";
  m.client_state_json = R"({"user":{"epoch":3,"name":"run \"a\""}})";
  m.config_json = R"({"train_batch_size":8})";
  CheckpointManifest back = CheckpointManifestFromJson(CheckpointManifestToJson(m), "manifest.json");
  CHECK(back.format_version == kCheckpointFormatVersion);
  CHECK(back.tag == m.tag);
  CHECK(back.save_id == m.save_id);
  CHECK(back.world_size == 5);
  CHECK(back.zero_stage == 3);
  CHECK(back.model_dtype == DType::kF16);
  CHECK(back.optimizer == "Adam");
  CHECK(back.checksum_block_bytes == (1u << 16));
  REQUIRE(back.tensors.size() == m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    CHECK(back.tensors[i].name == m.tensors[i].name);
    CHECK(back.tensors[i].shape == m.tensors[i].shape);
    REQUIRE(back.tensors[i].slots.size() == m.tensors[i].slots.size());
    for (size_t s = 0; s < m.tensors[i].slots.size(); ++s) {
      CHECK(back.tensors[i].slots[s].name == m.tensors[i].slots[s].name);  // order kept
      CHECK(back.tensors[i].slots[s].dtype == m.tensors[i].slots[s].dtype);
    }
  }
  CHECK(back.state_json == m.state_json);
  CHECK(back.client_state_json == m.client_state_json);
  CHECK(back.config_json == m.config_json);

  CheckpointRankIndex x = SampleIndex();
  CheckpointRankIndex y = CheckpointRankIndexFromJson(CheckpointRankIndexToJson(x), "rank00002.json");
  CHECK(y.tag == x.tag);
  CHECK(y.save_id == x.save_id);
  CHECK(y.rank == 2);
  CHECK(y.world_size == 3);
  CHECK(y.shard == "rank00002.safetensors");
  CHECK(y.shard_bytes == 1000);
  CHECK(y.data_begin == 200);
  REQUIRE(y.chunks.size() == 2);
  CHECK(y.chunks[0].tensor == "h.0.w");
  CHECK(y.chunks[0].slot == "exp_avg");
  CHECK(y.chunks[0].offset == 5);
  CHECK(y.chunks[0].numel == 100);
  CHECK(y.chunks[0].key == "exp_avg/h.0.w/5");
  CHECK(y.chunks[0].data_end == 400);
  CHECK(y.chunks[0].hashes == std::vector<uint64_t>{0x0123456789abcdefull, 42});
  CHECK(y.chunks[1].hashes.empty());
  CHECK(CheckpointChunkKey("fp32", "a.b", 17) == "fp32/a.b/17");
}

TEST_CASE("manifest and index parsing is strict and names the file and JSON path") {
  CheckpointManifest m = SyntheticManifest();
  m.tag = "t";
  m.save_id = "s";
  const std::string good = CheckpointManifestToJson(m);
  auto err = [](const std::string& json) {
    return ErrorOf<CheckpointError>([&] { CheckpointManifestFromJson(json, "/ck/t/manifest.json"); });
  };
  CHECK(Contains(err(good.substr(0, good.size() / 2)), "/ck/t/manifest.json: not valid JSON at byte"));
  CHECK(Contains(err("[]"), "/ck/t/manifest.json: expected a JSON object"));
  CHECK(Contains(err(Edit(good, "\"zerorun-checkpoint\"", "\"other\"")),
                 "format: expected \"zerorun-checkpoint\", found \"other\""));
  CHECK(Contains(err(Edit(good, "\"format_version\":1", "\"format_version\":2")),
                 "format_version: version 2 was written by a newer zerorun; this build reads version 1"));
  CHECK(Contains(err(Edit(good, "\"world_size\":1", "\"world_size\":0")), "world_size: 0 is outside [1,"));
  CHECK(Contains(err(Edit(good, "\"zero_stage\":2", "\"zero_stage\":4")), "zero_stage: 4 is outside [0, 3]"));
  CHECK(Contains(err(Edit(good, "\"model_dtype\":\"BF16\"", "\"model_dtype\":\"F8\"")),
                 "model_dtype: unknown dtype \"F8\""));
  CHECK(Contains(err(Edit(good, "\"block_bytes\":4194304", "\"block_bytes\":12")),
                 "checksum.block_bytes: must be a positive multiple of 8"));
  CHECK(Contains(err(Edit(good, "\"xxh3_64\"", "\"crc32\"")), "checksum.algorithm: unknown algorithm \"crc32\""));
  CHECK(Contains(err(Edit(good, "\"name\":\"h.0.attn.b\"", "\"name\":\"h.0.attn.w\"")),
                 "tensors[2].name: tensor 'h.0.attn.w' appears twice"));
  CHECK(Contains(err(Edit(good, "\"shape\":[7]", "\"shape\":[-7]")), "tensors[1].shape[0]: expected a non-negative"));
  CHECK(Contains(err(Edit(good, "\"exp_avg\":\"F32\"", "\"exp_avg\":7")), "tensors[0].slots.exp_avg: expected a dtype"));
  CHECK(Contains(err(Edit(good, "\"tag\":\"t\",", "")), "missing key \"tag\""));
  CHECK(Contains(err(Edit(good, "\"state\":{}", "\"state\":[]")), "state: expected a JSON object"));
  // Unknown keys are ignored (a change old readers must not ignore bumps format_version).
  CHECK(CheckpointManifestFromJson(Edit(good, "{", "{\"future\":1,"), "m").tag == "t");

  const std::string idx = CheckpointRankIndexToJson(SampleIndex());
  auto ierr = [](const std::string& json) {
    return ErrorOf<CheckpointError>([&] { CheckpointRankIndexFromJson(json, "/ck/t/rank00002.json"); });
  };
  CHECK(Contains(ierr(Edit(idx, "\"rank\":2", "\"rank\":3")), "/ck/t/rank00002.json: rank: 3 is outside [0, 2]"));
  CHECK(Contains(ierr(Edit(idx, "\"shard\":\"rank00002.safetensors\"", "\"shard\":\"../x\"")),
                 "shard: \"../x\" is not a file name in the checkpoint directory"));
  CHECK(Contains(ierr(Edit(idx, "\"0123456789abcdef\"", "\"0123\"")), "chunks[0].xxh3_64[0]: expected 16 hex digits"));
  CHECK(Contains(ierr(Edit(idx, "\"data_offsets\":[0,400]", "\"data_offsets\":[0,900]")),
                 "chunks[0].data_offsets: [0, 900] runs past the shard's data region (800 bytes)"));
  CHECK(Contains(ierr(Edit(idx, "\"offset\":5", "\"offset\":-5")), "chunks[0].offset: -5 is outside"));
  CHECK(Contains(ierr(Edit(idx, "\"data_begin\":200", "\"data_begin\":2000")), "data_begin: 2000 is outside"));
}

TEST_CASE("checkpoint tags: names a directory can have, and the reserved ones") {
  for (const char* ok : {"global_step10", "best model", "v1.2-final", "ü"}) CHECK_NOTHROW(ValidateCheckpointTag(ok));
  CHECK(Contains(ErrorOf<InvalidArgument>([] { ValidateCheckpointTag(""); }), "non-empty"));
  CHECK(Contains(ErrorOf<InvalidArgument>([] { ValidateCheckpointTag("a/b"); }), "must not contain '/'"));
  CHECK(Contains(ErrorOf<InvalidArgument>([] { ValidateCheckpointTag(".hidden"); }), "must not start with '.'"));
  CHECK(Contains(ErrorOf<InvalidArgument>([] { ValidateCheckpointTag("latest"); }), "must not be 'latest'"));
  CHECK(Contains(ErrorOf<InvalidArgument>([] { ValidateCheckpointTag("a\nb"); }), "control characters"));
  CHECK(Contains(ErrorOf<InvalidArgument>([] { ValidateCheckpointTag(std::string(256, 'x')); }), "longer than 255"));
}

}  // TEST_SUITE
