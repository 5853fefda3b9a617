// Reshard on load: a checkpoint saved at (ZeRO stage a, world n) loads at (stage b, world m) with no
// offline step, each rank reading only what it holds. Checked for a matrix with 2→3, 4→2, 3→1, 2→4,
// 1→2 and stage changes in both directions: right after the load, the fp32 masters (fp32 training: the
// parameters) and every optimizer state slot, put together from all new ranks' partitions, equal the
// saved ones exactly; and training on at (b, m) with the same global batch follows the uninterrupted
// run at (a, n) within fp tolerance (reduction order differs, so not bitwise).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "tests/checkpoint/engine_ckpt_util.h"
#include "zerorun/zero/state_store.h"
#include "zerorun/zero/strategy.h"

namespace {

using namespace ckpttest;
using namespace enginetest;

// Mean loss per optimizer step over ranks and micro-steps.
std::vector<double> StepLosses(const Segment& s, int64_t gas) {
  std::vector<double> out;
  const size_t n = s.loss_bits[0].size();
  for (size_t i = 0; i < n; i += static_cast<size_t>(gas)) {
    double sum = 0;
    for (const auto& rank : s.loss_bits) {
      for (size_t m = 0; m < static_cast<size_t>(gas); ++m) {
        float f;
        std::memcpy(&f, &rank[i + m], 4);
        sum += f;
      }
    }
    out.push_back(sum / static_cast<double>(s.loss_bits.size() * static_cast<size_t>(gas)));
  }
  return out;
}

struct Reshard {
  int stage_a, world_a, stage_b, world_b;
  DType dtype;
};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("checkpoint engine: reshard on load across world sizes and stages (masters and state exact, loss follows)") {
  const fs::path dir = MemoryTempDir("engine_reshard");
  const fs::path data = WriteTextCorpus(dir);
  const std::vector<Reshard> matrix = {
      {2, 2, 3, 3, DType::kF32}, {1, 4, 2, 2, DType::kBF16}, {3, 3, 0, 1, DType::kF32},
      {0, 2, 3, 4, DType::kBF16}, {3, 2, 1, 3, DType::kF16}, {2, 1, 3, 2, DType::kF32},
  };
  constexpr int64_t kGlobal = 12;  // samples per micro-step over all ranks: micro = 12 / world
  constexpr int64_t kSteps = 4;
  int n = 0;
  for (const Reshard& r : matrix) {
    INFO("stage " << r.stage_a << " x " << r.world_a << " -> stage " << r.stage_b << " x " << r.world_b << " "
                  << std::string(DTypeName(r.dtype)));
    ResumeCase a;
    a.world = r.world_a;
    a.stage = r.stage_a;
    a.dtype = r.dtype;
    a.micro = kGlobal / r.world_a;
    a.dropout = 0;  // dropout masks follow the per-rank batch shape, which changes with the world size
    a.data = data.string();
    ResumeCase b = a;
    b.world = r.world_b;
    b.stage = r.stage_b;
    b.micro = kGlobal / r.world_b;
    const fs::path d = dir / std::to_string(n++);
    Segment straight = RunSegment(a, 0, 2 * kSteps, "", "");
    RunSegment(a, 0, kSteps, "", (d / "ck").string());
    CheckpointReader saved((d / "ck" / Format("global_step{}", kSteps)).string());

    // After the load at (b, m): every rank's extents of every slot, put together.
    std::mutex mu;
    std::map<std::pair<std::string, std::string>, std::vector<float>> loaded;
    std::map<std::pair<std::string, std::string>, int64_t> covered;
    auto collect = [&](Engine& e, comm::Communicator&) {
      std::vector<nn::Parameter*> by_id;  // zero/'s ids: trainable parameters group by group
      for (const ParamGroup& g : e.param_groups()) by_id.insert(by_id.end(), g.params.begin(), g.params.end());
      zero::StateStore& store = e.zero_strategy().state_store();
      const bool fp32 = e.model_dtype() == DType::kF32;
      for (const zero::StateExtent& x : e.zero_strategy().StateExtents()) {
        nn::Parameter* p = by_id.at(static_cast<size_t>(x.param));
        for (int k = 0; k < static_cast<int>(store.layout().slots.size()); ++k) {
          const std::string& name = store.layout().slots[static_cast<size_t>(k)].name;
          std::vector<float> v(static_cast<size_t>(x.numel));
          zero::ReadState(store, k, x.group, {x.partition_offset, x.partition_offset + x.numel}, v.data());
          std::lock_guard<std::mutex> lock(mu);
          auto key = std::make_pair(p->name(), name == "master" ? std::string(kSlotFp32) : name);
          auto& full = loaded[key];
          full.resize(static_cast<size_t>(p->numel()));
          std::copy(v.begin(), v.end(), full.begin() + x.param_offset);
          covered[key] += x.numel;
        }
        if (fp32) {  // fp32 training: the parameters are the masters
          zero::Range el;
          Tensor local = e.zero_strategy().LocalParameter(x.param, &el);
          std::vector<float> all = local.ToVector();
          std::lock_guard<std::mutex> lock(mu);
          auto key = std::make_pair(p->name(), std::string(kSlotParam));
          auto& full = loaded[key];
          full.resize(static_cast<size_t>(p->numel()));
          for (int64_t i = 0; i < x.numel; ++i) {
            full[static_cast<size_t>(x.param_offset + i)] = all[static_cast<size_t>(x.param_offset - el.begin + i)];
          }
          covered[key] += x.numel;
        }
      }
    };
    Segment resumed = RunSegment(b, kSteps, 2 * kSteps, (d / "ck").string(), "", 0, {}, collect);
    int64_t slots_checked = 0;
    for (const CheckpointTensor& t : saved.manifest().tensors) {
      for (const CheckpointSlot& s : t.slots) {
        if (s.name == kSlotParam && r.dtype != DType::kF32) continue;
        auto key = std::make_pair(t.name, s.name);
        REQUIRE_MESSAGE(loaded.count(key) == 1, t.name << " " << s.name);
        // Stage 0 / one rank: every rank holds everything, so each element is counted once per rank.
        const int64_t copies = (r.stage_b == 0 || r.world_b == 1) ? r.world_b : 1;
        CHECK(covered[key] == t.numel() * copies);
        Tensor want = saved.ReadTensor(t.name, s.name, DType::kF32);
        const std::vector<float> w = want.ToVector();
        INFO(t.name << " " << s.name);
        CHECK(std::memcmp(w.data(), loaded[key].data(), w.size() * 4) == 0);
        ++slots_checked;
      }
    }
    CHECK(slots_checked >= 20);
    const std::vector<double> all = StepLosses(straight, a.gas);
    const std::vector<double> tail = StepLosses(resumed, b.gas);
    REQUIRE(tail.size() == static_cast<size_t>(kSteps));
    const double tol = r.dtype == DType::kF32 ? 1e-5 : 2e-2;
    for (size_t i = 0; i < tail.size(); ++i) {
      INFO("step " << kSteps + static_cast<int64_t>(i) + 1 << ": " << all[kSteps + i] << " vs " << tail[i]);
      CHECK(std::fabs(all[static_cast<size_t>(kSteps) + i] - tail[i]) <= tol * std::fabs(all[kSteps + i]));
    }
  }
  fs::remove_all(dir);
}

}  // TEST_SUITE
