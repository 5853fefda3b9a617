// The parameter-offload shard stores (offload/shard_stores.h): shards round-trip through the NVMe swap
// file with fewer buffers than shards, with and without prefetch, never-written shards read as zeros;
// host memory is the declared buffers; a shard larger than buffer_size, a full disk at construction, a
// failed write, a truncated or deleted swap file are errors naming the key, file, shard or rank;
// io_uring unavailable falls back to pread; the host store holds every shard.
#include <doctest/doctest.h>
#include <unistd.h>

#include "offload_test_util.h"
#include "zerorun/offload/shard_stores.h"

using namespace zr_offload_test;
namespace z = zerorun::zero;

namespace {

constexpr const char* kKey = "zero_optimization.offload_param.nvme_path";

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Seven bf16 shards of different sizes (the largest 3000 elements).
z::ShardStoreLayout Layout() {
  z::ShardStoreLayout l;
  l.dtype = DType::kBF16;
  l.unit_numels = {1000, 3000, 17, 2048, 5, 2999, 1};
  for (size_t u = 0; u < l.unit_numels.size(); ++u) l.unit_names.push_back("p" + std::to_string(u));
  return l;
}

NvmeShardStoreOptions Opts(const std::string& path, FileEnv* env = nullptr, const std::string& job = "shard-test",
                           int rank = 0) {
  NvmeShardStoreOptions o;
  o.dir.nvme_path = path;
  o.dir.config_key = kKey;
  o.dir.job_id = job;
  o.dir.rank = rank;
  o.dir.env = env;
  o.io.block_size = 64 * 1024;
  o.buffer_count = 2;
  return o;
}

uint16_t Value(int u, int64_t i, int gen) { return static_cast<uint16_t>(u * 7919 + i * 31 + gen * 101); }

void WriteAll(z::ShardStore& s, int gen) {
  for (int u = 0; u < s.layout().num_units(); ++u) {
    auto* p = static_cast<uint16_t*>(s.Acquire(u, z::StateAccess::kOverwrite));
    for (int64_t i = 0; i < s.layout().unit_numels[static_cast<size_t>(u)]; ++i) p[i] = Value(u, i, gen);
    s.Release(u);
  }
  s.Flush();
}

// Elements not holding generation `gen`'s values, reading in `order` with a prefetch of the next one.
int64_t Mismatches(z::ShardStore& s, int gen, const std::vector<int>& order) {
  int64_t bad = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k + 1 < order.size()) s.Prefetch(order[k + 1]);
    const int u = order[k];
    const auto* p = static_cast<const uint16_t*>(s.Acquire(u, z::StateAccess::kRead));
    for (int64_t i = 0; i < s.layout().unit_numels[static_cast<size_t>(u)]; ++i) bad += p[i] != Value(u, i, gen);
    s.Release(u);
  }
  return bad;
}

const std::vector<int> kForward = {0, 1, 2, 3, 4, 5, 6};
const std::vector<int> kBackward = {6, 5, 4, 3, 2, 1, 0};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("nvme shard store: round trips with 2 buffers for 7 shards, prefetched, both orders; zeros before a write") {
  TempDir dir;
  auto s = MakeNvmeShardStore(Layout(), Opts(dir.path()));
  {
    const auto* p = static_cast<const uint16_t*>(s->Acquire(1, z::StateAccess::kRead));
    int64_t nonzero = 0;
    for (int64_t i = 0; i < 3000; ++i) nonzero += p[i] != 0;
    CHECK(nonzero == 0);
    s->Release(1);
  }
  for (int gen = 1; gen <= 3; ++gen) {
    WriteAll(*s, gen);
    CHECK(Mismatches(*s, gen, kForward) == 0);
    CHECK(Mismatches(*s, gen, kBackward) == 0);
  }
  // A read-modify-write of part of a shard keeps the rest.
  auto* p = static_cast<uint16_t*>(s->Acquire(3, z::StateAccess::kReadWrite));
  p[0] = Value(3, 0, 3);
  s->Release(3);
  s->Flush();
  CHECK(Mismatches(*s, 3, kForward) == 0);
  const NvmeShardStoreStats st = s->stats();
  CHECK(st.buffers == 2);
  CHECK(st.buffer_bytes == 8192);  // 3000 bf16 elements in whole 4 KiB blocks
  CHECK(s->resident_bytes() == NvmeShardStoreHostBytes(Layout(), 2));
  CHECK(s->resident_bytes() == 2 * 8192);
  CHECK(st.swap_outs == 3 * 7 + 1);
  CHECK(st.swap_ins >= 6 * 5);    // 2 buffers for 7 shards: most reads go to the file
  CHECK(st.prefetches > 0);
  CHECK(st.hits > 0);             // the last shard of one pass is the first of the next
  CHECK(Has(s->placement(), st.file));
  CHECK(Has(st.file, "/rank0/params.swp"));
}

TEST_CASE("nvme shard store: a shard over buffer_size, buffer_count 0, a full disk -> errors naming them") {
  TempDir dir;
  NvmeShardStoreOptions o = Opts(dir.path());
  o.buffer_size = 2999;
  std::string msg = Thrown([&] { MakeNvmeShardStore(Layout(), o); });
  CHECK(Has(msg, "zero_optimization.offload_param.buffer_size"));
  CHECK(Has(msg, "parameter 'p1'"));
  CHECK(Has(msg, "at least 3000"));
  o = Opts(dir.path());
  o.buffer_count = 0;
  CHECK(Has(Thrown([&] { MakeNvmeShardStore(Layout(), o); }), "zero_optimization.offload_param.buffer_count"));
  FaultEnv env;
  env.fallocate_error = ENOSPC;
  msg = Thrown([&] { MakeNvmeShardStore(Layout(), Opts(dir.path(), &env, "full")); });
  CHECK(Has(msg, "params.swp"));
  CHECK(Has(msg, "No space left on device"));
}

TEST_CASE("nvme shard store: a failed write is an IoError naming file and rank from Flush; a truncated or deleted file") {
  TempDir dir;
  {
    FaultEnv env;
    auto s = MakeNvmeShardStore(Layout(), Opts(dir.path(), &env, "eio", 2));
    WriteAll(*s, 1);
    env.Add({.op = IoOp::kWrite, .path_contains = "params.swp", .err = EIO, .times = 1});
    const std::string msg = Thrown([&] { WriteAll(*s, 2); });
    CHECK(Has(msg, s->stats().file));
    CHECK(Has(msg, "rank 2"));
    CHECK(Has(msg, "parameter shard"));
    CHECK(env.hits() == 1);
  }
  {
    auto s = MakeNvmeShardStore(Layout(), Opts(dir.path(), nullptr, "trunc"));
    WriteAll(*s, 1);
    REQUIRE(::truncate(s->stats().file.c_str(), 8192) == 0);
    const std::string msg = Thrown([&] { (void)Mismatches(*s, 1, kForward); });
    CHECK(Has(msg, s->stats().file));
    CHECK(Has(msg, "truncated"));
  }
  {
    auto s = MakeNvmeShardStore(Layout(), Opts(dir.path(), nullptr, "deleted"));
    WriteAll(*s, 1);
    REQUIRE(::unlink(s->stats().file.c_str()) == 0);
    const std::string msg = Thrown([&] { WriteAll(*s, 2); });
    CHECK(Has(msg, s->stats().file));
    CHECK(Has(msg, "deleted"));
  }
}

TEST_CASE("nvme shard store: io_uring unavailable -> pread; two jobs sharing nvme_path; the host store") {
  TempDir dir;
  FaultEnv env;
  env.uring_init_error = ENOSYS;
  auto a = MakeNvmeShardStore(Layout(), Opts(dir.path(), &env, "job-a"));
  auto b = MakeNvmeShardStore(Layout(), Opts(dir.path(), nullptr, "job-b"));
  CHECK(a->stats().file != b->stats().file);
  WriteAll(*a, 1);
  WriteAll(*b, 2);
  CHECK(Mismatches(*a, 1, kBackward) == 0);
  CHECK(Mismatches(*b, 2, kForward) == 0);
  CHECK(Has(Thrown([&] { MakeNvmeShardStore(Layout(), Opts(dir.path(), nullptr, "job-a")); }), "in use by another process"));
  for (bool pin : {true, false}) {
    CAPTURE(pin);
    auto h = MakeHostShardStore(Layout(), {.pin_memory = pin});
    CHECK(h->resident_bytes() >= 2 * Layout().TotalNumel());
    WriteAll(*h, 4);
    CHECK(Mismatches(*h, 4, kForward) == 0);
    CHECK(h->placement() == (pin ? "cpu (pinned host memory)" : "cpu (pageable host memory)"));
  }
}

}  // TEST_SUITE
