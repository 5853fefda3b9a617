// Swap files for NVMe offload: where a rank's optimizer state and parameters live when they are not in
// memory. Two layers:
//
// SwapDir — the per-job, per-rank directory <nvme_path>/zerorun-<job id>/rank<R>/. Constructing it is
// the preflight, so every problem shows at construction and not in the middle of a step: nvme_path
// missing, not a directory, not writable, on a file system without O_DIRECT (tmpfs: an error, or
// buffered I/O with a warning), too little free space. The rank directory is locked (flock) while the
// object lives, so two processes with the same job id and rank fail instead of clobbering each other.
//
// SwapFile — one file of fixed-capacity slots, each holding one record. A record is its payload plus
// a footer block carrying the payload's length, an XXH3-64 checksum, a generation number and the
// file's identity; a read verifies all of them, so a short, stale, truncated, misplaced or corrupt
// record is an IoError naming the file, slot and rank — DeepSpeed's "buffer nbytes != file bytes"
// cannot happen silently. File layout (every offset a multiple of kDirectIoAlignment):
//
//   [file header][slot 0 footer][slot 0 payload (capacity)][slot 1 footer][slot 1 payload] ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zerorun/offload/io_engine.h"
#include "zerorun/offload/pinned_pool.h"

namespace zerorun::offload {

struct SwapDirOptions {
  std::string nvme_path;                 // the configured directory (must exist)
  std::string config_key = "nvme_path";  // named in errors, e.g. "zero_optimization.offload_optimizer.nvme_path"
  std::string job_id;                    // separates jobs sharing nvme_path; [A-Za-z0-9._-]+; "": DefaultSwapJobId()
  int rank = 0;                          // separates the ranks of one job
  int64_t required_bytes = 0;            // the swap files' total size; less free space is an error
  bool require_direct_io = false;        // no O_DIRECT: false -> buffered I/O with a warning; true -> IoError
  bool keep_files = false;               // leave the directory and its files on destruction (resume)
  FileEnv* env = nullptr;                // nullptr: FileEnv::Default()
};

// The same for every rank of a job: derived from ZERORUN_JOB_TOKEN (hashed; the token is a secret)
// when set, else "pid<pid>".
std::string DefaultSwapJobId();

class SwapDir {
 public:
  // The preflight. Throws IoError starting with options.config_key and naming the path.
  explicit SwapDir(const SwapDirOptions& options);
  // Removes the directories it created (unless keep_files) and releases the lock.
  ~SwapDir();
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  const std::string& path() const { return rank_dir_; }  // <nvme_path>/zerorun-<job id>/rank<R>
  const std::string& job_dir() const { return job_dir_; }
  bool direct_io() const { return direct_io_; }
  const std::string& fs_type() const { return fs_type_; }
  const SwapDirOptions& options() const { return options_; }
  FileEnv& env() const { return env_; }

 private:
  void Preflight();
  void RemoveCreated();
  SwapDirOptions options_;
  FileEnv& env_;
  std::string job_dir_;
  std::string rank_dir_;
  std::string fs_type_;
  bool direct_io_ = false;
  bool created_job_dir_ = false;
  bool created_rank_dir_ = false;
  IoFile lock_;
};

class SwapFile;

// The handle of one record transfer; Wait completes it (verifying a read). Move-only; destroying an
// un-waited handle waits and logs an error it did not get to throw.
class SwapWork {
 public:
  SwapWork() = default;
  ~SwapWork();
  SwapWork(SwapWork&& o) noexcept;
  SwapWork& operator=(SwapWork&& o) noexcept;
  SwapWork(const SwapWork&) = delete;
  SwapWork& operator=(const SwapWork&) = delete;

  // Throws IoError: the transfer failed, or (reads) the record does not verify.
  void Wait();
  // True when nothing is left to wait for (no transfer, or both its parts complete): Wait will not block.
  bool Done() const { return file_ == nullptr || (payload_.Done() && footer_.Done()); }
  bool pending() const { return file_ != nullptr; }

 private:
  friend class SwapFile;
  SwapFile* file_ = nullptr;
  int slot_ = -1;
  IoOp op_ = IoOp::kRead;
  void* buf_ = nullptr;
  int64_t nbytes_ = 0;
  uint64_t generation_ = 0;
  IoWork payload_;
  IoWork footer_;
};

class SwapFile {
 public:
  static constexpr uint64_t kAnyGeneration = ~uint64_t{0};

  // Creates <dir>/<name>.swp (replacing a stale file of that name) with one slot per entry of
  // `slot_bytes` (each rounded up to kDirectIoAlignment) and allocates all its blocks (fallocate), so a
  // full disk is an IoError here, naming the file, rather than during a step. `dir` and `engine` must
  // outlive the file.
  SwapFile(SwapDir& dir, const std::string& name, const std::vector<int64_t>& slot_bytes, IoEngine& engine);
  // Closes and deletes the file (unless the directory keeps files). REQUIRES: no transfer in flight.
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  // The buffer size a record of `nbytes` needs (whole alignment blocks).
  static int64_t AlignedBytes(int64_t nbytes) {
    return (nbytes + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
  }

  // Writes `nbytes` of `buf` as slot's record, tagged `generation`. `buf` is kDirectIoAlignment-aligned
  // and AlignedBytes(nbytes) long (the padding is written too, not checksummed); it must stay unchanged
  // until Wait. REQUIRES: no other transfer of this slot in flight; AlignedBytes(nbytes) <= capacity.
  SwapWork SubmitWrite(int slot, const void* buf, int64_t nbytes, uint64_t generation);
  // Reads slot's record into `buf` (AlignedBytes(nbytes) long, aligned); Wait verifies that the record
  // is this file's, this slot's, `nbytes` long, of `expected_generation` (unless kAnyGeneration), and
  // that its checksum matches.
  SwapWork SubmitRead(int slot, void* buf, int64_t nbytes, uint64_t expected_generation = kAnyGeneration);
  void Write(int slot, const void* buf, int64_t nbytes, uint64_t generation) {
    SubmitWrite(slot, buf, nbytes, generation).Wait();
  }
  void Read(int slot, void* buf, int64_t nbytes, uint64_t expected_generation = kAnyGeneration) {
    SubmitRead(slot, buf, nbytes, expected_generation).Wait();
  }

  int num_slots() const { return static_cast<int>(slots_.size()); }
  int64_t slot_capacity(int slot) const { return slots_.at(static_cast<size_t>(slot)).capacity; }
  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return file_bytes_; }
  const IoFile& file() const { return file_; }

 private:
  friend class SwapWork;
  struct Slot {
    int64_t footer_offset = 0;  // the footer block; the payload follows it
    int64_t capacity = 0;
    bool busy = false;          // a transfer is in flight
    std::string last_write_error;  // the last swap-out of this slot failed ("": it did not)
  };
  void CheckFileIntact(int slot, const char* what) const;
  void Complete(SwapWork& w);
  std::string Where(int slot) const;

  SwapDir& dir_;
  IoEngine& engine_;
  std::string path_;
  IoFile file_;
  uint64_t file_id_ = 0;
  int64_t file_bytes_ = 0;
  std::vector<Slot> slots_;
  PinnedBuffer footers_;  // one aligned footer block per slot
};

}  // namespace zerorun::offload
