// zerorun-bench: collective bandwidth in the style of nccl-tests, and offload I/O bandwidth in the
// style of DeepSpeed's ds_io / ds_nvme_tune (`zerorun-bench io`, below: IoMain).
//
//   zerorun-bench allreduce|reduce_scatter|all_gather [--backend ucx|local|nccl] [--nprocs N]
//                 [--min-bytes 4K] [--max-bytes 64M] [--factor 2] [--iters N] [--warmup N]
//                 [--dtype fp32] [--op sum] [--json] [--check]
//
// Runs as one rank of a job started by the launcher (RANK, WORLD_SIZE, MASTER_* in the environment),
// or, with --nprocs N, starts N ranks itself: N processes on this machine for ucx and nccl (with
// ZERORUN_BENCH_RANKS_PER_NODE=K, ranks r/K get the same ZERORUN_NODE_ID: simulated nodes) (rendezvous on
// a free loopback port; nccl rank r uses GPU LOCAL_RANK = r), N threads for local. Spawned ranks get
// OPENBLAS_NUM_THREADS=1 unless it is set, and one CPU each (rank r the r-th CPU this process may use)
// when N fits the CPUs, as mpirun binds 2 ranks by default; ZERORUN_BENCH_BIND=0 leaves them unbound. With nccl the
// buffers are device memory of the communicator's GPU (core's allocator; --check data is copied in and
// out), and a collective's time runs from its enqueue to its completion event. Per message size it prints time (µs, the slowest rank's mean
// over --iters), algbw = size / time and busbw = algbw · factor (all-reduce 2(n-1)/n, reduce-scatter and
// all-gather (n-1)/n), in GB/s. Size is the full buffer as nccl-tests counts it: the all-reduce buffer,
// the all-gather output, the reduce-scatter input. --json prints one object per line instead.
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/comm/init.h"
#include "zerorun/comm/local/local_comm.h"
#include "zerorun/comm/ucx/ucx_comm.h"
#include "zerorun/core/device.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/cpu_features.h"
#include "zerorun/core/timer.h"
#include "zerorun/offload/io_bench.h"
#include "zerorun/runtime/aio_options.h"
#include "zerorun/runtime/config/config.h"

using namespace zerorun;
using namespace zerorun::comm;

namespace {

struct Args {
  OpType op = OpType::kAllReduce;
  std::string op_name;
  std::string backend = "ucx";
  int nprocs = 0;
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  double factor = 2;
  int iters = 0;  // 0: by size
  int warmup = 0;
  DType dtype = DType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  bool json = false;
  bool check = false;
  bool in_place = false;  // all_gather: each rank's input is its block of the output (as ZeRO gathers)
};

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr,
               "zerorun-bench: %s\n"
               "usage: zerorun-bench allreduce|reduce_scatter|all_gather [--backend ucx|local|nccl] [--nprocs N]\n"
               "       [--min-bytes 4K] [--max-bytes 64M] [--factor 2] [--iters N] [--warmup N] [--dtype fp32]\n"
               "       [--op sum|avg|max|min] [--json] [--check] [--in-place (all_gather)]\n"
               "       zerorun-bench io --path DIR|FILE ... (zerorun-bench io --help)\n",
               msg.c_str());
  std::exit(2);
}

size_t ParseBytes(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix = end ? end : "";
  double mult = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = 1024;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") Usage(flag + ": cannot parse '" + s + "'");
  if (end == s.c_str() || v < 0) Usage(flag + ": cannot parse '" + s + "'");
  return static_cast<size_t>(v * mult);
}

// The launcher passes --local_rank=N (DeepSpeed's convention) before the program's own arguments; the
// rank reads LOCAL_RANK from its environment, so the flag is dropped wherever it appears.
std::vector<char*> WithoutLocalRank(int argc, char** argv) {
  std::vector<char*> out;
  for (int i = 0; i < argc; ++i) {
    const std::string f = argv[i];
    if (f.rfind("--local_rank=", 0) == 0) continue;
    if (f == "--local_rank") {
      ++i;
      continue;
    }
    out.push_back(argv[i]);
  }
  return out;
}

Args Parse(int argc, char** argv) {
  if (argc < 2) Usage("missing the collective");
  Args a;
  a.op_name = argv[1];
  if (a.op_name == "allreduce" || a.op_name == "all_reduce") a.op = OpType::kAllReduce;
  else if (a.op_name == "reduce_scatter" || a.op_name == "reducescatter") a.op = OpType::kReduceScatter;
  else if (a.op_name == "all_gather" || a.op_name == "allgather") a.op = OpType::kAllGather;
  else Usage("unknown collective '" + a.op_name + "'");
  for (int i = 2; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(f + " needs a value");
      return argv[++i];
    };
    if (f == "--backend") a.backend = value();
    else if (f == "--nprocs") a.nprocs = std::atoi(value().c_str());
    else if (f == "--min-bytes") a.min_bytes = ParseBytes(f, value());
    else if (f == "--max-bytes") a.max_bytes = ParseBytes(f, value());
    else if (f == "--factor") a.factor = std::atof(value().c_str());
    else if (f == "--iters") a.iters = std::atoi(value().c_str());
    else if (f == "--warmup") a.warmup = std::atoi(value().c_str());
    else if (f == "--dtype") {
      try {
        a.dtype = ParseDType(value());
      } catch (const Error& e) {
        Usage(e.what());
      }
    } else if (f == "--op") {
      std::string o = value();
      if (o == "sum") a.reduce = ReduceOp::kSum;
      else if (o == "avg") a.reduce = ReduceOp::kAvg;
      else if (o == "max") a.reduce = ReduceOp::kMax;
      else if (o == "min") a.reduce = ReduceOp::kMin;
      else Usage("--op: unknown reduction '" + o + "'");
    } else if (f == "--json") a.json = true;
    else if (f == "--check") a.check = true;
    else if (f == "--in-place") a.in_place = true;
    else Usage("unknown flag '" + f + "'");
  }
  if (a.in_place && a.op != OpType::kAllGather) Usage("--in-place is for all_gather only");
  if (a.factor <= 1) Usage("--factor must be > 1");
  if (a.min_bytes > a.max_bytes) Usage("--min-bytes is larger than --max-bytes");
  if (a.backend != "ucx" && a.backend != "local" && a.backend != "nccl") Usage("--backend must be ucx, local or nccl");
  if (!BackendAvailable(a.backend)) Usage("--backend " + a.backend + " is not in this build (nccl needs a CUDA build)");
  return a;
}

// Memory of one device, grown as the sweep's sizes grow (device backends only).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(Device device) : device_(device) {}
  ~DeviceBuffer() { Release(); }
  void* Resize(size_t bytes) {
    if (bytes > bytes_) {
      Release();
      ptr_ = GetAllocator(device_).Allocate(bytes);
      bytes_ = bytes;
    }
    return ptr_;
  }

 private:
  void Release() {
    if (ptr_ != nullptr) GetAllocator(device_).Deallocate(ptr_, bytes_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  Device device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Runs the sweep on one rank; rank 0 prints.
void Sweep(Communicator& comm, const Args& a) {
  const int n = comm.size();
  const size_t es = DTypeSize(a.dtype);
  const double bus = BusBandwidthFactor(a.op, n);
  if (comm.rank() == 0 && !a.json) {
    std::printf("# zerorun-bench %s: backend %s, %d ranks, %s, %s, buffers on %s, fp32 reductions on %s\n",
                OpTypeName(a.op), comm.backend_name().c_str(), n, DTypeName(a.dtype), ReduceOpName(a.reduce),
                comm.device().ToString().c_str(), IsaName(ActiveIsa()).c_str());
    std::printf("# %12s %12s %10s %12s %12s %12s\n", "size(B)", "count", "iters", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)");
  }
  // Host buffers for host-memory backends; device buffers (plus host staging for --check) for nccl.
  const Device dev = comm.device();
  DeviceBuffer dsend(dev), drecv(dev);
  std::vector<char> send, recv;
  for (double sz = static_cast<double>(a.min_bytes); sz <= static_cast<double>(a.max_bytes) * 1.0000001; sz *= a.factor) {
    // Elements per rank-buffer, rounded so the full size splits evenly over ranks.
    size_t total = static_cast<size_t>(sz) / es;
    if (a.op != OpType::kAllReduce) total = std::max<size_t>(total / static_cast<size_t>(n), 1) * static_cast<size_t>(n);
    if (total == 0) total = 1;
    const size_t bytes = total * es;
    const size_t per_rank = a.op == OpType::kAllReduce ? total : total / static_cast<size_t>(n);
    send.assign(a.op == OpType::kAllGather ? per_rank * es : bytes, 0);
    recv.assign(a.op == OpType::kReduceScatter ? per_rank * es : bytes, 0);
    if (a.check && a.dtype == DType::kF32) {
      auto* f = reinterpret_cast<float*>(send.data());
      for (size_t i = 0; i < send.size() / 4; ++i) f[i] = static_cast<float>(comm.rank() + 1);
    }
    void* send_ptr = send.data();
    void* recv_ptr = recv.data();
    if (!dev.is_cpu()) {
      send_ptr = dsend.Resize(send.size());
      recv_ptr = drecv.Resize(recv.size());
      CopyBytes(send_ptr, dev, send.data(), Device::CPU(), send.size());
    }
    if (a.in_place) {  // the input is this rank's block of the output: no copy of its own block
      send_ptr = static_cast<char*>(recv_ptr) + static_cast<size_t>(comm.rank()) * per_rank * es;
      CopyBytes(send_ptr, dev, send.data(), Device::CPU(), send.size());
    }
    int iters = a.iters > 0 ? a.iters : static_cast<int>(std::clamp<double>(2e9 / (static_cast<double>(bytes) * 20 + 2e6), 5, 1000));
    int warmup = a.warmup > 0 ? a.warmup : std::max(2, iters / 10);
    auto run = [&] {
      switch (a.op) {
        case OpType::kAllReduce: return comm.AllReduce(send_ptr, recv_ptr, per_rank, a.dtype, a.reduce);
        case OpType::kReduceScatter: return comm.ReduceScatter(send_ptr, recv_ptr, per_rank, a.dtype, a.reduce);
        default: return comm.AllGather(send_ptr, recv_ptr, per_rank, a.dtype);
      }
    };
    for (int i = 0; i < warmup; ++i) run().Wait();
    comm.Barrier().Wait();
    Stopwatch sw;
    for (int i = 0; i < iters; ++i) run().Wait();
    double t = sw.ElapsedSeconds() / iters;
    const std::string algorithm = LastAlgorithm(comm);  // what the timed op ran (comm/select.h)
    comm.AllReduce(&t, 1, DType::kF64, ReduceOp::kMax).Wait();  // the slowest rank's time
    bool ok = true;
    if (a.check && !dev.is_cpu()) CopyBytes(recv.data(), Device::CPU(), recv_ptr, dev, recv.size());
    if (a.check && a.dtype == DType::kF32 && a.reduce == ReduceOp::kSum) {
      const float want = static_cast<float>(n * (n + 1) / 2);
      const auto* f = reinterpret_cast<const float*>(recv.data());
      if (a.op != OpType::kAllGather) {
        for (size_t i = 0; i < recv.size() / 4; ++i) ok &= f[i] == want;
      } else {
        for (size_t i = 0; i < recv.size() / 4; ++i) ok &= f[i] == static_cast<float>(i / per_rank + 1);
      }
    }
    double algbw = static_cast<double>(bytes) / t / 1e9;
    if (comm.rank() == 0) {
      if (a.json) {
        std::printf("{\"op\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"dtype\": \"%s\", \"size_bytes\": %zu, "
                    "\"count\": %zu, \"iters\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, "
                    "\"algorithm\": \"%s\"%s%s}\n",
                    OpTypeName(a.op), comm.backend_name().c_str(), n, DTypeName(a.dtype), bytes, per_rank, iters, t * 1e6,
                    algbw, algbw * bus, algorithm.c_str(), a.check ? (ok ? ", \"check\": true" : ", \"check\": false") : "",
                    a.in_place ? ", \"in_place\": true" : "");
      } else {
        std::printf("  %12zu %12zu %10d %12.2f %12.3f %12.3f%s  %s\n", bytes, per_rank, iters, t * 1e6, algbw, algbw * bus,
                    a.check ? (ok ? "  ok" : "  WRONG") : "", algorithm.c_str());
      }
      std::fflush(stdout);
    }
    if (!ok) ZR_THROW(CommError, "zerorun-bench: wrong result for {} bytes on rank {}", bytes, comm.rank());
  }
}

int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

bool BindRanks(int n) {
  const char* e = std::getenv("ZERORUN_BENCH_BIND");
  if (e != nullptr && std::string(e) == "0") return false;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  return ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 && n <= CPU_COUNT(&allowed);
}

// Pins the calling process to the r-th CPU it may run on.
void BindToCpu(int r) {
  cpu_set_t allowed, one;
  CPU_ZERO(&allowed);
  CPU_ZERO(&one);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  for (int c = 0, seen = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed) && seen++ == r) {
      CPU_SET(c, &one);
      if (::sched_setaffinity(0, sizeof one, &one) != 0) std::perror("zerorun-bench: sched_setaffinity");
      return;
    }
  }
}

// Forks n copies of this program as ranks 0..n-1; returns the worst exit status.
int SpawnRanks(int n, int argc, char** argv) {
  const int port = PickFreePort();
  std::random_device rd;
  const std::string token = std::to_string(rd()) + std::to_string(rd());
  std::vector<pid_t> pids;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--nprocs") {
      ++i;
      continue;
    }
    args.push_back(argv[i]);
  }
  args.push_back(nullptr);
  for (int r = 0; r < n; ++r) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("ZERORUN_JOB_TOKEN", token.c_str(), 1);
      ::setenv("ZERORUN_RESTART", "0", 1);
      // zerorun runs OpenBLAS on one thread (kernels/cpu/blas.cc); its own pool, started when the
      // library loads, would only spin in sched_yield for the first ~0.1 s, over most of a short sweep.
      ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
      // As OpenMPI's mpirun does by default for 2 ranks (and the zerorun launcher with --bind_cores):
      // one core per rank when the ranks fit; ZERORUN_BENCH_BIND=0 leaves them to the scheduler.
      if (BindRanks(n)) BindToCpu(r);
      // Simulated nodes for the hierarchical path: ranks r/K share a node (comm/ucx/ucx_comm.h).
      if (const char* k = std::getenv("ZERORUN_BENCH_RANKS_PER_NODE"); k && std::atoi(k) > 0) {
        ::setenv("ZERORUN_NODE_ID", std::to_string(r / std::atoi(k)).c_str(), 1);
      }
      ::execv("/proc/self/exe", args.data());
      std::perror("zerorun-bench: exec");
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && worst == 0) {
      worst = code;
      for (pid_t q : pids) ::kill(q, SIGTERM);  // one rank failed: do not leave the others waiting
    }
  }
  return worst;
}


// ---- zerorun-bench io ------------------------------------------------------------------------------
//
//   zerorun-bench io --path DIR|FILE [--size 1G] [--io-size 64M] [--block-size 1M] [--queue-depth 8]
//                    [--intra-op-parallelism 1] [--single-submit] [--no-overlap-events]
//                    [--engine auto|io_uring|pread] [--config ds.json] [--read | --write] [--reps 3]
//                    [--buffered] [--no-register] [--no-huge-pages] [--keep] [--json]
//                    [--sweep [--block-sizes 256K,1M,4M] [--queue-depths 4,8,16,32] [--parallelism 1,2]]
//
// Sequential passes over one file (a scratch file when --path is a directory), write and read
// interleaved, --reps of each; GB/s = 1e9 bytes/s, the median and the range of the passes. --config
// takes the aio settings from a DeepSpeed config (flags given after it win). --sweep runs every
// combination of the lists and suggests the aio section with the least write + read time for the same
// bytes (what a swapper pays per sub-group), as ds_nvme_tune does.

struct IoArgs {
  offload::IoBenchOptions bench;
  offload::IoEngineOptions engine;
  int reps = 3;
  bool read = true, write = true;
  bool json = false;
  bool sweep = false;
  std::vector<int64_t> sweep_blocks = {256 << 10, 1 << 20, 4 << 20};
  std::vector<int64_t> sweep_depths = {4, 8, 16, 32};
  std::vector<int64_t> sweep_parallelism = {1, 2};
};

[[noreturn]] void IoUsage(const std::string& msg) {
  std::fprintf(stderr,
               "zerorun-bench io: %s\n"
               "usage: zerorun-bench io --path DIR|FILE [--size 1G] [--io-size 64M] [--block-size 1M] [--queue-depth 8]\n"
               "       [--intra-op-parallelism 1] [--single-submit] [--no-overlap-events] [--engine auto|io_uring|pread]\n"
               "       [--config ds.json] [--read | --write] [--reps 3] [--buffered] [--no-register] [--no-huge-pages]\n"
               "       [--keep] [--json]\n"
               "       [--sweep [--block-sizes 256K,1M,4M] [--queue-depths 4,8,16,32] [--parallelism 1,2]]\n",
               msg.c_str());
  std::exit(2);
}

std::string FormatFixed(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

int64_t IoInt(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x <= 0) IoUsage(flag + ": expected a positive integer, found '" + v + "'");
  return x;
}

std::vector<int64_t> IoList(const std::string& flag, const std::string& v, bool bytes) {
  std::vector<int64_t> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) {
    out.push_back(bytes ? static_cast<int64_t>(ParseBytes(flag, item)) : IoInt(flag, item));
  }
  if (out.empty()) IoUsage(flag + ": empty list");
  return out;
}

IoArgs ParseIo(int argc, char** argv) {
  IoArgs a;
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) IoUsage(f + " needs a value");
      return argv[++i];
    };
    if (f == "--path") a.bench.path = value();
    else if (f == "--size") a.bench.file_bytes = static_cast<int64_t>(ParseBytes(f, value()));
    else if (f == "--io-size") a.bench.transfer_bytes = static_cast<int64_t>(ParseBytes(f, value()));
    else if (f == "--block-size") a.engine.block_size = static_cast<int64_t>(ParseBytes(f, value()));
    else if (f == "--queue-depth") a.engine.queue_depth = static_cast<int>(IoInt(f, value()));
    else if (f == "--intra-op-parallelism") a.engine.intra_op_parallelism = static_cast<int>(IoInt(f, value()));
    else if (f == "--single-submit") a.engine.single_submit = true;
    else if (f == "--no-overlap-events") a.engine.overlap_events = false;
    else if (f == "--engine") {
      try {
        a.engine.kind = offload::ParseIoEngineKind(value());
      } catch (const Error& e) {
        IoUsage(e.what());
      }
    } else if (f == "--config") {
      const std::string path = value();
      try {
        runtime::LoadOptions lo;
        lo.log_warnings = false;
        const runtime::Config c = runtime::LoadConfigFile(path, lo);
        const offload::IoEngineKind kind = a.engine.kind;
        a.engine = runtime::IoEngineOptionsFromConfig(c.aio);
        a.engine.kind = kind;
      } catch (const Error& e) {
        IoUsage(Format("--config {}: {}", path, e.what()));
      }
    } else if (f == "--read") a.write = false;
    else if (f == "--write") a.read = false;
    else if (f == "--reps") a.reps = static_cast<int>(IoInt(f, value()));
    else if (f == "--buffered") a.bench.direct = false;
    else if (f == "--no-register") a.bench.register_buffers = false;
    else if (f == "--no-huge-pages") a.bench.huge_pages = false;
    else if (f == "--keep") a.bench.keep_file = true;
    else if (f == "--json") a.json = true;
    else if (f == "--sweep") a.sweep = true;
    else if (f == "--block-sizes") a.sweep_blocks = IoList(f, value(), true);
    else if (f == "--queue-depths") a.sweep_depths = IoList(f, value(), false);
    else if (f == "--parallelism") a.sweep_parallelism = IoList(f, value(), false);
    else if (f == "--help" || f == "-h") IoUsage("measures offload I/O bandwidth");
    else IoUsage("unknown flag '" + f + "'");
  }
  if (a.bench.path.empty()) IoUsage("--path is required (a directory on the disk to measure, or a file)");
  if (!a.read && !a.write) IoUsage("--read and --write together leave nothing to measure (give neither for both)");
  try {
    offload::ValidateIoEngineOptions(a.engine);
  } catch (const Error& e) {
    IoUsage(e.what());
  }
  return a;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string AioJson(const offload::IoEngineOptions& e) {
  return Format("{\"block_size\": {}, \"queue_depth\": {}, \"intra_op_parallelism\": {}, \"single_submit\": {}, "
                "\"overlap_events\": {}}",
                e.block_size, e.queue_depth, e.intra_op_parallelism, e.single_submit ? "true" : "false",
                e.overlap_events ? "true" : "false");
}

void PrintIoResult(const IoArgs& a, const offload::IoBench& bench, const offload::IoBenchResult& r) {
  auto range = [](const std::vector<double>& v) {
    if (v.empty()) return std::string("-");
    return Format("{} ({}..{})", FormatFixed(offload::Median(v)), FormatFixed(*std::min_element(v.begin(), v.end())),
                  FormatFixed(*std::max_element(v.begin(), v.end())));
  };
  const offload::IoEngineOptions& e = r.engine;
  if (a.json) {
    auto list = [](const std::vector<double>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + FormatFixed(v[i], 4);
      return s + "]";
    };
    std::printf("{\"engine\": \"%s\", \"file\": \"%s\", \"fs\": \"%s\", \"direct\": %s, \"size_bytes\": %lld, "
                "\"io_size_bytes\": %lld, \"aio\": %s, \"write_gbps\": %s, \"read_gbps\": %s, "
                "\"write_gbps_median\": %.4f, \"read_gbps_median\": %.4f, \"fixed_requests\": %lld, \"requests\": %lld}\n",
                r.engine_name.c_str(), bench.file_path().c_str(), bench.fs_type().c_str(),
                bench.options().direct ? "true" : "false", static_cast<long long>(bench.options().file_bytes),
                static_cast<long long>(bench.options().transfer_bytes), AioJson(e).c_str(), list(r.write_gbps).c_str(),
                list(r.read_gbps).c_str(), offload::Median(r.write_gbps), offload::Median(r.read_gbps),
                static_cast<long long>(r.stats.fixed_requests), static_cast<long long>(r.stats.requests));
  } else {
    std::printf("  %-8s %9s %5d %4d %6s %7s  %-22s %-22s\n", r.engine_name.c_str(),
                FormatBytes(static_cast<double>(e.block_size)).c_str(), e.queue_depth, e.intra_op_parallelism,
                e.single_submit ? "yes" : "no", e.overlap_events ? "yes" : "no", range(r.write_gbps).c_str(),
                range(r.read_gbps).c_str());
  }
  std::fflush(stdout);
}

int IoMain(int argc, char** argv) {
  const IoArgs a = ParseIo(argc, argv);
  try {
    offload::IoBench bench(a.bench);
    utsname u{};
    ::uname(&u);
    if (!a.json) {
      std::printf("# zerorun-bench io: %s (%s, %s), %s per pass in transfers of %s (2 in flight), %d rep(s)\n",
                  bench.file_path().c_str(), bench.fs_type().c_str(), a.bench.direct ? "O_DIRECT" : "buffered",
                  FormatBytes(static_cast<double>(a.bench.file_bytes)).c_str(),
                  FormatBytes(static_cast<double>(a.bench.transfer_bytes)).c_str(), a.reps);
      std::printf("# cpu: %s, isa %s; kernel %s\n", CpuModel().c_str(), IsaName(ActiveIsa()).c_str(), u.release);
      std::printf("# GB/s = 1e9 bytes/s: median (min..max) of the passes\n");
      std::printf("  %-8s %9s %5s %4s %6s %7s  %-22s %-22s\n", "engine", "block", "qd", "par", "single", "overlap",
                  "write GB/s", "read GB/s");
    }
    if (!a.sweep) {
      PrintIoResult(a, bench, bench.Run(a.engine, a.reps, a.write, a.read));
      return 0;
    }
    std::vector<offload::IoBenchResult> results;
    for (int64_t bs : a.sweep_blocks) {
      for (int64_t qd : a.sweep_depths) {
        for (int64_t par : a.sweep_parallelism) {
          offload::IoEngineOptions e = a.engine;
          e.block_size = bs;
          e.queue_depth = static_cast<int>(qd);
          e.intra_op_parallelism = static_cast<int>(par);
          offload::ValidateIoEngineOptions(e);
          results.push_back(bench.Run(e, a.reps, /*write=*/true, /*read=*/true));
          PrintIoResult(a, bench, results.back());
        }
      }
    }
    const offload::IoBenchResult& best = offload::BestForSwapping(results);
    if (a.json) {
      std::printf("{\"suggested_aio\": %s}\n", AioJson(best.engine).c_str());
    } else {
      std::printf("# suggested (least write + read time for the same bytes: write %s, read %s GB/s):\n",
                  FormatFixed(offload::Median(best.write_gbps)).c_str(),
                  FormatFixed(offload::Median(best.read_gbps)).c_str());
      std::printf("\"aio\": %s\n", AioJson(best.engine).c_str());
    }
  } catch (const Error& e) {
    ZR_ERROR("zerorun-bench io: {}", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = WithoutLocalRank(argc, argv);
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();
  if (argc >= 2 && std::string(argv[1]) == "io") return IoMain(argc, argv);
  Args a = Parse(argc, argv);
  try {
    if (a.backend == "local") {
      int n = a.nprocs > 0 ? a.nprocs : 1;
      RunLocalRanks(n, [&](Communicator& comm) { Sweep(comm, a); });
      return 0;
    }
    if (a.backend == "nccl") {
      const int gpus = GetDeviceBackend(DeviceType::kCUDA).DeviceCount();
      if (gpus == 0) ZR_THROW(InvalidArgument, "--backend nccl needs a CUDA device, and none is visible");
      // Alone, nccl still needs the rendezvous: run as a one-rank job.
      if (a.nprocs == 0 && !std::getenv("RANK")) a.nprocs = 1;
      if (a.nprocs > gpus) ZR_THROW(InvalidArgument, "--nprocs {} > {} visible GPUs (nccl: one rank per GPU)", a.nprocs, gpus);
    }
    if (a.nprocs > 0 && !std::getenv("RANK")) return SpawnRanks(a.nprocs, argc, argv);  // ucx, nccl
    InitOptions io;
    io.backend = a.backend;
    auto comm = InitFromEnv(io);
    if (a.backend == "nccl" && comm->backend_name() != a.backend) {
      ZR_THROW(InvalidArgument, "asked for --backend {} but the job's communicator is {}", a.backend, comm->backend_name());
    }
    Sweep(*comm, a);
  } catch (const Error& e) {
    ZR_ERROR("zerorun-bench: {}", e.what());
    return 1;
  }
  return 0;
}
