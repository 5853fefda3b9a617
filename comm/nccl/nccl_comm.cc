// NcclCommunicator: NCCL on a dedicated stream, event-polled completion, abort on timeout.
#include "zerorun/comm/nccl/nccl_comm.h"
#include "zerorun/comm/device_staging.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <thread>

#include "zerorun/core/cuda/cuda_check.h"
#include "zerorun/core/device.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::comm {

namespace {

std::string HostName() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

ncclDataType_t ToNccl(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI8: return ncclInt8;
    case DType::kU8: return ncclUint8;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Store> gen_store, std::string name, int rank, int size, int device,
                   const CommOptions& options, std::shared_ptr<Monitor> monitor)
      : Communicator("nccl", name, rank, size, options),
        gen_store_(std::move(gen_store)),
        group_store_(std::make_shared<PrefixStore>(name, gen_store_)),
        monitor_(std::move(monitor)),
        options_(options),
        device_(device) {
    options_.timeout = timeout();
    set_heartbeat_store(group_store_);
    try {
      Init();
    } catch (...) {
      StopExecutor();
      Release();
      throw;
    }
    if (monitor_) monitor_->Register(this);
  }

  ~NcclCommunicator() override {
    if (monitor_) monitor_->Unregister(this);
    StopExecutor();
    if (monitor_ && aborted()) monitor_->NoteLocalFailure();
    Release();
  }

  Device device() const override { return Device::CUDA(device_); }

 protected:
  void Execute(OpDesc& op) override;
  std::unique_ptr<Communicator> CreateSubgroup(const std::string& new_name, const std::vector<int>& members,
                                               int new_rank) override {
    CommOptions o = options_;
    o.timeout = timeout();  // set_timeout may have changed it since construction
    return std::make_unique<NcclCommunicator>(gen_store_, new_name, new_rank, static_cast<int>(members.size()), device_,
                                              o, monitor_);
  }
  // Split's exchange goes through the store: the payload is host data.
  std::vector<int64_t> AllGatherHost(const std::vector<int64_t>& mine, int split_id) override {
    std::ostringstream os;
    for (int64_t v : mine) os << v << ' ';
    group_store_->Set(Format("split{}/{}", split_id, rank()), os.str());
    std::vector<int64_t> all;
    for (int r = 0; r < size(); ++r) {
      std::istringstream is(group_store_->Get(Format("split{}/{}", split_id, r), timeout()));
      for (size_t i = 0; i < mine.size(); ++i) {
        int64_t v = 0;
        is >> v;
        all.push_back(v);
      }
    }
    return all;
  }

 protected:
  // On the submitting thread: an event at the current end of its kernel stream (KernelDeviceScope on
  // this device, else the device's default stream), so the op waits for exactly the kernels that
  // were enqueued before it was submitted (its producers), not for work enqueued while it queued.
  void OnSubmit(OpDesc& op) override {
    const Device dev = Device::CUDA(device_);
    Stream* s = kernels::KernelDevice() == dev && kernels::KernelStream() != nullptr ? kernels::KernelStream()
                                                                                      : &DefaultStream(dev);
    std::shared_ptr<Event> ready(CreateEvent(dev));
    ready->Record(*s);
    op.backend_state = std::move(ready);
  }

 private:
  void Init();
  void Release();
  void CheckNccl(ncclResult_t r, const char* what, const OpDesc* op);
  // Polls until `done()` or failure; aborts the NCCL communicator on timeout or abort.
  template <typename Done>
  void PollUntil(const OpDesc* op, const char* what, Done done);
  void AbortNccl();

  std::shared_ptr<Store> gen_store_;
  std::shared_ptr<Store> group_store_;
  std::shared_ptr<Monitor> monitor_;
  CommOptions options_;
  int device_;
  ncclComm_t nccl_ = nullptr;
  bool nccl_aborted_ = false;
  std::unique_ptr<Stream> comm_stream_;  // the collectives' own stream
  cudaStream_t stream_ = nullptr;        // its handle
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;  // 4 bytes of device memory for Barrier
  std::unique_ptr<HostStaging> staging_;  // host buffers of small agreement collectives
};

void NcclCommunicator::AbortNccl() {
  if (nccl_ && !nccl_aborted_) {
    ncclCommAbort(nccl_);
    nccl_aborted_ = true;
  }
}

void NcclCommunicator::CheckNccl(ncclResult_t r, const char* what, const OpDesc* op) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string where = op ? op->Describe(rank(), size(), name()) : Format("nccl group '{}' rank {}", name(), rank());
  std::string last = nccl_ ? ncclGetLastError(nccl_) : "";
  AbortNccl();
  ZR_THROW(CommError, "{}: {} failed: {}{}{}", where, what, ncclGetErrorString(r), last.empty() ? "" : ": ", last);
}

template <typename Done>
void NcclCommunicator::PollUntil(const OpDesc* op, const char* what, Done done) {
  double deadline = op ? op->deadline : NowSeconds() + static_cast<double>(timeout().count()) / 1e3;
  int spins = 0;
  for (;;) {
    if (done()) return;
    if (nccl_) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(nccl_, &async);
      CheckNccl(async, what, op);
    }
    if (aborted()) {
      AbortNccl();
      ThrowAborted();
    }
    if (NowSeconds() > deadline) {
      AbortNccl();
      if (op) ThrowTimeout(*op, DescribeStall(*op));
      ZR_THROW(TimeoutError, "nccl group '{}' rank {}: {} timed out after {} ms; {}", name(), rank(), what,
               timeout().count(), "a rank did not join (check every rank reached the same call)");
    }
    if (++spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::Init() {
  ZR_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<std::string> hosts(static_cast<size_t>(size()));
  group_store_->Set(Format("host/{}", rank()), HostName());
  for (int r = 0; r < size(); ++r) hosts[static_cast<size_t>(r)] = group_store_->Get(Format("host/{}", r), timeout());
  set_hosts(std::move(hosts));
  ncclUniqueId id;
  if (rank() == 0) {
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
    group_store_->Set("nccl/id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    std::string v = group_store_->Get("nccl/id", timeout());
    if (v.size() != sizeof(id)) ZR_THROW(CommError, "nccl group '{}': malformed unique id in {}", name(), group_store_->Describe());
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so a missing rank cannot hang us past the timeout
  CheckNccl(ncclCommInitRankConfig(&nccl_, size(), id, rank(), &config), "ncclCommInitRankConfig", nullptr);
  PollUntil(nullptr, "ncclCommInitRankConfig", [&] {
    ncclResult_t st = ncclInProgress;
    ncclCommGetAsyncError(nccl_, &st);
    return st == ncclSuccess;
  });
  comm_stream_ = CreateStream(Device::CUDA(device_));  // non-blocking (core/cuda)
  stream_ = static_cast<cudaStream_t>(comm_stream_->native_handle());
  ZR_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  ZR_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  ZR_CUDA_CHECK(cudaMalloc(&scratch_, 16));
  ZR_DEBUG("nccl group '{}' rank {}/{} ready on cuda:{}", name(), rank(), size(), device_);
}

void NcclCommunicator::Release() {
  if (nccl_) {
    if (!nccl_aborted_ && !aborted()) {
      ncclCommFinalize(nccl_);
      ncclCommDestroy(nccl_);
    } else if (!nccl_aborted_) {
      ncclCommAbort(nccl_);
    }
    nccl_ = nullptr;
  }
  if (scratch_) cudaFree(scratch_);
  if (done_) cudaEventDestroy(done_);
  if (ready_) cudaEventDestroy(ready_);
  comm_stream_.reset();
  scratch_ = nullptr;
  done_ = ready_ = nullptr;
  stream_ = nullptr;
}

void NcclCommunicator::Execute(OpDesc& op) {
  if (nccl_aborted_) ThrowAborted();
  ZR_CUDA_CHECK(cudaSetDevice(device_));
  if (op.reduce == ReduceOp::kAvg && !IsFloating(op.dtype) &&
      (op.op == OpType::kAllReduce || op.op == OpType::kReduceScatter || op.op == OpType::kReduce)) {
    ZR_THROW(InvalidArgument, "{}: the nccl backend averages floating types only", op.Describe(rank(), size(), name()));
  }
  // Order after the producers: the event OnSubmit recorded on the submitting stream (an op queued
  // without one, e.g. from a split's setup, waits for the device's default stream as it is now).
  if (op.backend_state) {
    std::static_pointer_cast<Event>(op.backend_state)->Block(*comm_stream_);
  } else {
    auto* default_stream = static_cast<cudaStream_t>(DefaultStream(Device::CUDA(device_)).native_handle());
    ZR_CUDA_CHECK(cudaEventRecord(ready_, default_stream));
    ZR_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  if (!staging_) staging_ = std::make_unique<HostStaging>(Device::CUDA(device_));
  const bool staged = staging_->Stage(op, size(), rank(), *comm_stream_, [](const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // older runtimes: an unknown pointer is host memory
      return true;
    }
    return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
  });
  const ncclDataType_t dt = ToNccl(op.dtype);
  const size_t es = DTypeSize(op.dtype);
  const size_t n = static_cast<size_t>(size());
  ncclResult_t r = ncclSuccess;
  switch (op.op) {
    case OpType::kAllReduce:
      r = ncclAllReduce(op.send, op.recv, op.count, dt, ToNccl(op.reduce), nccl_, stream_);
      op.bytes_sent = op.bytes_received = static_cast<int64_t>(2 * (n - 1) * op.count * es / n);
      break;
    case OpType::kReduceScatter:
      r = ncclReduceScatter(op.send, op.recv, op.count, dt, ToNccl(op.reduce), nccl_, stream_);
      op.bytes_sent = op.bytes_received = static_cast<int64_t>((n - 1) * op.count * es);
      break;
    case OpType::kAllGather:
      r = ncclAllGather(op.send, op.recv, op.count, dt, nccl_, stream_);
      op.bytes_sent = op.bytes_received = static_cast<int64_t>((n - 1) * op.count * es);
      break;
    case OpType::kBroadcast:
      r = ncclBroadcast(op.send, op.recv, op.count, dt, op.root, nccl_, stream_);
      break;
    case OpType::kReduce:
      r = ncclReduce(op.send, op.recv, op.count, dt, ToNccl(op.reduce), op.root, nccl_, stream_);
      break;
    case OpType::kBarrier:
      r = ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, nccl_, stream_);
      break;
    case OpType::kSend:
      r = ncclSend(op.send, op.count, dt, op.root, nccl_, stream_);
      break;
    case OpType::kRecv:
      r = ncclRecv(op.recv, op.count, dt, op.root, nccl_, stream_);
      break;
  }
  CheckNccl(r, OpTypeName(op.op), &op);
  ZR_CUDA_CHECK(cudaEventRecord(done_, stream_));
  PollUntil(&op, OpTypeName(op.op), [&] {
    cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) return false;
    ZR_CUDA_CHECK(q);
    return true;
  });
  if (staged) staging_->Unstage(op, *comm_stream_);
}

}  // namespace

std::unique_ptr<Communicator> CreateNcclCommunicator(std::shared_ptr<Store> store, int rank, int size, int device,
                                                     const CommOptions& options, std::shared_ptr<Monitor> monitor) {
  return std::make_unique<NcclCommunicator>(std::move(store), "world", rank, size, device, options, std::move(monitor));
}

}  // namespace zerorun::comm
