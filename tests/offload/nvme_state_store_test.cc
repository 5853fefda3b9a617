// The NVMe state store (offload/nvme_state_store.h): sub-groups round-trip through the swap file with
// fewer buffers than sub-groups, pipelined or not; host memory is the declared buffers; a failed
// swap-out (ENOSPC) is an IoError naming file and rank and leaves the previous state committed (and,
// through the PartitionOptimizer, the previous parameters); a truncated or deleted swap file is an
// error naming it; io_uring unavailable falls back to pread; jobs sharing nvme_path do not clobber.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>

#include "offload_test_util.h"
#include "zerorun/core/memory.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/offload/nvme_state_store.h"
#include "zerorun/zero/partition_optimizer.h"

using namespace zr_offload_test;
namespace z = zerorun::zero;

namespace {

constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Two groups, three slots, sub-groups of 1000 elements (5 + 3 of them).
z::StateStoreLayout Layout() {
  return z::MakeStateStoreLayout({{"master", MemCategory::kMaster}, {"a", MemCategory::kOptimizer},
                                  {"b", MemCategory::kOptimizer}},
                                 {{1000, 1000, 1000, 1000, 900}, {1000, 1000, 500}}, 1000);
}

NvmeStateStoreOptions Opts(const std::string& path, FileEnv* env = nullptr, const std::string& job = "nvme-test",
                           int rank = 0) {
  NvmeStateStoreOptions o;
  o.dir.nvme_path = path;
  o.dir.config_key = kKey;
  o.dir.job_id = job;
  o.dir.rank = rank;
  o.dir.env = env;
  o.io.block_size = 64 * 1024;
  o.buffer_count = 2;
  return o;
}

float Value(int sub, int slot, int64_t i, int gen) {
  return static_cast<float>(sub * 100000 + slot * 10000 + i) + 0.5f * static_cast<float>(gen);
}

// Every sub-group written with generation `gen`'s values.
void WriteAll(z::StateStore& s, int gen) {
  for (int i = 0; i < s.layout().num_sub_groups(); ++i) {
    s.Prefetch(i + 1 < s.layout().num_sub_groups() ? i + 1 : i, z::StateAccess::kReadWrite);
    z::SubGroupState st = s.Acquire(i, z::StateAccess::kReadWrite);
    for (size_t k = 0; k < st.slots.size(); ++k) {
      for (int64_t j = 0; j < st.numel; ++j) st.slots[k][j] = Value(i, static_cast<int>(k), j, gen);
    }
    s.Release(i);
  }
  s.Flush();
}

// The number of elements not holding generation `gen`'s values.
int64_t Mismatches(z::StateStore& s, int gen) {
  int64_t bad = 0;
  for (int i = 0; i < s.layout().num_sub_groups(); ++i) {
    z::SubGroupState st = s.Acquire(i, z::StateAccess::kRead);
    for (size_t k = 0; k < st.slots.size(); ++k) {
      for (int64_t j = 0; j < st.numel; ++j) bad += st.slots[k][j] != Value(i, static_cast<int>(k), j, gen);
    }
    s.Release(i);
  }
  return bad;
}

// p <- p - 0.1 * (m <- m / 2 + g * scale), fp32 parameters through a master copy.
class HalfRule final : public z::UpdateRule {
 public:
  std::vector<std::string> StateNames() const override { return {"m"}; }
  float InitialState(int, int) const override { return 0; }
  bool NeedsTensorNorms() const override { return false; }
  void Update(int, const zerorun::kernels::OptimSpan& s, float* const* state) override {
    const float* g = static_cast<const float*>(s.grads);
    for (int64_t i = 0; i < s.n; ++i) {
      state[0][i] = 0.5f * state[0][i] + g[i] * s.grad_scale;
      s.params[i] -= 0.1f * state[0][i];
    }
    if (s.param_copy) zerorun::Convert(s.params, DType::kF32, s.param_copy, s.copy_dtype, static_cast<size_t>(s.n));
  }
  zerorun::kernels::LambNorms Moments(int, const zerorun::kernels::OptimSpan&, float* const*) override { return {}; }
  float TrustRatio(int, const zerorun::kernels::LambNorms&) const override { return 1; }
  void Apply(int, const zerorun::kernels::OptimSpan&, float* const*, float) override {}
};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("nvme state store: round trips with fewer buffers than sub-groups, every pipeline setting") {
  TempDir dir;
  for (bool read : {false, true}) {
    for (bool write : {false, true}) {
      CAPTURE(read);
      CAPTURE(write);
      NvmeStateStoreOptions o = Opts(dir.path());
      o.pipeline_read = read;
      o.pipeline_write = write;
      MemoryAccount account("nvme");
      ScopedMemoryAccount scope(&account);
      auto s = MakeNvmeStateStore(Layout(), o);
      CHECK(s->offloaded());
      CHECK(s->layout().num_sub_groups() == 8);
      // A new store holds zeros.
      z::SubGroupState z0 = s->Acquire(3, z::StateAccess::kRead);
      for (int64_t j = 0; j < z0.numel; ++j) CHECK(z0.slots[2][j] == 0.0f);
      s->Release(3);
      for (int gen = 1; gen <= 3; ++gen) {
        WriteAll(*s, gen);
        CHECK(Mismatches(*s, gen) == 0);
      }
      const NvmeStateStoreStats st = s->stats();
      CHECK(st.buffers == 2);
      CHECK(st.buffer_bytes == 12288);  // 1000 elements x 3 slots x 4 bytes, in whole 4 KiB blocks
      CHECK(st.swap_outs == 3 * 8);
      CHECK(st.swap_ins >= 5 * 8 - 2);  // everything but what the two buffers still held came from the file
      CHECK((st.prefetches > 0) == read);
      // Host memory: the two buffers (plus the swap file's footer blocks), nothing per sub-group.
      CHECK(s->resident_bytes() == NvmeStateStoreHostBytes(s->layout(), 2));
      CHECK(account.Current(MemCategory::kPinned) <= s->resident_bytes() + 16 * 4096 + 4096);
      CHECK(account.Current(MemCategory::kMaster) == 0);
      CHECK(account.Current(MemCategory::kOptimizer) == 0);
      CHECK(Has(s->placement(), "nvme " + st.file));
      CHECK(Has(st.file, dir.path() + "/zerorun-nvme-test/rank0/"));
    }
  }
}

TEST_CASE("nvme state store: nvme_path missing, not a directory, not writable -> IoError naming the key at construction") {
  TempDir dir;
  std::string msg = Thrown([&] { MakeNvmeStateStore(Layout(), Opts(dir.File("nope"))); });
  CHECK(Has(msg, kKey));
  CHECK(Has(msg, "does not exist"));
  { std::ofstream(dir.File("file")) << "x"; }
  msg = Thrown([&] { MakeNvmeStateStore(Layout(), Opts(dir.File("file"))); });
  CHECK(Has(msg, kKey));
  CHECK(Has(msg, "not a directory"));
  FaultEnv env;
  env.access_error = EACCES;
  msg = Thrown([&] { MakeNvmeStateStore(Layout(), Opts(dir.path(), &env)); });
  CHECK(Has(msg, kKey));
  CHECK(Has(msg, "not writable"));
  // No O_DIRECT (old tmpfs): buffered I/O, named in the placement.
  FaultEnv nodirect;
  nodirect.direct_open_error = EINVAL;
  auto s = MakeNvmeStateStore(Layout(), Opts(dir.path(), &nodirect));
  CHECK_FALSE(s->stats().direct_io);
  CHECK(Has(s->placement(), "buffered I/O"));
  WriteAll(*s, 1);
  CHECK(Mismatches(*s, 1) == 0);
}

TEST_CASE("nvme state store: ENOSPC during a swap-out -> IoError naming file and rank; the previous state stays") {
  TempDir dir;
  for (bool pipelined : {false, true}) {
    CAPTURE(pipelined);
    FaultEnv env;
    NvmeStateStoreOptions o = Opts(dir.path(), &env, "enospc", 3);
    o.pipeline_read = o.pipeline_write = pipelined;
    auto s = MakeNvmeStateStore(Layout(), o);
    WriteAll(*s, 1);
    env.Add({.op = IoOp::kWrite, .path_contains = "optimizer.swp", .err = ENOSPC, .times = 1});
    const std::string msg = Thrown([&] { WriteAll(*s, 2); });
    CHECK(Has(msg, "rank 3: swap file " + s->stats().file));
    CHECK(Has(msg, "No space left on device"));
    CHECK(Has(msg, "the previous state is kept"));
    CHECK(env.hits() == 1);
    CHECK(Mismatches(*s, 1) == 0);  // generation 1 everywhere: not half of 2
    WriteAll(*s, 3);                // space is back
    CHECK(Mismatches(*s, 3) == 0);
  }
}

TEST_CASE("nvme state store: a swap file truncated or deleted under the job is an error naming it") {
  TempDir dir;
  {
    auto s = MakeNvmeStateStore(Layout(), Opts(dir.path(), nullptr, "trunc"));
    WriteAll(*s, 1);
    REQUIRE(::truncate(s->stats().file.c_str(), 8192) == 0);
    const std::string msg = Thrown([&] { (void)Mismatches(*s, 1); });
    CHECK(Has(msg, s->stats().file));
    CHECK(Has(msg, "truncated"));
  }
  {
    auto s = MakeNvmeStateStore(Layout(), Opts(dir.path(), nullptr, "deleted"));
    WriteAll(*s, 1);
    REQUIRE(::unlink(s->stats().file.c_str()) == 0);
    const std::string msg = Thrown([&] { WriteAll(*s, 2); });
    CHECK(Has(msg, s->stats().file));
    CHECK(Has(msg, "deleted"));
  }
}

TEST_CASE("nvme state store: io_uring unavailable -> the pread engine with a warning; jobs sharing nvme_path") {
  TempDir dir;
  FaultEnv env;
  env.uring_init_error = ENOSYS;
  auto a = MakeNvmeStateStore(Layout(), Opts(dir.path(), &env, "job-a"));
  auto b = MakeNvmeStateStore(Layout(), Opts(dir.path(), nullptr, "job-b"));
  CHECK(a->stats().file != b->stats().file);
  WriteAll(*a, 1);
  WriteAll(*b, 2);
  CHECK(Mismatches(*a, 1) == 0);
  CHECK(Mismatches(*b, 2) == 0);
  // The same job and rank twice is refused, not clobbered.
  const std::string msg = Thrown([&] { MakeNvmeStateStore(Layout(), Opts(dir.path(), nullptr, "job-a")); });
  CHECK(Has(msg, "in use by another process"));
}

TEST_CASE("nvme state store: a step whose swap-out fails is not half-applied (parameters and state)") {
  TempDir dir;
  constexpr int64_t n = 5000;
  std::vector<float> grads(n), params(n), expected(n);
  for (int64_t i = 0; i < n; ++i) {
    grads[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.1 * static_cast<double>(i)));
    params[static_cast<size_t>(i)] = static_cast<float>(std::cos(0.3 * static_cast<double>(i)));
  }
  auto spec = [&](std::vector<float>& p) {
    z::PartitionGroupSpec g;
    g.numel = n;
    g.segments = {{0, n, grads.data(), p.data()}};
    g.units = {1000, 1000, 1000, 1000, 1000};
    g.tensors = {{0, n, 0}};
    g.num_tensors = 1;
    return std::vector<z::PartitionGroupSpec>{g};
  };
  HalfRule rule;
  // The oracle: three steps resident.
  expected = params;
  {
    z::PartitionOptimizerOptions po;
    po.sub_group_size = 1000;
    z::PartitionOptimizer opt(spec(expected), rule, po);
    opt.Initialize();
    for (int k = 0; k < 3; ++k) opt.Step(1.0f, nullptr);
  }
  FaultEnv env;
  z::PartitionOptimizerOptions po;
  po.sub_group_size = 1000;
  po.grads_on_host = true;  // an offloaded store steps on the host
  NvmeStateStoreOptions o = Opts(dir.path(), &env, "half", 1);
  o.pipeline_read = o.pipeline_write = true;
  po.store_factory = [&](z::StateStoreLayout l) -> std::unique_ptr<z::StateStore> {
    return MakeNvmeStateStore(std::move(l), o);
  };
  z::PartitionOptimizer opt(spec(params), rule, po);
  opt.Initialize();
  opt.Step(1.0f, nullptr);
  const std::vector<float> after_one = params;
  // The 4th sub-group's swap-out fails: sub-groups 0-2 were updated in memory already.
  env.Add({.op = IoOp::kWrite, .path_contains = "optimizer.swp", .err = ENOSPC, .times = 1});
  const std::string msg = Thrown([&] { opt.Step(1.0f, nullptr); });
  CHECK(Has(msg, "rank 1: swap file"));
  CHECK(Has(msg, "No space left on device"));
  CHECK(params == after_one);  // the previous step's parameters, every one of them
  opt.Step(1.0f, nullptr);     // space is back: the failed step is redone
  opt.Step(1.0f, nullptr);
  CHECK(params == expected);
}

}  // TEST_SUITE
