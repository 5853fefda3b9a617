// libFuzzer target for llm.c token shards (runtime/data/dataset.cc): arbitrary file contents must
// open or throw DataError — never a crash, an out-of-bounds read or a sanitizer report — and a shard
// that opens must hold exactly the header's token count, every id below the vocab size. Input:
// byte 0 picks the vocab size (1..256 × 256), the rest is the file, given to the loader as a memfd.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/runtime/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t vocab = (static_cast<int64_t>(data[0]) + 1) * 256;
  int fd = ::memfd_create("zr_fuzz_shard", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t off = 1;
  while (off < size) {
    ssize_t n = ::write(fd, data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    auto ds = zerorun::data::OpenTokenShards({path}, vocab);
    if (ds->num_documents() != 1) __builtin_trap();
    int32_t count = 0;
    if (size - 1 >= 12) std::memcpy(&count, data + 1 + 8, 4);
    if (ds->document_size(0) != count) __builtin_trap();
    std::vector<int32_t> tokens(static_cast<size_t>(count));
    if (count > 0) ds->Read(0, 0, count, tokens.data());
    for (int32_t t : tokens) {
      if (t < 0 || t >= vocab) __builtin_trap();
    }
  } catch (const zerorun::DataError&) {
  } catch (const zerorun::IoError&) {
  }
  ::close(fd);
  return 0;
}
