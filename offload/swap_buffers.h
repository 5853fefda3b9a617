// SwapBuffers: the page-locked buffers of a swapping store (the NVMe state store, the NVMe shard store).
// `count` buffers of `bytes` each, in one allocation registered with the I/O engine; each buffer holds
// at most one item (a sub-group, a parameter shard) and that item's read and write in flight, and items
// and buffers map to each other both ways. A new item takes a free buffer, else the least recently
// used one whose item is not acquired by the store's caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/offload/io_engine.h"
#include "zerorun/offload/pinned_pool.h"
#include "zerorun/offload/swap_file.h"

namespace zerorun::offload {

class SwapBuffers {
 public:
  // `items`: how many items the store has (ids 0..items-1). `what` names the store in the warnings of
  // the destructor ("NVMe state store").
  SwapBuffers(int count, int64_t bytes, int items, bool huge_pages, IoEngine& engine, std::string what);
  // Waits for every transfer still in flight (a failure is logged: nobody is left to throw to).
  ~SwapBuffers();
  SwapBuffers(const SwapBuffers&) = delete;
  SwapBuffers& operator=(const SwapBuffers&) = delete;

  int count() const { return static_cast<int>(bufs_.size()); }
  int64_t bytes() const { return bytes_; }          // of one buffer
  int64_t host_bytes() const { return memory_.size(); }  // of all of them, page-rounded
  char* Data(int b) const { return memory_.as<char>() + static_cast<int64_t>(b) * bytes_; }

  int BufferOf(int item) const { return buffer_of_.at(static_cast<size_t>(item)); }  // -1: none
  void Attach(int b, int item);
  void Detach(int b);
  // The item was used now (the least recently used buffer is reused first).
  void Touch(int b) { bufs_.at(static_cast<size_t>(b)).last_use = ++clock_; }
  SwapWork& read(int b) { return bufs_.at(static_cast<size_t>(b)).read; }
  SwapWork& write(int b) { return bufs_.at(static_cast<size_t>(b)).write; }

  // Waits for b's write. A failure is kept (the first one since the last TakeError) instead of thrown:
  // the values are still in the buffer.
  void WaitWrite(int b);
  void WaitAllWrites();
  bool failed() const { return !error_.empty(); }
  std::string TakeError();

  // A buffer for a new item: a free one, else the least recently used one whose item `acquired` says
  // is not in use — preferring buffers with no read in flight; blocking, one whose read (a prefetch
  // nobody used: its data is dropped) is still in flight comes last. The chosen buffer's write is
  // waited for and it is detached. Non-blocking: -1 rather than wait for a read or a write. Blocking,
  // with every buffer's item acquired: a broken invariant (ZR_CHECK). With `keep_failed`, after a
  // failed write (this buffer's or one kept earlier) nothing is detached: TakeBuffer throws
  // IoError(TakeError() + failure_suffix), so no buffer holding unwritten values is reused.
  int TakeBuffer(bool blocking, const std::function<bool(int item)>& acquired, bool keep_failed = false,
                 const std::string& failure_suffix = "");

  // A store's Acquire of `item`, on these buffers: when the item has a buffer, its read is waited for
  // (a failed one detaches it and throws; *hit says no read was pending) and, when the caller will
  // change it, its last write; otherwise a buffer is taken (TakeBuffer, blocking), attached and
  // `fill`ed (a throwing fill detaches it again). Returns the buffer, touched.
  int Load(int item, bool will_write, bool* hit, const std::function<bool(int item)>& acquired,
           const std::function<void(char* data)>& fill, bool keep_failed = false,
           const std::string& failure_suffix = "");

  std::vector<IoRegion> Regions() const;

 private:
  struct Buf {
    int item = -1;
    SwapWork read;
    SwapWork write;
    uint64_t last_use = 0;
  };
  std::string what_;
  int64_t bytes_;
  PinnedBuffer memory_;
  std::vector<Buf> bufs_;  // after memory_: their transfers finish before it is freed
  std::vector<int> buffer_of_;
  std::string error_;
  uint64_t clock_ = 0;
};

// Everything a swapping store opens, in this order (and closes in the reverse one): the directory (its
// preflight, sized for the file), the I/O engine (the aio settings; rank and file env from the
// directory's options when unset), the swap file with one slot per entry of `slot_bytes`, the buffers.
struct SwapSpace {
  SwapSpace(const SwapDirOptions& dir_options, const IoEngineOptions& io, const std::string& file_name,
            const std::vector<int64_t>& slot_bytes, int buffers, int64_t buffer_bytes, int items, bool huge_pages,
            const std::string& what);
  // "nvme <file> (<n> buffers of <size> in pinned host memory[; buffered I/O])".
  std::string Placement() const;

  std::unique_ptr<SwapDir> dir;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<SwapFile> file;
  std::unique_ptr<SwapBuffers> buffers;
};

}  // namespace zerorun::offload
