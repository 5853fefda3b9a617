// kill -9 during saves, for real: a child process (this test binary re-executed) saves checkpoints
// back to back from 2 ranks, resuming after `latest`, and prunes old ones with RemoveCheckpoint; the
// parent SIGKILLs it at random moments, many times. After every kill, `latest` names a checkpoint that
// verifies and holds the values of its version, and so does every other tag present.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "ckpt_test_util.h"

using namespace ckpttest;

namespace {

constexpr const char* kChildEnv = "ZR_CKPT_KILL_DIR";
constexpr const char* kTestName = "kill -9 at random moments of back-to-back saves leaves latest loadable";

CheckpointManifest KillManifest() { return SyntheticManifest(DType::kBF16, 3000); }

int VersionOf(const std::string& tag) { return std::stoi(tag.substr(1)); }

// The child: save v<k>, v<k+1>, ... until killed (or 60 s pass), keeping the newest three.
[[noreturn]] void ChildLoop(const std::string& dir) {
  const CheckpointManifest m = KillManifest();
  std::optional<std::string> latest = ReadLatestCheckpointTag(dir);
  int k = latest ? VersionOf(*latest) + 1 : 1;
  const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < stop) {
    CheckpointWriteOptions o;
    o.save_dir = dir;
    o.tag = "v" + std::to_string(k);
    WriteSynthetic(m, k % 2 ? Layout::kFlat : Layout::kPerParam, 2, o, k);
    if (k > 3) RemoveCheckpoint(dir, "v" + std::to_string(k - 3));
    ++k;
  }
  std::_Exit(0);
}

}  // namespace

TEST_SUITE("multiproc") {

TEST_CASE(kTestName) {
  if (const char* dir = std::getenv(kChildEnv)) ChildLoop(dir);
  fs::path d = TempDir("kill");
  const CheckpointManifest m = KillManifest();
  std::mt19937 rng(20240520);
  int interrupted = 0, kills = 0;
  int last_version = 0;
  // 16 rounds at least, and more (up to 48) until a kill has landed mid-save: the moments are random.
  int rounds = 0;
  for (int round = 0; round < 48 && (round < 16 || interrupted == 0); ++round) {
    ++rounds;
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setenv(kChildEnv, d.c_str(), 1);
      const std::string filter = std::string("--test-case=") + kTestName;
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      ::execl("/proc/self/exe", "zr_test_checkpoint", filter.c_str(), "--test-suite=multiproc", nullptr);
      std::_Exit(127);
    }
    // Kill only after the child has completed a save of its own (so the test does not depend on how
    // fast a loaded machine starts a process), then at a random moment of the following saves.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      std::optional<std::string> now = ReadLatestCheckpointTag(d.string());
      if ((now && VersionOf(*now) > last_version) || std::chrono::steady_clock::now() > give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    kills += WIFSIGNALED(status);
    for (const auto& e : fs::directory_iterator(d)) {
      if (Contains(e.path().filename().string(), ".zerorun-tmp.")) {
        ++interrupted;
        break;
      }
    }
    CAPTURE(round);
    std::optional<std::string> latest = ReadLatestCheckpointTag(d.string());
    // Every tag present is complete and holds its version's values; latest is the newest or, killed
    // between publishing a tag and updating latest, the one before (or none yet, after the first).
    int newest = 0;
    for (const std::string& tag : ListCheckpointTags(d.string())) {
      CAPTURE(tag);
      CheckpointVerifyReport r = VerifyCheckpoint((d / tag).string());
      CHECK_MESSAGE(r.ok(), (r.problems.empty() ? "" : r.problems[0]));
      CheckpointReader reader((d / tag).string());
      const CheckpointTensor& t = *m.FindTensor("h.1.mlp.w");
      Tensor got = reader.ReadTensor(t.name, "exp_avg");
      Tensor want = SlotValues(t, *t.FindSlot("exp_avg"), 0, t.numel(), VersionOf(tag));
      CHECK(SameBytes(got, want));
      newest = std::max(newest, VersionOf(tag));
    }
    if (!latest) {
      CHECK(newest <= 1);  // killed before the first save wrote latest
      continue;
    }
    const int v = VersionOf(*latest);
    CHECK(fs::exists(d / *latest / "manifest.json"));
    CHECK((v == newest || v == newest - 1));
    CHECK(v >= last_version);  // progress is never lost
    last_version = v;
  }
  MESSAGE("kill -9 rounds: " << kills << ", saves interrupted mid-way: " << interrupted << ", last version "
                             << last_version);
  CHECK(kills == rounds);
  CHECK(interrupted >= 1);
  CHECK(last_version >= 16);  // every round waited for a save of its own
  fs::remove_all(d);
}

}  // TEST_SUITE
