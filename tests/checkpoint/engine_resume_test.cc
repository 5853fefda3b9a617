// Engine::SaveCheckpoint / LoadCheckpoint: a run interrupted by a save and continued by a new engine
// (a new model built from other weights, a new sampler) is bitwise the uninterrupted run — losses of
// every micro-step on every rank, and at the end every saved slot (weights, fp32 masters, optimizer
// state) and the step state — at ZeRO stages 0-3 x fp32/bf16/fp16 x accumulation 1/2, with dropout on
// and a text data file. And DeepSpeed's semantics: the default tag, `latest`, nothing loaded without
// it, client state, load_module_only, load_optimizer_states, load_module_strict,
// exclude_frozen_parameters, tag_validation.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <mutex>

#include "tests/checkpoint/engine_ckpt_util.h"

namespace {

using namespace ckpttest;
using namespace enginetest;

// Every tensor slot bitwise equal, and the step state too unless `tensors_only` (a checkpoint saved at
// another world size: its sampler's world size differs).
void CheckSameCheckpoint(const fs::path& a, const fs::path& b, bool tensors_only = false) {
  CheckpointReader ra(a.string()), rb(b.string());
  const CheckpointManifest& ma = ra.manifest();
  const CheckpointManifest& mb = rb.manifest();
  if (!tensors_only) CHECK(ma.state_json == mb.state_json);
  REQUIRE(ma.tensors.size() == mb.tensors.size());
  for (size_t i = 0; i < ma.tensors.size(); ++i) {
    const CheckpointTensor& t = ma.tensors[i];
    REQUIRE(t.name == mb.tensors[i].name);
    REQUIRE(t.slots.size() == mb.tensors[i].slots.size());
    for (const CheckpointSlot& s : t.slots) {
      Tensor x = ra.ReadTensor(t.name, s.name), y = rb.ReadTensor(t.name, s.name);
      INFO("tensor " << t.name << " slot " << s.name);
      REQUIRE(x.nbytes() == y.nbytes());
      CHECK(std::memcmp(x.data(), y.data(), x.nbytes()) == 0);
    }
  }
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("checkpoint engine: 20 steps = 10 + save + a new engine loading + 10, bitwise, stages 0-3 x dtypes x accumulation") {
  const fs::path dir = MemoryTempDir("engine_resume");
  const fs::path data = WriteTextCorpus(dir);
  int n = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t gas : {int64_t{1}, int64_t{2}}) {
        ResumeCase c;
        c.world = 2;
        c.stage = stage;
        c.dtype = dtype;
        c.gas = gas;
        c.data = data.string();
        const fs::path d = dir / std::to_string(n++);
        INFO("stage " << stage << " " << std::string(DTypeName(dtype)) << " gas " << gas);
        Segment straight = RunSegment(c, 0, 20, "", (d / "straight").string());
        Segment first = RunSegment(c, 0, 10, "", (d / "resumed").string());
        Segment second = RunSegment(c, 10, 20, (d / "resumed").string(), (d / "resumed").string());
        CHECK(second.loaded_steps == 10);
        for (int r = 0; r < c.world; ++r) {
          std::vector<uint32_t> joined = first.loss_bits[static_cast<size_t>(r)];
          const auto& tail = second.loss_bits[static_cast<size_t>(r)];
          joined.insert(joined.end(), tail.begin(), tail.end());
          CHECK(joined == straight.loss_bits[static_cast<size_t>(r)]);
        }
        CheckSameCheckpoint(d / "straight" / "global_step20", d / "resumed" / "global_step20");
      }
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: one rank and three ranks resume bitwise too, and so does the one-pass load") {
  // On disk (O_DIRECT where the file system takes it: the one-pass load's reads bypass the page cache).
  const fs::path dir = TempDir("engine_resume_worlds");
  const fs::path data = WriteTextCorpus(dir);
  for (int world : {1, 3}) {
    ResumeCase c;
    c.world = world;
    c.stage = world == 1 ? 2 : 3;
    c.dtype = DType::kBF16;
    c.data = data.string();
    const fs::path d = dir / std::to_string(world);
    INFO("world " << world);
    Segment straight = RunSegment(c, 0, 12, "", (d / "straight").string());
    RunSegment(c, 0, 6, "", (d / "resumed").string());
    // The one-pass load first (it saves elsewhere), then the default one from the same global_step6.
    LoadCheckpointOptions one_pass;
    one_pass.verify_before_apply = false;
    Segment onepass = RunSegment(c, 6, 12, (d / "resumed").string(), (d / "onepass").string(), 0, one_pass);
    Segment second = RunSegment(c, 6, 12, (d / "resumed").string(), (d / "resumed").string());
    CHECK(onepass.loaded_steps == 6);
    for (int r = 0; r < world; ++r) {
      const auto& all = straight.loss_bits[static_cast<size_t>(r)];
      std::vector<uint32_t> tail(all.end() - static_cast<ptrdiff_t>(second.loss_bits[static_cast<size_t>(r)].size()),
                                 all.end());
      CHECK(tail == second.loss_bits[static_cast<size_t>(r)]);
      CHECK(tail == onepass.loss_bits[static_cast<size_t>(r)]);
    }
    CheckSameCheckpoint(d / "straight" / "global_step12", d / "resumed" / "global_step12");
    CheckSameCheckpoint(d / "straight" / "global_step12", d / "onepass" / "global_step12");
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: parameter offload (cpu, nvme) resumes bitwise, saves what no offload saves, reshards") {
  const fs::path dir = TempDir("engine_resume_param_offload");  // a real file system: O_DIRECT swap files
  const fs::path swap = dir / "swap";
  fs::create_directories(swap);
  ResumeCase c;
  c.world = 2;
  c.stage = 3;
  c.dtype = DType::kBF16;
  c.gas = 2;
  c.data = WriteTextCorpus(dir).string();
  c.zero_json = R"(, "stage3_param_persistence_threshold": 0, "sub_group_size": 500)";
  const std::string base = c.zero_json;
  Segment none = RunSegment(c, 0, 12, "", (dir / "none").string());
  for (const char* device : {"cpu", "nvme"}) {
    INFO("offload_param " << std::string(device));
    c.zero_json = base + Format(R"(, "offload_param": {{"device": "{}", "nvme_path": "{}", "buffer_count": 3}})",
                                device, swap.string());
    const fs::path d = dir / device;
    Segment straight = RunSegment(c, 0, 12, "", (d / "straight").string());
    RunSegment(c, 0, 6, "", (d / "resumed").string());
    Segment second = RunSegment(c, 6, 12, (d / "resumed").string(), (d / "resumed").string());
    CHECK(second.loaded_steps == 6);
    for (int r = 0; r < c.world; ++r) {
      const auto& all = straight.loss_bits[static_cast<size_t>(r)];
      CHECK(all == none.loss_bits[static_cast<size_t>(r)]);
      std::vector<uint32_t> tail(all.end() - static_cast<ptrdiff_t>(second.loss_bits[static_cast<size_t>(r)].size()),
                                 all.end());
      CHECK(tail == second.loss_bits[static_cast<size_t>(r)]);
    }
    CheckSameCheckpoint(dir / "none" / "global_step12", d / "straight" / "global_step12");
    CheckSameCheckpoint(d / "straight" / "global_step12", d / "resumed" / "global_step12");
    // Reshard: the offloaded 2-rank checkpoint into 3 ranks with offload and 1 rank without; saved again
    // at once, each is the same checkpoint.
    Segment three = RunSegment(c, 12, 12, (d / "straight").string(), (d / "three").string(), 3);
    CHECK(three.loaded_steps == 12);
    CheckSameCheckpoint(dir / "none" / "global_step12", d / "three" / "global_step12", /*tensors_only=*/true);
    ResumeCase plain = c;
    plain.zero_json = base;
    Segment one = RunSegment(plain, 12, 12, (d / "three").string(), (d / "one").string(), 1);
    CHECK(one.loaded_steps == 12);
    CheckSameCheckpoint(dir / "none" / "global_step12", d / "one" / "global_step12", /*tensors_only=*/true);
  }
  CHECK(fs::is_empty(swap));  // every job removed its swap directories
  fs::remove_all(dir);
}

}  // TEST_SUITE
