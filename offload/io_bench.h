// The measurement behind `zerorun-bench io` (DeepSpeed's ds_io / ds_nvme_tune): sequential passes over
// one file with an I/O engine, from and into registered pinned buffers, timed as GB/s (1e9 bytes/s).
// A pass keeps two transfers of transfer_bytes in flight (so the engine's queue never drains between
// them), each split by the engine into block_size requests over its workers as a swap-out or swap-in
// of that size would be.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zerorun/offload/io_engine.h"
#include "zerorun/offload/pinned_pool.h"

namespace zerorun::offload {

struct IoBenchOptions {
  std::string path;                       // a directory (a scratch file is made there, removed after) or a file
  int64_t file_bytes = int64_t{1} << 30;  // bytes one pass moves; a multiple of kDirectIoAlignment
  int64_t transfer_bytes = int64_t{64} << 20;  // bytes per Submit (two in flight); a multiple of kDirectIoAlignment
  bool direct = true;                     // O_DIRECT (false: through the page cache; writes then measure memory)
  bool register_buffers = true;           // register the pinned buffers with io_uring (fio's fixedbufs)
  bool huge_pages = true;                 // buffers on transparent huge pages (fio's malloc'ed buffers are not)
  bool keep_file = false;                 // keep a scratch file
  FileEnv* env = nullptr;                 // nullptr: FileEnv::Default()
};

// One engine configuration's result.
struct IoBenchResult {
  IoEngineOptions engine;
  std::string engine_name;          // the engine that ran ("io_uring", or "pread" after a fallback)
  std::vector<double> write_gbps;   // per pass
  std::vector<double> read_gbps;
  IoStats stats;                    // of the last pass
};

class IoBench {
 public:
  // Opens (or creates, allocates and fills once, untimed) the file; allocates the buffers. Throws
  // IoError naming the path (a directory without O_DIRECT while `direct` says so, no space, ...).
  explicit IoBench(const IoBenchOptions& options);
  ~IoBench();
  IoBench(const IoBench&) = delete;
  IoBench& operator=(const IoBench&) = delete;

  // One timed pass over [0, file_bytes) with an engine made from `engine`; returns GB/s.
  // `stats` (optional) receives the engine's statistics, `name` the engine's name.
  double Pass(IoOp op, const IoEngineOptions& engine, IoStats* stats = nullptr, std::string* name = nullptr);
  // `reps` passes of each direction, interleaved (write, read, write, read, ...).
  IoBenchResult Run(const IoEngineOptions& engine, int reps, bool write, bool read);

  const std::string& file_path() const { return file_path_; }
  const std::string& fs_type() const { return fs_type_; }
  const IoBenchOptions& options() const { return options_; }

 private:
  IoBenchOptions options_;
  FileEnv& env_;
  std::string file_path_;
  std::string fs_type_;
  bool scratch_ = false;
  IoFile file_;
  PinnedPool buffers_;
};

// The sweep's choice: the configuration with the least time to write and read the same bytes once
// (1/write + 1/read, medians), which is what a swapper that swaps each sub-group out and in pays.
// REQUIRES: results non-empty, each with write and read passes.
const IoBenchResult& BestForSwapping(const std::vector<IoBenchResult>& results);
double Median(std::vector<double> v);

}  // namespace zerorun::offload
