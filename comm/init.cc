// InitFromEnv: environment → store server (rank 0) → store client → monitor → backend.
#include "zerorun/comm/init.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/comm/monitor.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/comm/ucx/ucx_comm.h"
#include "zerorun/core/error.h"
#include "zerorun/core/limits.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#ifdef ZERORUN_HAVE_CUDA
#include "zerorun/comm/nccl/nccl_comm.h"
#endif

namespace zerorun::comm {

namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int EnvInt(const char* name, int fallback, int lo, int hi) {
  const char* v = Env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi) {
    ZR_THROW(InvalidArgument, "environment variable {}='{}': expected an integer in [{}, {}]", name, v, lo, hi);
  }
  return static_cast<int>(x);
}

int RequireEnvInt(const char* name, int lo, int hi) {
  if (!Env(name)) ZR_THROW(InvalidArgument, "environment variable {} is not set (the launcher sets it)", name);
  return EnvInt(name, 0, lo, hi);
}

std::string HostName() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Everything a multi-process world needs besides the backend; released after it, in this order:
// monitor stopped (exiting is not a death), check-out, rank 0 waits for every check-out, server down.
// Any member may be null: the constructors that fill them can throw (port in use, store unreachable,
// wrong token), and this destructor then runs on a partial session.
struct Session {
  int rank = 0;
  int size = 1;
  std::string host;
  Millis timeout{0};
  std::unique_ptr<StoreServer> server;
  std::shared_ptr<Store> gen_store;
  std::shared_ptr<Monitor> monitor;

  ~Session() {
    bool aborted = !monitor;
    if (monitor) {
      aborted = !monitor->abort_reason().empty() || monitor->local_failure();
      if (aborted && monitor->abort_reason().empty() && !monitor->store_lost()) {
        // This rank failed on its own (a timeout, a transport error, ops still in flight at exit):
        // say so to every rank now, so they stop with this diagnosis instead of waiting for theirs.
        std::string why = monitor->local_failure_reason();
        if (why.empty()) {
          why = Format("it stopped with collectives in flight (after world op #{})", monitor->world_final_op());
        }
        monitor->AbortJob(Format("rank {} (host {}, pid {}) failed: {}", rank, host, ::getpid(), why));
      }
      monitor->Stop();
    }
    try {
      if (!gen_store) throw CommError("the rendezvous never started");
      if (aborted) throw CommError("job aborted; skipping the check-out");
      gen_store->Set(Format("left/{}", rank), monitor->world_final_op());
      gen_store->Add("checkout", 1);
      if (server) {
        double deadline = NowSeconds() + std::min(120.0, static_cast<double>(timeout.count()) / 1e3);
        while (NowSeconds() < deadline) {
          if (std::stoll(gen_store->Get("checkout", Millis(1000))) >= size) break;
          if (gen_store->Check({"abort"})) {
            // A peer failed (it will not check out): give the others a moment to read why.
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    } catch (const std::exception& e) {
      ZR_DEBUG("check-out from the rendezvous store: {}", e.what());
    }
    monitor.reset();
    gen_store.reset();
    server.reset();
  }
};

// Waits until every rank has set "<what>/<rank>"; on timeout names the ranks that did not.
void Barrier(Store& store, const char* what, int world, Millis timeout, const std::string& where) {
  const int chunk = static_cast<int>(kStoreMaxKeysPerWait);
  try {
    for (int first = 0; first < world; first += chunk) {
      std::vector<std::string> keys;
      for (int r = first; r < std::min(world, first + chunk); ++r) keys.push_back(Format("{}/{}", what, r));
      store.Wait(keys, timeout);
    }
  } catch (const StoreUnresponsiveError&) {
    throw;
  } catch (const TimeoutError&) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(Format("{}/{}", what, r));
    auto present = store.GetExisting(keys, Millis(5000));
    if (static_cast<int>(present.size()) == world) return;  // the last one arrived just after the timeout
    std::string missing;
    int n = 0;
    for (int r = 0; r < world; ++r) {
      if (present.count(Format("{}/{}", what, r))) continue;
      if (++n <= 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (n > 16) missing += Format(" and {} more", n - 16);
    std::vector<int> shown;
    for (int r = 0; r < world && shown.size() < 16; ++r) {
      if (!present.count(Format("{}/{}", what, r))) shown.push_back(r);
    }
    ZR_THROW(TimeoutError, "rendezvous at {}: rank(s) {} of {} did not {} within {} s (ZERORUN_STORE_CONNECT_TIMEOUT): {}",
             where, missing, world, std::string(what) == "joined" ? "join" : "finish connecting",
             timeout.count() / 1000, DescribeRankLiveness(store, shown));
  }
}

}  // namespace

int64_t RequiredOpenFiles(int world, bool hosts_store) {
  int64_t w = std::max(world, 1);
  return 24 + 4 * (w - 1) + (hosts_store ? 3 + 2 * w : 0);
}

void CheckOpenFileLimit(int world, bool hosts_store, const std::string& who) {
  const int64_t need = RequiredOpenFiles(world, hosts_store);
  if (RaiseOpenFileLimit(static_cast<uint64_t>(need))) return;
  ZR_THROW(CommError, "{} needs at least {} open files for a {}-rank job{}; {}: raise it (ulimit -n {}, or the "
           "nofile limit of your scheduler or container)",
           who, need, world, hosts_store ? " (it hosts the rendezvous store: two connections per rank)" : "",
           OpenFileLimitText(), std::max<int64_t>(need, 4096));
}

bool BackendAvailable(const std::string& name) {
#ifdef ZERORUN_HAVE_CUDA
  if (name == "nccl") return true;
#endif
  return name == "local" || name == "ucx";
}

std::unique_ptr<Communicator> InitFromEnv(const InitOptions& options) {
  std::string backend = options.backend;
  if (backend.empty()) backend = Env("ZERORUN_COMM_BACKEND") ? Env("ZERORUN_COMM_BACKEND") : "ucx";
  if (!BackendAvailable(backend)) {
    ZR_THROW(InvalidArgument, "communication backend '{}' is not available in this build (ucx, local{})", backend,
#ifdef ZERORUN_HAVE_CUDA
             ", nccl"
#else
             "; nccl needs a CUDA build"
#endif
    );
  }
  const int world = EnvInt("WORLD_SIZE", 1, 1, 1 << 20);
#ifdef ZERORUN_HAVE_CUDA
  if (backend == "nccl" && world == 1 && !Env("MASTER_PORT")) {
    // One process on one GPU without a launcher: a one-rank NCCL group over an in-process store.
    SetLogRank(0);
    const int device = options.device >= 0 ? options.device : EnvInt("LOCAL_RANK", 0, 0, 1 << 16);
    CommOptions co = options.comm;
    if (co.timeout.count() <= 0) co.timeout = DefaultCommTimeout();
    return CreateNcclCommunicator(std::make_shared<HashStore>(), 0, 1, device, co, nullptr);
  }
#endif
  if (!Env("WORLD_SIZE") || (world == 1 && !Env("MASTER_PORT") && backend != "nccl")) {
    SetLogRank(0);
    return std::move(CreateLocalCommunicators(1, options.comm)[0]);
  }
  if (backend == "local") {
    ZR_THROW(InvalidArgument, "ZERORUN_COMM_BACKEND=local runs ranks as threads of one process "
                              "(comm::CreateLocalCommunicators); WORLD_SIZE={} processes need ucx or nccl", world);
  }
  const int rank = RequireEnvInt("RANK", 0, world - 1);
  SetLogRank(rank);
  const std::string addr = Env("MASTER_ADDR") ? Env("MASTER_ADDR") : "127.0.0.1";
  const int port = RequireEnvInt("MASTER_PORT", 1, 65535);
  const std::string token = Env("ZERORUN_JOB_TOKEN") ? Env("ZERORUN_JOB_TOKEN") : "";
  if (token.empty()) ZR_WARN("ZERORUN_JOB_TOKEN is not set: the rendezvous store accepts any local client");
  if (token.size() > 4096) {  // it travels in the HELLO frame, which the server caps at 8 KiB
    ZR_THROW(InvalidArgument, "environment variable ZERORUN_JOB_TOKEN is {} bytes (at most 4096; the launcher's are 64)",
             token.size());
  }
  const int restart = EnvInt("ZERORUN_RESTART", 0, 0, 1 << 30);
  const Millis timeout = options.comm.timeout.count() > 0 ? options.comm.timeout : DefaultCommTimeout();
  const Millis connect_timeout(static_cast<int64_t>(EnvInt("ZERORUN_STORE_CONNECT_TIMEOUT", 300, 1, 1 << 20)) * 1000);

  const std::string host = HostName();
  const std::string where = Format("{}:{} (MASTER_ADDR:MASTER_PORT)", addr, port);
  CheckOpenFileLimit(world, rank == 0, Format("rank {}", rank));

  auto session = std::make_shared<Session>();
  session->rank = rank;
  session->size = world;
  session->host = host;
  session->timeout = timeout;
  if (rank == 0) {
    StoreServerOptions so;
    so.port = port;
    so.token = token;
    try {
      session->server = std::make_unique<StoreServer>(so);
    } catch (const CommError& e) {
      ZR_THROW(CommError, "rank 0 cannot host the rendezvous store on port {} (MASTER_PORT): {}. Another job or "
               "program is using that port: pick a free one with --master_port (on one node, leave it out and the "
               "launcher picks one)", port, e.what());
    }
  }
  TcpStoreOptions to;
  to.host = addr;
  to.port = port;
  to.token = token;
  to.connect_timeout = connect_timeout;
  to.timeout = timeout;
  std::shared_ptr<TcpStore> client;
  try {
    client = std::make_shared<TcpStore>(to);
  } catch (const CommError& e) {
    const bool refused = std::string(e.what()).find("refused by the server") != std::string::npos;
    ZR_THROW(CommError, "rank {} cannot join the rendezvous at {}{}: {}", rank, where,
             refused || rank == 0 ? ""
                                  : ", the store that rank 0 hosts (rank 0 not started, failed or stuck before "
                                    "comm::InitFromEnv, frozen, or MASTER_ADDR/MASTER_PORT point elsewhere)",
             e.what());
  }
  session->gen_store = std::make_shared<PrefixStore>(Format("gen{}", restart), client);
  session->monitor = std::make_shared<Monitor>(*session->gen_store, rank, host);
  // Every rank is here before the backend exchanges addresses, so a missing one is named now.
  session->gen_store->Set(Format("joined/{}", rank), "1");
  Barrier(*session->gen_store, "joined", world, connect_timeout, where);

  CommOptions co = options.comm;
  co.timeout = timeout;
  std::unique_ptr<Communicator> comm;
  try {
    if (backend == "ucx") {
      comm = CreateUcxCommunicator(session->gen_store, rank, world, co, session->monitor);
    } else {
#ifdef ZERORUN_HAVE_CUDA
      int device = options.device >= 0 ? options.device : EnvInt("LOCAL_RANK", 0, 0, 1 << 16);
      comm = CreateNcclCommunicator(session->gen_store, rank, world, device, co, session->monitor);
#endif
    }
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (dynamic_cast<const TimeoutError*>(&e) != nullptr) {  // waiting for a peer's address: which one, and why
      std::vector<int> others;
      for (int r = 0; r < world && others.size() < 64; ++r) {
        if (r != rank) others.push_back(r);
      }
      why += "; " + DescribeRankLiveness(*session->gen_store, others);
    }
    if (session->monitor->abort_reason().empty() && !session->monitor->store_lost()) {
      session->monitor->AbortJob(Format("rank {} (host {}, pid {}) failed to set up the {} backend: {}", rank, host,
                                        ::getpid(), backend, why));
    }
    if (why.size() != std::string(e.what()).size()) throw TimeoutError(why);
    throw;
  }
  comm->AttachResource(session);
  // Everyone is connected before the first collective's clock starts.
  session->gen_store->Set(Format("ready/{}", rank), "1");
  Barrier(*session->gen_store, "ready", world, connect_timeout, where);
  ZR_DEBUG("world communicator ready: backend {}, rank {}/{}, store {}:{}", backend, rank, world, addr, port);
  return comm;
}

}  // namespace zerorun::comm
