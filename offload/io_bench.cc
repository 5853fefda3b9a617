// IoBench: timed sequential passes over one file (zerorun-bench io).
#include "zerorun/offload/io_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::offload {
namespace {

int64_t CheckedTransfer(const IoBenchOptions& o) {
  if (o.file_bytes <= 0 || o.file_bytes % kDirectIoAlignment != 0) {
    ZR_THROW(InvalidArgument, "io bench: the file size must be a positive multiple of {}; found {}", kDirectIoAlignment,
             o.file_bytes);
  }
  if (o.transfer_bytes <= 0 || o.transfer_bytes % kDirectIoAlignment != 0) {
    ZR_THROW(InvalidArgument, "io bench: the transfer size must be a positive multiple of {}; found {}",
             kDirectIoAlignment, o.transfer_bytes);
  }
  return std::min(o.transfer_bytes, o.file_bytes);
}

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

IoBench::IoBench(const IoBenchOptions& options)
    : options_(options),
      env_(options.env ? *options.env : FileEnv::Default()),
      buffers_(CheckedTransfer(options), 2, options.huge_pages) {
  struct stat st {};
  const int r = env_.Stat(options_.path, &st);
  if (r == 0 && S_ISDIR(st.st_mode)) {
    file_path_ = Format("{}/zerorun-bench-io.{}.dat", options_.path, ::getpid());
    scratch_ = true;
  } else if (r == 0 || r == -ENOENT) {
    file_path_ = options_.path;
  } else {
    throw IoError(ErrnoMessage(Format("io bench: cannot stat {}", options_.path), -r));
  }
  fs_type_ = FileSystemName(env_, file_path_);
  if (fs_type_ == "tmpfs" || fs_type_ == "ramfs") {
    ZR_WARN("io bench: {} is on {} (memory), not a disk: the figures are memory copies", file_path_, fs_type_);
  }
  const bool existed = r == 0 && !scratch_;
  file_ = IoFile::Open(file_path_, {.write = true, .create = true, .direct = options_.direct}, env_);
  const int64_t size = file_.Size();
  if (size < options_.file_bytes) {
    if (const int f = env_.Fallocate(file_.fd(), 0, options_.file_bytes); f < 0 && f != -EOPNOTSUPP) {
      std::string msg = ErrnoMessage(Format("io bench: cannot allocate {} for {}",
                                            FormatBytes(static_cast<double>(options_.file_bytes)), file_path_),
                                     -f);
      file_.Close();
      if (!existed) env_.Unlink(file_path_);
      throw IoError(msg);
    }
    // Write the whole file once, untimed, so timed writes overwrite blocks that are in place (as fio's
    // laid-out file) and reads read data, not unwritten extents.
    IoEngineOptions fill;
    fill.kind = IoEngineKind::kPread;
    fill.block_size = CheckedTransfer(options_);
    fill.env = &env_;
    auto engine = CreateIoEngine(fill);
    PinnedPool::Lease b = buffers_.Acquire();
    std::memset(b.data(), 0x5a, static_cast<size_t>(b.size()));
    for (int64_t off = 0; off < options_.file_bytes; off += b.size()) {
      engine->Write(file_, off, b.data(), std::min(b.size(), options_.file_bytes - off));
    }
  }
  // Recognisable content in both buffers (what write passes write).
  for (const IoRegion& region : buffers_.Regions()) {
    auto* p = static_cast<uint8_t*>(region.data);
    for (int64_t i = 0; i < region.bytes; ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  }
}

IoBench::~IoBench() {
  file_.Close();
  if (scratch_ && !options_.keep_file) env_.Unlink(file_path_);
}

double IoBench::Pass(IoOp op, const IoEngineOptions& engine_options, IoStats* stats, std::string* name) {
  IoEngineOptions eo = engine_options;
  if (eo.env == nullptr) eo.env = &env_;
  auto engine = CreateIoEngine(eo);
  if (options_.register_buffers && engine->kind() == IoEngineKind::kUring) engine->RegisterBuffers(buffers_.Regions());
  const std::vector<IoRegion> bufs = buffers_.Regions();
  const int64_t chunk = buffers_.buffer_bytes();
  IoWork in_flight[2];
  Stopwatch watch;
  int64_t i = 0;
  for (int64_t off = 0; off < options_.file_bytes; off += chunk, ++i) {
    const size_t slot = static_cast<size_t>(i % 2);
    in_flight[slot].Wait();
    in_flight[slot] = engine->Submit(op, file_, off, bufs[slot].data, std::min(chunk, options_.file_bytes - off));
  }
  in_flight[0].Wait();
  in_flight[1].Wait();
  const double seconds = watch.ElapsedSeconds();
  if (stats) *stats = engine->Stats();
  if (name) *name = engine->name();
  return static_cast<double>(options_.file_bytes) / seconds / 1e9;
}

IoBenchResult IoBench::Run(const IoEngineOptions& engine, int reps, bool write, bool read) {
  IoBenchResult r;
  r.engine = engine;
  for (int k = 0; k < reps; ++k) {
    if (write) r.write_gbps.push_back(Pass(IoOp::kWrite, engine, &r.stats, &r.engine_name));
    if (read) r.read_gbps.push_back(Pass(IoOp::kRead, engine, &r.stats, &r.engine_name));
  }
  return r;
}

const IoBenchResult& BestForSwapping(const std::vector<IoBenchResult>& results) {
  ZR_CHECK(!results.empty());
  auto cost = [](const IoBenchResult& r) {
    const double w = Median(r.write_gbps), rd = Median(r.read_gbps);
    return (w > 0 ? 1 / w : 1e300) + (rd > 0 ? 1 / rd : 1e300);
  };
  return *std::min_element(results.begin(), results.end(),
                           [&](const IoBenchResult& a, const IoBenchResult& b) { return cost(a) < cost(b); });
}

}  // namespace zerorun::offload
