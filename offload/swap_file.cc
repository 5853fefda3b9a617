// SwapDir (the preflight of nvme_path) and SwapFile (slots of checksummed, length-verified records).
#include "zerorun/offload/swap_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"

namespace zerorun::offload {
namespace {

constexpr char kFileMagic[8] = {'Z', 'R', 'S', 'W', 'A', 'P', 'F', '1'};
constexpr char kRecordMagic[8] = {'Z', 'R', 'S', 'W', 'R', 'E', 'C', '1'};
constexpr uint32_t kVersion = 1;

// The footer block of a record (the rest of the block is zero).
struct RecordFooter {
  char magic[8];
  uint32_t version;
  uint32_t slot;
  uint64_t nbytes;        // payload bytes covered by the checksum
  uint64_t generation;    // the writer's tag (e.g. the optimizer step)
  uint64_t payload_hash;  // XXH3-64 of the payload's nbytes
  uint64_t file_id;       // the file this record was written to
  uint64_t footer_hash;   // XXH3-64 of the fields above
};
static_assert(sizeof(RecordFooter) == 56);

// The file header block.
struct FileHeader {
  char magic[8];
  uint32_t version;
  int32_t rank;
  uint64_t file_id;
  uint64_t num_slots;
  char job_id[64];
  char name[64];
  uint64_t header_hash;  // XXH3-64 of the fields above
};

bool ValidJobId(const std::string& s) {
  if (s.empty() || s.size() > 63 || s == "." || s == "..") return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

std::string Hex(uint64_t v, int digits) {
  static const char* kHex = "0123456789abcdef";
  std::string s(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kHex[v & 15];
  return s;
}

uint64_t RandomId() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ uint64_t{rd()} ^ static_cast<uint64_t>(::getpid());
}

}  // namespace

std::string DefaultSwapJobId() {
  if (const char* token = std::getenv("ZERORUN_JOB_TOKEN"); token != nullptr && *token != '\0') {
    return "job-" + Hex(XXH3_64bits(token, std::strlen(token)), 12);
  }
  return Format("pid{}", ::getpid());
}

// ---- SwapDir ---------------------------------------------------------------------------------------

SwapDir::SwapDir(const SwapDirOptions& options)
    : options_(options), env_(options.env ? *options.env : FileEnv::Default()) {
  try {
    Preflight();
  } catch (...) {
    RemoveCreated();  // a failed preflight leaves nothing behind
    throw;
  }
}

void SwapDir::Preflight() {
  const std::string& key = options_.config_key;
  const std::string& base = options_.nvme_path;
  if (options_.job_id.empty()) options_.job_id = DefaultSwapJobId();
  if (!ValidJobId(options_.job_id)) {
    ZR_THROW(InvalidArgument, "swap job id '{}' must be 1-63 characters of [A-Za-z0-9._-]", options_.job_id);
  }
  if (base.empty()) ZR_THROW(IoError, "{}: empty; set it to a directory on a local NVMe (ext4 or xfs) file system", key);

  struct stat st {};
  if (const int r = env_.Stat(base, &st); r < 0) {
    if (r == -ENOENT) {
      ZR_THROW(IoError, "{}: '{}' does not exist; create the directory or point {} at an existing one", key, base, key);
    }
    throw IoError(ErrnoMessage(Format("{}: cannot stat '{}'", key, base), -r));
  }
  if (!S_ISDIR(st.st_mode)) ZR_THROW(IoError, "{}: '{}' is not a directory", key, base);
  if (const int r = env_.Access(base, W_OK | X_OK); r < 0) {
    throw IoError(ErrnoMessage(Format("{}: '{}' is not writable by this process (uid {})", key, base, ::getuid()), -r));
  }
  fs_type_ = FileSystemName(env_, base);

  job_dir_ = base + (base.back() == '/' ? "" : "/") + "zerorun-" + options_.job_id;
  rank_dir_ = job_dir_ + Format("/rank{}", options_.rank);
  auto make_dir = [&](const std::string& d, bool* created) {
    const int r = env_.Mkdir(d, 0700);
    if (r == 0) {
      *created = true;
    } else if (r != -EEXIST) {
      throw IoError(ErrnoMessage(Format("{}: cannot create the swap directory '{}' ({})", key, d, fs_type_), -r));
    }
  };
  make_dir(job_dir_, &created_job_dir_);
  make_dir(rank_dir_, &created_rank_dir_);

  // One process per (job, rank): a second one fails here instead of overwriting the first's files.
  const std::string lock_path = rank_dir_ + "/lock";
  lock_ = IoFile::Open(lock_path, {.write = true, .create = true, .direct = false}, env_);
  if (const int r = env_.LockExclusive(lock_.fd()); r < 0) {
    char text[32] = {};
    env_.Pread(lock_.fd(), text, sizeof text - 1, 0);
    lock_.Close();
    std::string pid = text;
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (r == -EWOULDBLOCK) {
      ZR_THROW(IoError, "{}: the swap directory '{}' is in use by another process (pid {}) with the same job id '{}' "
               "and rank {}: two jobs sharing {} need different job ids", key, rank_dir_, pid, options_.job_id,
               options_.rank, key);
    }
    throw IoError(ErrnoMessage(Format("{}: cannot lock '{}'", key, lock_path), -r));
  }
  const std::string me = Format("{}\n", ::getpid());
  env_.Ftruncate(lock_.fd(), 0);
  env_.Pwrite(lock_.fd(), me.data(), static_cast<int64_t>(me.size()), 0);  // informational only

  // O_DIRECT: open a probe file with it and move one aligned block both ways.
  const std::string probe = rank_dir_ + "/direct-io-probe";
  int fd = env_.Open(probe, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  std::string why_not;
  if (fd >= 0) {
    PinnedBuffer block(kDirectIoAlignment);
    std::memset(block.data(), 0x5a, kDirectIoAlignment);
    const int64_t w = env_.Pwrite(fd, block.data(), kDirectIoAlignment, 0);
    const int64_t rd = w == kDirectIoAlignment ? env_.Pread(fd, block.data(), kDirectIoAlignment, 0) : w;
    if (w != kDirectIoAlignment || rd != kDirectIoAlignment) {
      const int64_t bad = w != kDirectIoAlignment ? w : rd;
      why_not = bad < 0 ? ErrnoMessage("an aligned O_DIRECT transfer failed", static_cast<int>(-bad))
                        : "an aligned O_DIRECT transfer was short";
    }
    env_.Close(fd);
    direct_io_ = why_not.empty();
  } else if (fd == -EINVAL) {
    why_not = "the file system does not support O_DIRECT";
  } else {
    const int err = -fd;
    throw IoError(ErrnoMessage(Format("{}: cannot create a file in '{}' ({})", key, rank_dir_, fs_type_), err));
  }
  env_.Unlink(probe);
  if (!direct_io_) {
    if (options_.require_direct_io) {
      ZR_THROW(IoError, "{}: '{}' is on {} and {}: point {} at a local NVMe file system (ext4, xfs)", key, base,
               fs_type_, why_not, key);
    }
    ZR_WARN("{}: '{}' is on {} and {}: swap files use buffered I/O through the page cache instead (slower, and the "
            "cache takes host memory that offload meant to free)", key, base, fs_type_, why_not);
  }

  if (fs_type_ == "tmpfs" || fs_type_ == "ramfs") {
    ZR_WARN("{}: '{}' is on {}, which is memory: swap files there take the host memory offload is meant to free",
            key, base, fs_type_);
  }

  // Free space for the swap files.
  const int64_t free_bytes = FreeBytes(env_, rank_dir_);
  if (options_.required_bytes > 0 && free_bytes >= 0 && free_bytes < options_.required_bytes) {
    ZR_THROW(IoError, "{}: '{}' ({}) has {} free but rank {}'s swap files need {}", key, base, fs_type_,
             FormatBytes(static_cast<double>(free_bytes)), options_.rank,
             FormatBytes(static_cast<double>(options_.required_bytes)));
  }
  ZR_DEBUG("swap directory {} on {} ({} free, {})", rank_dir_, fs_type_, FormatBytes(static_cast<double>(free_bytes)),
           direct_io_ ? "O_DIRECT" : "buffered");
}

SwapDir::~SwapDir() {
  if (!options_.keep_files) RemoveCreated();
}

void SwapDir::RemoveCreated() {
  if (lock_.is_open()) {
    env_.Unlink(rank_dir_ + "/lock");  // only while holding the lock: never another process's
    lock_.Close();
  }
  if (created_rank_dir_) env_.Rmdir(rank_dir_);
  if (created_job_dir_ || created_rank_dir_) env_.Rmdir(job_dir_);  // fails while other ranks' directories remain
}

// ---- SwapWork --------------------------------------------------------------------------------------

SwapWork::~SwapWork() {
  if (file_ == nullptr) return;
  try {
    Wait();
  } catch (const Error& e) {
    ZR_ERROR("a swap transfer failed and nobody waited for it: {}", e.what());
  }
}

SwapWork::SwapWork(SwapWork&& o) noexcept
    : file_(std::exchange(o.file_, nullptr)),
      slot_(o.slot_),
      op_(o.op_),
      buf_(o.buf_),
      nbytes_(o.nbytes_),
      generation_(o.generation_),
      payload_(std::move(o.payload_)),
      footer_(std::move(o.footer_)) {}

SwapWork& SwapWork::operator=(SwapWork&& o) noexcept {
  if (this != &o) {
    SwapWork old(std::move(*this));  // completes (and logs) what this handle held
    file_ = std::exchange(o.file_, nullptr);
    slot_ = o.slot_;
    op_ = o.op_;
    buf_ = o.buf_;
    nbytes_ = o.nbytes_;
    generation_ = o.generation_;
    payload_ = std::move(o.payload_);
    footer_ = std::move(o.footer_);
  }
  return *this;
}

void SwapWork::Wait() {
  if (file_ == nullptr) return;
  SwapFile* f = std::exchange(file_, nullptr);
  f->Complete(*this);
}

// ---- SwapFile --------------------------------------------------------------------------------------

SwapFile::SwapFile(SwapDir& dir, const std::string& name, const std::vector<int64_t>& slot_bytes, IoEngine& engine)
    : dir_(dir), engine_(engine), path_(dir.path() + "/" + name + ".swp"), file_id_(RandomId()) {
  if (!ValidJobId(name)) ZR_THROW(InvalidArgument, "swap file name '{}' must be 1-63 characters of [A-Za-z0-9._-]", name);
  FileEnv& env = dir_.env();
  int64_t offset = kDirectIoAlignment;  // the header block
  for (int64_t bytes : slot_bytes) {
    if (bytes < 0) ZR_THROW(InvalidArgument, "swap file {}: negative slot size {}", path_, bytes);
    Slot s;
    s.footer_offset = offset;
    s.capacity = AlignedBytes(bytes);
    offset += kDirectIoAlignment + s.capacity;
    slots_.push_back(s);
  }
  file_bytes_ = offset;

  env.Unlink(path_);  // a stale file of a crashed run with the same job id: never reused
  file_ = IoFile::Open(path_, {.write = true, .create = true, .direct = dir_.direct_io()}, env);
  if (const int r = env.Fallocate(file_.fd(), 0, file_bytes_); r < 0) {
    if (r != -EOPNOTSUPP) {
      std::string msg = ErrnoMessage(Format("rank {}: cannot allocate {} for the swap file {}", dir_.options().rank,
                                            FormatBytes(static_cast<double>(file_bytes_)), path_),
                                     -r);
      if (r == -ENOSPC || r == -EDQUOT) {
        msg += Format(" ({} has {} free)", dir_.fs_type(), FormatBytes(static_cast<double>(FreeBytes(env, dir_.path()))));
      }
      file_.Close();
      env.Unlink(path_);
      throw IoError(msg);
    }
    // No fallocate on this file system: a sparse file; blocks are allocated as records are written.
    if (const int t = env.Ftruncate(file_.fd(), file_bytes_); t < 0) {
      throw IoError(ErrnoMessage(Format("rank {}: cannot size the swap file {}", dir_.options().rank, path_), -t));
    }
  }

  footers_ = PinnedBuffer(kDirectIoAlignment * std::max<int64_t>(1, num_slots()));
  PinnedBuffer header_block(kDirectIoAlignment);
  auto* h = header_block.as<FileHeader>();
  std::memcpy(h->magic, kFileMagic, sizeof h->magic);
  h->version = kVersion;
  h->rank = dir_.options().rank;
  h->file_id = file_id_;
  h->num_slots = slots_.size();
  std::strncpy(h->job_id, dir_.options().job_id.c_str(), sizeof h->job_id - 1);
  std::strncpy(h->name, name.c_str(), sizeof h->name - 1);
  h->header_hash = XXH3_64bits(h, offsetof(FileHeader, header_hash));
  engine_.Write(file_, 0, header_block.data(), kDirectIoAlignment);
}

SwapFile::~SwapFile() {
  for (const Slot& s : slots_) ZR_CHECK(!s.busy, "swap file {} destroyed with a transfer in flight", path_);
  file_.Close();
  if (!dir_.options().keep_files) dir_.env().Unlink(path_);
}

std::string SwapFile::Where(int slot) const {
  return Format("rank {}: swap file {} slot {}", dir_.options().rank, path_, slot);
}

void SwapFile::CheckFileIntact(int slot, const char* what) const {
  struct stat st {};
  FileEnv& env = dir_.env();
  if (const int r = env.Fstat(file_.fd(), &st); r < 0) {
    throw IoError(ErrnoMessage(Format("{}: {}: fstat failed", Where(slot), what), -r));
  }
  if (st.st_nlink == 0) {
    ZR_THROW(IoError, "{}: {}: the swap file was deleted or replaced while in use (its records are lost when this "
             "process ends)", Where(slot), what);
  }
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const int64_t end = s.footer_offset + kDirectIoAlignment + s.capacity;
  if (static_cast<int64_t>(st.st_size) < end) {
    ZR_THROW(IoError, "{}: {}: the swap file is {} bytes but the slot ends at byte {}: it was truncated while in use",
             Where(slot), what, static_cast<int64_t>(st.st_size), end);
  }
  struct stat by_path {};
  if (env.Stat(path_, &by_path) < 0 || by_path.st_ino != st.st_ino || by_path.st_dev != st.st_dev) {
    ZR_THROW(IoError, "{}: {}: the path no longer leads to the swap file (it was moved or replaced while in use)",
             Where(slot), what);
  }
}

SwapWork SwapFile::SubmitWrite(int slot, const void* buf, int64_t nbytes, uint64_t generation) {
  ZR_CHECK(slot >= 0 && slot < num_slots(), "swap file {}: slot {} of {}", path_, slot, num_slots());
  Slot& s = slots_[static_cast<size_t>(slot)];
  ZR_CHECK(!s.busy, "{}: a second transfer while one is in flight", Where(slot));
  if (nbytes < 0 || AlignedBytes(nbytes) > s.capacity) {
    ZR_THROW(InvalidArgument, "{}: a record of {} bytes does not fit the slot's {} bytes", Where(slot), nbytes, s.capacity);
  }
  CheckFileIntact(slot, "swap-out");
  auto* f = reinterpret_cast<RecordFooter*>(footers_.as<char>() + int64_t{slot} * kDirectIoAlignment);
  std::memset(f, 0, kDirectIoAlignment);
  std::memcpy(f->magic, kRecordMagic, sizeof f->magic);
  f->version = kVersion;
  f->slot = static_cast<uint32_t>(slot);
  f->nbytes = static_cast<uint64_t>(nbytes);
  f->generation = generation;
  f->file_id = file_id_;

  SwapWork w;
  w.slot_ = slot;
  w.op_ = IoOp::kWrite;
  w.buf_ = const_cast<void*>(buf);
  w.nbytes_ = nbytes;
  w.generation_ = generation;
  // The payload goes out first and is hashed while it is written (both only read the buffer); then the
  // footer with its checksum. A crash or failure between them leaves a footer whose checksum does not
  // match the payload (or the slot's previous footer, of an older generation), which a read reports.
  w.payload_ = engine_.SubmitWrite(file_, s.footer_offset + kDirectIoAlignment, buf, AlignedBytes(nbytes));
  f->payload_hash = XXH3_64bits(buf, static_cast<size_t>(nbytes));
  f->footer_hash = XXH3_64bits(f, offsetof(RecordFooter, footer_hash));
  w.footer_ = engine_.SubmitWrite(file_, s.footer_offset, f, kDirectIoAlignment);
  w.file_ = this;
  s.busy = true;
  return w;
}

SwapWork SwapFile::SubmitRead(int slot, void* buf, int64_t nbytes, uint64_t expected_generation) {
  ZR_CHECK(slot >= 0 && slot < num_slots(), "swap file {}: slot {} of {}", path_, slot, num_slots());
  Slot& s = slots_[static_cast<size_t>(slot)];
  ZR_CHECK(!s.busy, "{}: a second transfer while one is in flight", Where(slot));
  if (nbytes < 0 || AlignedBytes(nbytes) > s.capacity) {
    ZR_THROW(IoError, "{}: asked for a record of {} bytes but the slot holds at most {}", Where(slot), nbytes, s.capacity);
  }
  CheckFileIntact(slot, "swap-in");
  SwapWork w;
  w.slot_ = slot;
  w.op_ = IoOp::kRead;
  w.buf_ = buf;
  w.nbytes_ = nbytes;
  w.generation_ = expected_generation;
  w.payload_ = engine_.SubmitRead(file_, s.footer_offset + kDirectIoAlignment, buf, AlignedBytes(nbytes));
  w.footer_ = engine_.SubmitRead(file_, s.footer_offset, footers_.as<char>() + int64_t{slot} * kDirectIoAlignment,
                                 kDirectIoAlignment);
  w.file_ = this;
  s.busy = true;
  return w;
}

void SwapFile::Complete(SwapWork& w) {
  Slot& s = slots_[static_cast<size_t>(w.slot_)];
  std::string error;
  for (IoWork* io : {&w.payload_, &w.footer_}) {
    try {
      io->Wait();
    } catch (const IoError& e) {
      if (error.empty()) error = e.what();
    }
  }
  s.busy = false;
  if (w.op_ == IoOp::kWrite) {
    s.last_write_error = error;
    if (!error.empty()) ZR_THROW(IoError, "{}: swap-out of {} bytes failed: {}", Where(w.slot_), w.nbytes_, error);
    return;
  }
  if (!error.empty()) ZR_THROW(IoError, "{}: swap-in of {} bytes failed: {}", Where(w.slot_), w.nbytes_, error);

  // Verify the record.
  const auto* f = reinterpret_cast<const RecordFooter*>(footers_.as<char>() + int64_t{w.slot_} * kDirectIoAlignment);
  const std::string after = s.last_write_error.empty() ? std::string()
                                                       : Format(" (the last swap-out of this slot failed: {})",
                                                                s.last_write_error);
  const bool empty = std::all_of(reinterpret_cast<const char*>(f), reinterpret_cast<const char*>(f + 1),
                                 [](char c) { return c == 0; });
  if (empty) ZR_THROW(IoError, "{}: swap-in: the slot holds no record (never written){}", Where(w.slot_), after);
  if (std::memcmp(f->magic, kRecordMagic, sizeof f->magic) != 0 || f->version != kVersion ||
      f->footer_hash != XXH3_64bits(f, offsetof(RecordFooter, footer_hash))) {
    ZR_THROW(IoError, "{}: swap-in: the record's footer is corrupt{}", Where(w.slot_), after);
  }
  if (f->file_id != file_id_ || f->slot != static_cast<uint32_t>(w.slot_)) {
    ZR_THROW(IoError, "{}: swap-in: the record belongs to {} (slot {}), not to this file and slot{}", Where(w.slot_),
             f->file_id != file_id_ ? "another swap file" : "this file", f->slot, after);
  }
  if (f->nbytes != static_cast<uint64_t>(w.nbytes_)) {
    ZR_THROW(IoError, "{}: swap-in: the record holds {} bytes but {} were asked for{}", Where(w.slot_), f->nbytes,
             w.nbytes_, after);
  }
  if (w.generation_ != kAnyGeneration && f->generation != w.generation_) {
    ZR_THROW(IoError, "{}: swap-in: the record is of generation {} but {} was expected (a stale record){}",
             Where(w.slot_), f->generation, w.generation_, after);
  }
  if (XXH3_64bits(w.buf_, static_cast<size_t>(w.nbytes_)) != f->payload_hash) {
    ZR_THROW(IoError, "{}: swap-in: the payload's checksum does not match its footer: the record is corrupt{}",
             Where(w.slot_), after);
  }
}

}  // namespace zerorun::offload
