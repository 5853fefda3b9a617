// SwapBuffers: attach / detach, least-recently-used reuse, waiting for writes.
#include "zerorun/offload/swap_buffers.h"

#include <limits>
#include <utility>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/log.h"

namespace zerorun::offload {

SwapBuffers::SwapBuffers(int count, int64_t bytes, int items, bool huge_pages, IoEngine& engine, std::string what)
    : what_(std::move(what)), bytes_(bytes), memory_(bytes * count, huge_pages), bufs_(static_cast<size_t>(count)),
      buffer_of_(static_cast<size_t>(items), -1) {
  (void)engine.RegisterBuffers(Regions());
}

SwapBuffers::~SwapBuffers() {
  for (Buf& b : bufs_) {
    for (SwapWork* w : {&b.read, &b.write}) {
      try {
        w->Wait();
      } catch (const Error& e) {
        ZR_WARN("{}: a transfer failed while closing: {}", what_, e.what());
      }
    }
  }
}

std::vector<IoRegion> SwapBuffers::Regions() const {
  std::vector<IoRegion> regions;
  for (int b = 0; b < count(); ++b) regions.push_back({Data(b), bytes_});
  return regions;
}

void SwapBuffers::Attach(int b, int item) {
  bufs_.at(static_cast<size_t>(b)).item = item;
  buffer_of_.at(static_cast<size_t>(item)) = b;
}

void SwapBuffers::Detach(int b) {
  Buf& buf = bufs_.at(static_cast<size_t>(b));
  if (buf.item >= 0) buffer_of_[static_cast<size_t>(buf.item)] = -1;
  buf.item = -1;
}

void SwapBuffers::WaitWrite(int b) {
  try {
    bufs_.at(static_cast<size_t>(b)).write.Wait();
  } catch (const IoError& e) {
    if (error_.empty()) error_ = e.what();
  }
}

void SwapBuffers::WaitAllWrites() {
  for (int b = 0; b < count(); ++b) WaitWrite(b);
}

std::string SwapBuffers::TakeError() { return std::exchange(error_, std::string()); }

int SwapBuffers::TakeBuffer(bool blocking, const std::function<bool(int item)>& acquired, bool keep_failed,
                            const std::string& failure_suffix) {
  int best = -1;
  for (bool reading_too : {false, true}) {
    if (reading_too && !blocking) break;
    uint64_t best_use = std::numeric_limits<uint64_t>::max();
    for (size_t b = 0; b < bufs_.size(); ++b) {
      const Buf& buf = bufs_[b];
      if (buf.item < 0) {
        best = static_cast<int>(b);
        break;
      }
      if (acquired(buf.item) || (!reading_too && buf.read.pending())) continue;
      if (!blocking && !buf.write.Done()) continue;
      if (buf.last_use < best_use) {
        best = static_cast<int>(b);
        best_use = buf.last_use;
      }
    }
    if (best >= 0) break;
  }
  if (best < 0) {
    ZR_CHECK(!blocking, "{}: all {} buffers are in use", what_, bufs_.size());
    return -1;
  }
  try {
    bufs_[static_cast<size_t>(best)].read.Wait();  // a prefetch nobody used: its data is dropped
  } catch (const IoError&) {
  }
  WaitWrite(best);
  if (keep_failed && failed()) ZR_THROW(IoError, "{}{}", TakeError(), failure_suffix);
  Detach(best);
  return best;
}

int SwapBuffers::Load(int item, bool will_write, bool* hit, const std::function<bool(int item)>& acquired,
                      const std::function<void(char* data)>& fill, bool keep_failed,
                      const std::string& failure_suffix) {
  int b = BufferOf(item);
  *hit = false;
  if (b >= 0) {
    if (read(b).pending()) {
      try {
        read(b).Wait();
      } catch (...) {
        Detach(b);
        throw;
      }
    } else {
      *hit = true;
    }
    if (will_write) WaitWrite(b);  // the caller will change the buffer: its last write must be out first
  } else {
    b = TakeBuffer(/*blocking=*/true, acquired, keep_failed, failure_suffix);
    Attach(b, item);
    try {
      fill(Data(b));
    } catch (...) {
      Detach(b);
      throw;
    }
  }
  Touch(b);
  return b;
}

SwapSpace::SwapSpace(const SwapDirOptions& dir_options, const IoEngineOptions& io, const std::string& file_name,
                     const std::vector<int64_t>& slot_bytes, int buffers_count, int64_t buffer_bytes, int items,
                     bool huge_pages, const std::string& what) {
  SwapDirOptions d = dir_options;
  d.required_bytes = kDirectIoAlignment;  // the file header, then a footer block and the payload per slot
  for (int64_t b : slot_bytes) d.required_bytes += kDirectIoAlignment + SwapFile::AlignedBytes(b);
  dir = std::make_unique<SwapDir>(d);
  IoEngineOptions o = io;
  o.rank = dir_options.rank;
  if (o.env == nullptr) o.env = dir_options.env;
  engine = CreateIoEngine(o);
  file = std::make_unique<SwapFile>(*dir, file_name, slot_bytes, *engine);
  buffers = std::make_unique<SwapBuffers>(buffers_count, buffer_bytes, items, huge_pages, *engine, what);
}

std::string SwapSpace::Placement() const {
  return Format("nvme {} ({} buffers of {} in pinned host memory{})", file->path(), buffers->count(),
                FormatBytes(static_cast<double>(buffers->bytes())), dir->direct_io() ? "" : "; buffered I/O");
}

}  // namespace zerorun::offload
