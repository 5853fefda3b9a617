// zr_fault_rank: the rank program of the fault suite (tests/fault/fault_test.cc). A real job through
// every phase a training run has: the rendezvous (comm::InitFromEnv), each collective kind, point to
// point, the engine's optimizer step and a model save; every result is checked against closed-form
// values or written as a hash the suite compares with a fault-free run. One rank may injure itself
// at a chosen moment:
//
//   zr_fault_rank [--local_rank=N] --out DIR [--fault PHASE:RANK:ACTION:DELAY_US:RESUME_MS]
//
// At the start of PHASE, RANK arms a timer; DELAY_US later it writes DIR/fault.txt ("<phase> <rank>
// <action> <unix_ms> <helper pid> <phase it landed in>") and then ACTION: `kill` (SIGKILL itself) or `stop` (SIGSTOP itself,
// with a forked helper that sends SIGCONT RESUME_MS later, unless the rank is gone by then), or `leave`
// (at the phase start, return from main cleanly, as rank-conditional code does). A delay
// longer than the phase lands in a later one. Phases: rendezvous all_reduce reduce_scatter all_gather
// broadcast reduce barrier send_recv step save.
//
// Writes DIR/pid.<rank> at start and DIR/result.<rank> = "ok params=<hash> model=<hash>" at the end
// (model: the saved file's hash on rank 0, "-" elsewhere); exits 0, or prints the error and exits 1.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/engine_test_util.h"
#include "zerorun/comm/init.h"
#include "zerorun/core/error.h"

namespace {

using namespace zerorun;

struct Fault {
  std::string phase;
  int rank = -1;
  std::string action;
  int64_t delay_us = 0;
  int64_t resume_ms = 0;
};

std::string g_out = ".";
Fault g_fault;
std::atomic<int> g_current{-1};  // index into kPhaseNames of the phase running now
const char* kPhaseNames[] = {"rendezvous", "all_reduce", "reduce_scatter", "all_gather", "broadcast",
                             "reduce",     "barrier",    "send_recv",      "step",       "save"};
int g_rank = -1;  // from RANK, so the rendezvous phase knows it before InitFromEnv

uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string Hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".part";
  {
    std::ofstream out(tmp);
    out << text;
  }
  std::filesystem::rename(tmp, path);
}

void Injure() {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  pid_t helper = -1;
  if (g_fault.action == "stop") {
    const pid_t me = getpid();
    helper = fork();
    if (helper == 0) {  // async-signal-safe only: the parent has threads
      timespec ts{static_cast<time_t>(g_fault.resume_ms / 1000), static_cast<long>(g_fault.resume_ms % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0) {
      }
      if (getppid() == me) kill(me, SIGCONT);  // the rank may have been torn down meanwhile
      _exit(0);
    }
  }
  const int at = g_current.load();
  WriteFile(g_out + "/fault.txt", Format("{} {} {} {} {} {}\n", g_fault.phase, g_fault.rank, g_fault.action, now_ms,
                                         helper, at >= 0 ? kPhaseNames[at] : "?"));
  std::fprintf(stderr, "zr_fault_rank: rank %d: %s in phase %s\n", g_rank, g_fault.action.c_str(), g_fault.phase.c_str());
  std::fflush(stderr);
  kill(getpid(), g_fault.action == "kill" ? SIGKILL : SIGSTOP);
}

// `leave`: the rank returns from main at the start of the phase, cleanly (rank-conditional code).
struct LeaveEarly {};

// Called at the start of each phase: arms the fault timer when it is this rank's.
void Phase(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kPhaseNames)); ++i) {
    if (name == kPhaseNames[i]) g_current = i;
  }
  if (std::getenv("ZR_FAULT_TRACE")) {
    std::fprintf(stderr, "zr_fault_rank: rank %d: phase %s at %.3f ms\n", g_rank, name.c_str(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  if (g_fault.phase != name || g_fault.rank != g_rank) return;
  if (g_fault.action == "leave") {
    WriteFile(g_out + "/fault.txt", Format("{} {} leave {} -1 {}\n", name, g_rank,
                                           std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch()).count(), name));
    throw LeaveEarly{};
  }
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::microseconds(g_fault.delay_us));
    Injure();
  }).detach();
}

Fault ParseFault(const std::string& text) {
  Fault f;
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() != 5 || (parts[2] != "kill" && parts[2] != "stop" && parts[2] != "leave")) {
    ZR_THROW(InvalidArgument, "--fault '{}': expected PHASE:RANK:kill|stop|leave:DELAY_US:RESUME_MS", text);
  }
  f.phase = parts[0];
  f.rank = std::atoi(parts[1].c_str());
  f.action = parts[2];
  f.delay_us = std::atoll(parts[3].c_str());
  f.resume_ms = std::atoll(parts[4].c_str());
  return f;
}

void Expect(bool ok, const std::string& what) {
  if (!ok) ZR_THROW(Error, "wrong result: {}", what);
}

// Every collective kind, `rounds` times each, on closed-form data (rank r contributes r + i % 7).
void Collectives(comm::Communicator& c, int rounds) {
  const int n = c.size(), r = c.rank();
  const size_t count = 16384;
  auto val = [](int rank, size_t i) { return static_cast<float>(rank) + static_cast<float>(i % 7); };
  const float rank_sum = static_cast<float>(n * (n - 1) / 2);
  std::vector<float> buf(count * static_cast<size_t>(n)), out(count * static_cast<size_t>(n));

  Phase("all_reduce");
  for (int k = 0; k < rounds; ++k) {
    for (size_t i = 0; i < count; ++i) buf[i] = val(r, i);
    c.AllReduce(buf.data(), count, DType::kF32, comm::ReduceOp::kSum).Wait();
    for (size_t i = 0; i < count; i += 97) Expect(buf[i] == rank_sum + n * static_cast<float>(i % 7), "all_reduce");
  }
  Phase("reduce_scatter");
  for (int k = 0; k < rounds; ++k) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = val(r, i);
    c.ReduceScatter(buf.data(), out.data(), count, DType::kF32, comm::ReduceOp::kSum).Wait();
    for (size_t i = 0; i < count; i += 97) {
      Expect(out[i] == rank_sum + n * static_cast<float>((static_cast<size_t>(r) * count + i) % 7), "reduce_scatter");
    }
  }
  Phase("all_gather");
  for (int k = 0; k < rounds; ++k) {
    for (size_t i = 0; i < count; ++i) buf[i] = val(r, i);
    c.AllGather(buf.data(), out.data(), count, DType::kF32).Wait();
    for (int p = 0; p < n; ++p) Expect(out[static_cast<size_t>(p) * count + 5] == val(p, 5), "all_gather");
  }
  Phase("broadcast");
  for (int k = 0; k < rounds; ++k) {
    const int root = k % n;
    for (size_t i = 0; i < count; ++i) buf[i] = val(r, i);
    c.Broadcast(buf.data(), count, DType::kF32, root).Wait();
    Expect(buf[count - 1] == val(root, count - 1), "broadcast");
  }
  Phase("reduce");
  for (int k = 0; k < rounds; ++k) {
    const int root = k % n;
    for (size_t i = 0; i < count; ++i) buf[i] = val(r, i);
    c.Reduce(buf.data(), out.data(), count, DType::kF32, comm::ReduceOp::kSum, root).Wait();
    if (r == root) Expect(out[3] == rank_sum + n * 3.0f, "reduce");
  }
  Phase("barrier");
  for (int k = 0; k < rounds; ++k) c.Barrier().Wait();
  Phase("send_recv");
  for (int k = 0; k < rounds; ++k) {  // a ring: send to the right, receive from the left
    for (size_t i = 0; i < count; ++i) buf[i] = val(r, i);
    comm::Work s = c.Send(buf.data(), count, DType::kF32, (r + 1) % n, k);
    c.Recv(out.data(), count, DType::kF32, (r + n - 1) % n, k).Wait();
    s.Wait();
    Expect(out[11] == val((r + n - 1) % n, 11), "send_recv");
  }
}

std::string Train(comm::Communicator& c, uint64_t* model_hash) {
  zrtest::RunSpec spec;
  spec.world = c.size();
  spec.stage = 2;
  spec.micro = 2;
  const runtime::Config cfg = zrtest::LoadSpecConfig(spec);
  gpt::GptConfig gc = zrtest::TinyGpt(DType::kF32);
  gpt::Gpt model(gc);
  model.Initialize(spec.seed);
  runtime::Engine engine(model, cfg, c);
  for (int step = 0; step < 6; ++step) {
    auto [x, y] = zrtest::MicroBatch(step, 0, c.rank(), c.size(), spec.micro, 1, gc.seq_len, gc.vocab_size);
    engine.Forward(x, y);
    engine.Backward();
    if (step == 1) Phase("step");
    engine.Step();
  }
  std::vector<float> flat = zrtest::FlatParameters(engine);
  const uint64_t params = Fnv(flat.data(), flat.size() * sizeof(float));
  Phase("save");
  const std::string dir = g_out + "/save";
  engine.Save16BitModel(dir);
  if (c.rank() == 0) {
    std::ifstream in(dir + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Expect(!bytes.empty(), "saved model is empty");
    *model_hash = Fnv(bytes.data(), bytes.size());
  }
  return Hex(params);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) g_out = argv[++i];
    else if (a == "--fault" && i + 1 < argc) g_fault = ParseFault(argv[++i]);
  }
  const char* rank_env = std::getenv("RANK");
  g_rank = rank_env ? std::atoi(rank_env) : 0;
  WriteFile(Format("{}/pid.{}", g_out, g_rank), Format("{}\n", getpid()));
  try {
    Phase("rendezvous");
    std::unique_ptr<comm::Communicator> c = comm::InitFromEnv();
    Collectives(*c, 100);
    uint64_t model_hash = 0;
    const std::string params = Train(*c, &model_hash);
    c->Barrier().Wait();  // every rank's result is in before anyone checks out
    const int rank = c->rank();
    c.reset();            // clean check-out through the store
    WriteFile(Format("{}/result.{}", g_out, rank),
              Format("ok params={} model={}\n", params, rank == 0 ? Hex(model_hash) : std::string("-")));
    return 0;
  } catch (const LeaveEarly&) {  // the communicator was destroyed on the way here: a clean check-out
    std::fprintf(stderr, "zr_fault_rank: rank %d: leaving early on purpose\n", g_rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zr_fault_rank: error: %s\n", e.what());
    return 1;
  }
}
