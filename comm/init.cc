// InitFromEnv: environment → store server (rank 0) → store client → monitor → backend.
#include "zerorun/comm/init.h"

#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/comm/monitor.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/comm/ucx/ucx_comm.h"
#include "zerorun/core/error.h"
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
struct Session {
  int rank = 0;
  int size = 1;
  Millis timeout{0};
  std::unique_ptr<StoreServer> server;
  std::shared_ptr<Store> gen_store;
  std::shared_ptr<Monitor> monitor;

  ~Session() {
    bool aborted = false;
    if (monitor) {
      aborted = !monitor->abort_reason().empty() || monitor->local_failure();
      monitor->Stop();
    }
    try {
      if (aborted) throw CommError("job aborted; skipping the check-out");
      gen_store->Add("checkout", 1);
      if (server && !aborted) {
        double deadline = NowSeconds() + std::min(120.0, static_cast<double>(timeout.count()) / 1e3);
        while (NowSeconds() < deadline) {
          if (std::stoll(gen_store->Get("checkout", Millis(1000))) >= size) break;
          if (gen_store->Check({"abort"})) break;
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

}  // namespace

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
  const int restart = EnvInt("ZERORUN_RESTART", 0, 0, 1 << 30);
  const Millis timeout = options.comm.timeout.count() > 0 ? options.comm.timeout : DefaultCommTimeout();
  const Millis connect_timeout(static_cast<int64_t>(EnvInt("ZERORUN_STORE_CONNECT_TIMEOUT", 300, 1, 1 << 20)) * 1000);

  auto session = std::make_shared<Session>();
  session->rank = rank;
  session->size = world;
  session->timeout = timeout;
  if (rank == 0) {
    StoreServerOptions so;
    so.port = port;
    so.token = token;
    session->server = std::make_unique<StoreServer>(so);
  }
  TcpStoreOptions to;
  to.host = addr;
  to.port = port;
  to.token = token;
  to.connect_timeout = connect_timeout;
  to.timeout = timeout;
  auto client = std::make_shared<TcpStore>(to);
  session->gen_store = std::make_shared<PrefixStore>(Format("gen{}", restart), client);
  const std::string host = HostName();
  session->monitor = std::make_shared<Monitor>(*session->gen_store, rank, host);

  CommOptions co = options.comm;
  co.timeout = timeout;
  std::unique_ptr<Communicator> comm;
  if (backend == "ucx") {
    comm = CreateUcxCommunicator(session->gen_store, rank, world, co, session->monitor);
  } else {
#ifdef ZERORUN_HAVE_CUDA
    int device = options.device >= 0 ? options.device : EnvInt("LOCAL_RANK", 0, 0, 1 << 16);
    comm = CreateNcclCommunicator(session->gen_store, rank, world, device, co, session->monitor);
#endif
  }
  comm->AttachResource(session);
  // Everyone is connected before the first collective's clock starts.
  session->gen_store->Set(Format("ready/{}", rank), "1");
  for (int first = 0; first < world; first += static_cast<int>(kStoreMaxKeysPerWait)) {
    std::vector<std::string> keys;
    for (int r = first; r < std::min(world, first + static_cast<int>(kStoreMaxKeysPerWait)); ++r) keys.push_back(Format("ready/{}", r));
    session->gen_store->Wait(keys, connect_timeout);
  }
  ZR_DEBUG("world communicator ready: backend {}, rank {}/{}, store {}:{}", backend, rank, world, addr, port);
  return comm;
}

}  // namespace zerorun::comm
