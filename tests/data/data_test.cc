// runtime/data: the Markov corpus and its entropy floor, byte text and llm.c shards (including every
// kind of bad file), and the distributed sampler (disjoint ranks, epochs, drop-last, cursor restore).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/common/nan_max.h"
#include "zerorun/core/error.h"
#include "zerorun/runtime/data/dataset.h"
#include "zerorun/runtime/data/markov.h"
#include "zerorun/runtime/data/sampler.h"

namespace zd = zerorun::data;
namespace fs = std::filesystem;

namespace {

// A fresh temporary directory, removed at scope end.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("zr_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string File(const std::string& name) const { return (path / name).string(); }
  static inline int counter = 0;
};

void WriteBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<int32_t> Iota(int32_t n, int32_t mod = 1 << 30) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i % mod;
  return v;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("markov corpus: the entropy floor is the true chain's cross-entropy on its samples") {
    zd::MarkovChain chain;  // V 256, K 4
    const double h = chain.EntropyRateNats();
    CHECK(h > 0.3);
    CHECK(h < std::log(4.0));
    // The stationary distribution is a fixed point: pi P = pi, sums to 1.
    const auto& pi = chain.Stationary();
    double total = 0.0, worst = 0.0;
    for (int t = 0; t < chain.vocab_size(); ++t) {
      double in = 0.0;
      for (int s = 0; s < chain.vocab_size(); ++s) in += pi[s] * chain.Prob(s, t);
      worst = zrtest::MaxKeepNan(worst, std::fabs(in - pi[t]));
      total += pi[t];
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(worst < 1e-12);
    // Rows are distributions with exactly K successors.
    for (int s = 0; s < chain.vocab_size(); s += 37) {
      double row = 0.0;
      int nz = 0;
      for (int t = 0; t < chain.vocab_size(); ++t) {
        row += chain.Prob(s, t);
        nz += chain.Prob(s, t) > 0.0;
      }
      CHECK(row == doctest::Approx(1.0).epsilon(1e-12));
      CHECK(nz == 4);
    }
    // Empirical cross-entropy of the true chain on 400k sampled tokens is the entropy rate.
    std::vector<int32_t> x = chain.Sample(400000, 7);
    CHECK(chain.CrossEntropyNats(x) == doctest::Approx(h).epsilon(0.01));
    // Deterministic in (chain seed, sample seed, stream); different otherwise.
    CHECK(chain.Sample(1000, 7) == std::vector<int32_t>(x.begin(), x.begin() + 1000));
    CHECK(chain.Sample(1000, 8) != std::vector<int32_t>(x.begin(), x.begin() + 1000));
    CHECK(chain.Sample(1000, 7, 1) != std::vector<int32_t>(x.begin(), x.begin() + 1000));
    zd::MarkovChain other({256, 4, 99});
    CHECK(other.EntropyRateNats() != h);
    // A 2-successor chain over 3 tokens: still a proper chain, floor below ln 2.
    zd::MarkovChain small({3, 2, 5});
    CHECK(small.EntropyRateNats() < std::log(2.0));
    std::vector<int32_t> y = small.Sample(200000, 1);
    CHECK(small.CrossEntropyNats(y) == doctest::Approx(small.EntropyRateNats()).epsilon(0.02));
    CHECK_THROWS_AS(zd::MarkovChain({2, 2, 1}), zerorun::InvalidArgument);
    CHECK_THROWS_AS(zd::MarkovChain({16, 1, 1}), zerorun::InvalidArgument);
  }

  TEST_CASE("token shards: round trip through the llm.c layout") {
    TempDir dir;
    const std::string path = dir.File("a.bin");
    std::vector<int32_t> tokens = Iota(5000, 50257);
    tokens[17] = 65535;
    zd::WriteTokenShard(path, tokens);
    std::vector<char> bytes = ReadBytes(path);
    REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
    int32_t header[3];
    std::memcpy(header, bytes.data(), sizeof(header));
    CHECK(header[0] == 20240520);
    CHECK(header[1] == 1);
    CHECK(header[2] == 5000);
    auto ds = zd::OpenTokenShards({path}, 65536);
    CHECK(ds->num_documents() == 1);
    CHECK(ds->document_size(0) == 5000);
    std::vector<int32_t> back(5000);
    ds->Read(0, 0, 5000, back.data());
    CHECK(back == tokens);
    // Empty shard is valid.
    zd::WriteTokenShard(dir.File("empty.bin"), {});
    CHECK(zd::OpenTokenShards({dir.File("empty.bin")}, 10)->total_tokens() == 0);
    CHECK_THROWS_AS(zd::WriteTokenShard(dir.File("x.bin"), {70000}), zerorun::DataError);
  }

  TEST_CASE("token shards: bad files give clear errors") {
    TempDir dir;
    const std::string good = dir.File("good.bin");
    zd::WriteTokenShard(good, Iota(100, 40));
    std::vector<char> bytes = ReadBytes(good);

    CHECK_THROWS_WITH_AS(zd::OpenTokenShards({dir.File("missing.bin")}, 50),
                         doctest::Contains("missing.bin: cannot open"), zerorun::DataError);
    std::vector<char> magic = bytes;
    magic[0] ^= 1;
    WriteBytes(dir.File("magic.bin"), magic);
    CHECK_THROWS_WITH_AS(zd::OpenTokenShards({dir.File("magic.bin")}, 50), doctest::Contains("bad magic"),
                         zerorun::DataError);
    std::vector<char> version = bytes;
    version[4] = 7;
    WriteBytes(dir.File("version.bin"), version);
    CHECK_THROWS_WITH_AS(zd::OpenTokenShards({dir.File("version.bin")}, 50), doctest::Contains("unsupported version 7"),
                         zerorun::DataError);
    std::vector<char> truncated(bytes.begin(), bytes.end() - 3);
    WriteBytes(dir.File("trunc.bin"), truncated);
    CHECK_THROWS_WITH_AS(zd::OpenTokenShards({dir.File("trunc.bin")}, 50), doctest::Contains("(truncated)"),
                         zerorun::DataError);
    std::vector<char> short_header(bytes.begin(), bytes.begin() + 100);
    WriteBytes(dir.File("short.bin"), short_header);
    CHECK_THROWS_WITH_AS(zd::OpenTokenShards({dir.File("short.bin")}, 50), doctest::Contains("truncated header"),
                         zerorun::DataError);
    // Token 39 at position 39 is >= vocab 39.
    CHECK_THROWS_WITH_AS(zd::OpenTokenShards({good}, 39), doctest::Contains("token id 39 at position 39 is >= the model's vocab size 39"),
                         zerorun::DataError);
    CHECK_NOTHROW(zd::OpenTokenShards({good}, 40));
    CHECK_THROWS_AS(zd::OpenTokenShards({}, 40), zerorun::DataError);
  }

  TEST_CASE("byte text: bytes are tokens") {
    TempDir dir;
    const std::string path = dir.File("t.txt");
    WriteBytes(path, {'h', 'i', '\n', static_cast<char>(0xC3), static_cast<char>(0xA9)});
    auto ds = zd::OpenByteTextFiles({path}, 256);
    std::vector<int32_t> t(5);
    ds->Read(0, 0, 5, t.data());
    CHECK(t == std::vector<int32_t>{104, 105, 10, 195, 169});
    CHECK_THROWS_WITH_AS(zd::OpenByteTextFiles({path}, 128), doctest::Contains("byte 195 at offset 3"),
                         zerorun::DataError);
    CHECK_THROWS_AS(zd::OpenByteTextFiles({dir.File("nope.txt")}, 256), zerorun::DataError);
    CHECK_THROWS_AS(zd::OpenByteTextFiles({dir.path.string()}, 256), zerorun::DataError);  // a directory
  }

  TEST_CASE("data paths: directories and globs expand sorted") {
    TempDir dir;
    zd::WriteTokenShard(dir.File("b.bin"), {1});
    zd::WriteTokenShard(dir.File("a.bin"), {2});
    WriteBytes(dir.File("notes.txt"), {'x'});
    CHECK(zd::ExpandDataPaths(dir.path.string()) == std::vector<std::string>{dir.File("a.bin"), dir.File("b.bin")});
    CHECK(zd::ExpandDataPaths(dir.File("*.bin")).size() == 2);
    CHECK(zd::ExpandDataPaths(dir.File("a.bin")) == std::vector<std::string>{dir.File("a.bin")});
    CHECK_THROWS_AS(zd::ExpandDataPaths(dir.File("*.zzz")), zerorun::DataError);
  }

  TEST_CASE("sampler: ranks are disjoint and windows are exact shifted slices") {
    // Token value = global position * 1 (documents of 1000 and 457 tokens), T = 10.
    std::vector<int32_t> d0 = Iota(1000), d1 = Iota(457);
    for (auto& t : d1) t += 100000;
    auto ds = zd::MakeInMemoryDataset({d0, d1});
    const int64_t T = 10, B = 4;
    const int world = 3;
    std::vector<std::unique_ptr<zd::DistributedSampler>> samplers;
    for (int r = 0; r < world; ++r) {
      samplers.push_back(std::make_unique<zd::DistributedSampler>(*ds, zd::SamplerOptions{B, T, r, world, 42}));
    }
    // Windows: 999/10 = 99 in doc 0, 456/10 = 45 in doc 1.
    CHECK(samplers[0]->num_windows() == 144);
    CHECK(samplers[0]->batches_per_epoch() == 144 / (B * world));
    std::set<int64_t> seen;
    for (int r = 0; r < world; ++r) {
      for (int64_t b = 0; b < samplers[r]->batches_per_epoch(); ++b) {
        for (int64_t w : samplers[r]->WindowsOfBatch(0, b)) CHECK(seen.insert(w).second);  // never twice
      }
    }
    CHECK(seen.size() == 144);  // 12 batches * 4 * 3 = all 144
    // Batch contents: consecutive tokens within one document, targets shifted by one.
    for (int r = 0; r < world; ++r) {
      zd::Batch batch = samplers[r]->Next();
      CHECK(batch.inputs.size() == static_cast<size_t>(B * T));
      for (int64_t b = 0; b < B; ++b) {
        const int32_t* in = batch.inputs.data() + b * T;
        const int32_t* tg = batch.targets.data() + b * T;
        CHECK(in[0] % 10 == 0);  // windows start at multiples of T
        for (int64_t t = 0; t < T; ++t) {
          CHECK(tg[t] == in[t] + 1);
          if (t) CHECK(in[t] == in[t - 1] + 1);
        }
      }
    }
    // The shuffle changes with the epoch and the seed, not with the rank.
    zd::DistributedSampler s(*ds, {B, T, 0, world, 42});
    CHECK(s.WindowsOfBatch(0, 0) != s.WindowsOfBatch(1, 0));
    zd::DistributedSampler s2(*ds, {B, T, 0, world, 43});
    CHECK(s.WindowsOfBatch(0, 0) != s2.WindowsOfBatch(0, 0));
    zd::DistributedSampler s3(*ds, {B, T, 0, world, 42});
    CHECK(s.WindowsOfBatch(5, 3) == s3.WindowsOfBatch(5, 3));
    // No shuffle: dataset order, dealt round-robin.
    zd::SamplerOptions plain{B, T, 1, world, 42};
    plain.shuffle = false;
    zd::DistributedSampler s4(*ds, plain);
    CHECK(s4.WindowsOfBatch(0, 0) == std::vector<int64_t>{1, 4, 7, 10});
  }

  TEST_CASE("sampler: dataloader_drop_last as DeepSpeed's data loader: the last batch is partial or dropped") {
    auto ds = zd::MakeInMemoryDataset({Iota(101)});  // 10 windows of T = 10
    zd::SamplerOptions drop_opts{3, 10, 0, 1, 1};
    drop_opts.drop_last = true;
    zd::DistributedSampler drop(*ds, drop_opts);
    CHECK(drop.batches_per_epoch() == 3);  // 9 windows used, 1 dropped
    zd::DistributedSampler keep(*ds, {3, 10, 0, 1, 1});  // drop_last false: DeepSpeed's default
    CHECK(keep.batches_per_epoch() == 4);
    CHECK(keep.BatchRows(3) == 1);
    std::set<int64_t> all;
    for (int64_t b = 0; b < 4; ++b) {
      for (int64_t w : keep.WindowsOfBatch(0, b)) CHECK(all.insert(w).second);
    }
    CHECK(all.size() == 10);  // every window once; the last batch holds the one left
    for (int i = 0; i < 3; ++i) CHECK(keep.Next().B == 3);
    const zd::Batch last = keep.Next();
    CHECK(last.B == 1);
    CHECK(last.inputs.size() == 10);
    CHECK(keep.cursor().epoch == 1);  // then the next epoch starts
    // Several ranks (torch's DistributedSampler): the order is padded from its start to ceil(10/3) = 4
    // per rank; rank r takes positions r, r+3, r+6, r+9, two per batch.
    std::vector<int64_t> dealt;
    for (int r = 0; r < 3; ++r) {
      zd::SamplerOptions o{2, 10, r, 3, 1};
      o.shuffle = false;
      zd::DistributedSampler s(*ds, o);
      CHECK(s.windows_per_rank() == 4);
      CHECK(s.batches_per_epoch() == 2);
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t w : s.WindowsOfBatch(0, b)) dealt.push_back(w);
      }
    }
    CHECK(dealt == std::vector<int64_t>{0, 3, 6, 9, 1, 4, 7, 0, 2, 5, 8, 1});  // 0 and 1 repeat as padding
    // Uneven per-rank counts with a partial batch: 4 per rank in batches of 3 -> 3 + 1 rows.
    zd::DistributedSampler odd(*ds, {3, 10, 2, 3, 1});
    CHECK(odd.batches_per_epoch() == 2);
    CHECK(odd.BatchRows(0) == 3);
    CHECK(odd.BatchRows(1) == 1);
    // Too little data for one full batch per rank is an error only with drop_last.
    zd::SamplerOptions too_big{5, 10, 0, 3, 1};
    CHECK(zd::DistributedSampler(*ds, too_big).batches_per_epoch() == 1);  // 4 rows
    too_big.drop_last = true;
    CHECK_THROWS_WITH_AS(zd::DistributedSampler(*ds, too_big), doctest::Contains("fewer than one batch"),
                         zerorun::DataError);
    auto tiny = zd::MakeInMemoryDataset({Iota(10)});  // no window of 11 tokens
    CHECK_THROWS_WITH_AS(zd::DistributedSampler(*tiny, {1, 10, 0, 1, 1}), doctest::Contains("0 windows"),
                         zerorun::DataError);
    CHECK_THROWS_AS(zd::DistributedSampler(*ds, {1, 10, 3, 3, 1}), zerorun::InvalidArgument);
  }

  TEST_CASE("sampler: a restored cursor gives the identical next batches") {
    zd::MarkovChain chain;
    auto ds = zd::MakeInMemoryDataset({chain.Sample(20000, 1), chain.Sample(7000, 2)}, "synthetic markov corpus");
    zd::SamplerOptions o{4, 32, 1, 2, 9};
    zd::DistributedSampler a(*ds, o);
    const int64_t per_epoch = a.batches_per_epoch();
    for (int64_t i = 0; i < per_epoch - 2; ++i) a.Next();  // stop just before an epoch boundary
    zd::SamplerCursor saved = a.cursor();
    std::vector<zd::Batch> expect;
    for (int i = 0; i < 5; ++i) expect.push_back(a.Next());  // crosses into epoch 1
    CHECK(a.cursor().epoch == 1);
    zd::DistributedSampler b(*ds, o);
    b.set_cursor(saved);
    for (int i = 0; i < 5; ++i) {
      zd::Batch got = b.Next();
      CHECK(got.inputs == expect[static_cast<size_t>(i)].inputs);
      CHECK(got.targets == expect[static_cast<size_t>(i)].targets);
      CHECK(got.epoch == expect[static_cast<size_t>(i)].epoch);
    }
    CHECK_THROWS_AS(b.set_cursor({0, per_epoch}), zerorun::InvalidArgument);
  }
}
