// Token datasets: in-memory, byte text, llm.c shards (mmap); see dataset.h.
#include "zerorun/runtime/data/dataset.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"

namespace zerorun::data {

int64_t TokenDataset::total_tokens() const {
  int64_t n = 0;
  for (int64_t d = 0; d < num_documents(); ++d) n += document_size(d);
  return n;
}

namespace {

// A read-only private mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) ZR_THROW(DataError, "{}", ErrnoMessage(Format("data file {}: cannot open", path), errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      ZR_THROW(DataError, "{}", ErrnoMessage(Format("data file {}: cannot stat", path), e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      ZR_THROW(DataError, "data file {}: not a regular file", path);
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        ZR_THROW(DataError, "{}", ErrnoMessage(Format("data file {}: cannot mmap {} bytes", path, size_), e));
      }
      data_ = static_cast<const uint8_t*>(p);
      ::madvise(p, size_, MADV_WILLNEED);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string Describe(const std::vector<std::string>& paths) {
  if (paths.empty()) return "(no files)";
  return paths.size() == 1 ? paths[0] : Format("{} (+{} more)", paths[0], paths.size() - 1);
}

class InMemoryDataset final : public TokenDataset {
 public:
  InMemoryDataset(std::vector<std::vector<int32_t>> docs, std::string desc) : docs_(std::move(docs)), desc_(std::move(desc)) {}
  int64_t num_documents() const override { return static_cast<int64_t>(docs_.size()); }
  int64_t document_size(int64_t d) const override { return static_cast<int64_t>(docs_.at(static_cast<size_t>(d)).size()); }
  void Read(int64_t d, int64_t begin, int64_t count, int32_t* out) const override {
    const auto& doc = docs_.at(static_cast<size_t>(d));
    ZR_CHECK(begin >= 0 && count >= 0 && begin + count <= static_cast<int64_t>(doc.size()), "read past document end");
    std::copy_n(doc.data() + begin, count, out);
  }
  std::string description() const override { return desc_; }

 private:
  std::vector<std::vector<int32_t>> docs_;
  std::string desc_;
};

class ByteTextDataset final : public TokenDataset {
 public:
  ByteTextDataset(const std::vector<std::string>& paths, int64_t vocab) : desc_(Describe(paths)) {
    if (paths.empty()) ZR_THROW(DataError, "byte-level text: no files given");
    for (const std::string& p : paths) {
      auto f = std::make_unique<MappedFile>(p);
      if (vocab < 256) {
        for (size_t i = 0; i < f->size(); ++i) {
          if (f->data()[i] >= vocab) {
            ZR_THROW(DataError, "byte-level text {}: byte {} at offset {} is not below the model's vocab size {} "
                     "(byte-level data needs vocab_size >= 256)", p, static_cast<int>(f->data()[i]), i, vocab);
          }
        }
      }
      files_.push_back(std::move(f));
    }
  }
  int64_t num_documents() const override { return static_cast<int64_t>(files_.size()); }
  int64_t document_size(int64_t d) const override { return static_cast<int64_t>(files_.at(static_cast<size_t>(d))->size()); }
  void Read(int64_t d, int64_t begin, int64_t count, int32_t* out) const override {
    const MappedFile& f = *files_.at(static_cast<size_t>(d));
    ZR_CHECK(begin >= 0 && count >= 0 && static_cast<size_t>(begin + count) <= f.size(), "read past file end");
    for (int64_t i = 0; i < count; ++i) out[i] = f.data()[begin + i];
  }
  std::string description() const override { return desc_; }

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::string desc_;
};

class ShardDataset final : public TokenDataset {
 public:
  ShardDataset(const std::vector<std::string>& paths, int64_t vocab) : desc_(Describe(paths)) {
    if (paths.empty()) ZR_THROW(DataError, "token shards: no files given");
    if (vocab <= 0) ZR_THROW(InvalidArgument, "token shards: vocab size must be positive, got {}", vocab);
    for (const std::string& p : paths) {
      auto f = std::make_unique<MappedFile>(p);
      const size_t header_bytes = kShardHeaderInts * sizeof(int32_t);
      if (f->size() < header_bytes) {
        ZR_THROW(DataError, "token shard {}: truncated header ({} bytes, need {}): not an llm.c .bin shard", p,
                 f->size(), header_bytes);
      }
      int32_t header[3];
      std::memcpy(header, f->data(), sizeof(header));
      if (header[0] != kShardMagic) {
        ZR_THROW(DataError, "token shard {}: bad magic {} (expected {}): not an llm.c .bin token shard", p, header[0],
                 kShardMagic);
      }
      if (header[1] != kShardVersion) {
        ZR_THROW(DataError, "token shard {}: unsupported version {} (expected {})", p, header[1], kShardVersion);
      }
      if (header[2] < 0) ZR_THROW(DataError, "token shard {}: negative token count {}", p, header[2]);
      const size_t expect = header_bytes + static_cast<size_t>(header[2]) * sizeof(uint16_t);
      if (f->size() != expect) {
        ZR_THROW(DataError, "token shard {}: header says {} tokens ({} bytes) but the file has {} bytes{}", p, header[2],
                 expect, f->size(), f->size() < expect ? " (truncated)" : " (trailing bytes)");
      }
      const uint16_t* tok = reinterpret_cast<const uint16_t*>(f->data() + header_bytes);
      for (int64_t i = 0; i < header[2]; ++i) {
        if (tok[i] >= vocab) {
          ZR_THROW(DataError, "token shard {}: token id {} at position {} is >= the model's vocab size {}", p, tok[i], i,
                   vocab);
        }
      }
      sizes_.push_back(header[2]);
      files_.push_back(std::move(f));
    }
  }
  int64_t num_documents() const override { return static_cast<int64_t>(files_.size()); }
  int64_t document_size(int64_t d) const override { return sizes_.at(static_cast<size_t>(d)); }
  void Read(int64_t d, int64_t begin, int64_t count, int32_t* out) const override {
    ZR_CHECK(begin >= 0 && count >= 0 && begin + count <= sizes_.at(static_cast<size_t>(d)), "read past shard end");
    const uint8_t* base = files_[static_cast<size_t>(d)]->data() + kShardHeaderInts * sizeof(int32_t);
    const uint16_t* tok = reinterpret_cast<const uint16_t*>(base);
    for (int64_t i = 0; i < count; ++i) out[i] = tok[begin + i];
  }
  std::string description() const override { return desc_; }

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<int64_t> sizes_;
  std::string desc_;
};

}  // namespace

std::unique_ptr<TokenDataset> MakeInMemoryDataset(std::vector<std::vector<int32_t>> documents, std::string description) {
  return std::make_unique<InMemoryDataset>(std::move(documents), std::move(description));
}

std::unique_ptr<TokenDataset> OpenByteTextFiles(const std::vector<std::string>& paths, int64_t vocab_size) {
  return std::make_unique<ByteTextDataset>(paths, vocab_size);
}

std::unique_ptr<TokenDataset> OpenTokenShards(const std::vector<std::string>& paths, int64_t vocab_size) {
  return std::make_unique<ShardDataset>(paths, vocab_size);
}

void WriteTokenShard(const std::string& path, const std::vector<int32_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) ZR_THROW(DataError, "token shard {}: too many tokens ({})", path, tokens.size());
  std::vector<int32_t> header(kShardHeaderInts, 0);
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::vector<uint16_t> body(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535) {
      ZR_THROW(DataError, "token shard {}: token {} at position {} does not fit uint16", path, tokens[i], i);
    }
    body[i] = static_cast<uint16_t>(tokens[i]);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) ZR_THROW(IoError, "{}", ErrnoMessage(Format("token shard {}: cannot create", path), errno));
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
  out.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size() * 2));
  out.close();
  if (!out) ZR_THROW(IoError, "token shard {}: write failed", path);
}

std::vector<std::string> ExpandDataPaths(const std::string& p) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    for (const auto& e : fs::directory_iterator(p, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".bin") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    if (out.empty()) ZR_THROW(DataError, "data directory {}: no .bin token shards in it", p);
    return out;
  }
  if (p.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    int rc = ::glob(p.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    std::sort(out.begin(), out.end());
    if (out.empty()) ZR_THROW(DataError, "data pattern {}: no files match", p);
    return out;
  }
  return {p};
}

}  // namespace zerorun::data
