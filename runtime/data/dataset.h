// Token datasets: a dataset is a list of documents (token sequences) that training windows never
// cross — one per file for token shards. Three sources:
//   - in memory (the synthetic Markov corpus, tests);
//   - byte-level text files: every byte is a token (vocab 256);
//   - token shards in llm.c's .bin layout: a header of 256 int32 (magic 20240520, version 1, token
//     count, rest 0) followed by that many uint16 tokens; memory-mapped.
// Opening validates everything up front and throws DataError naming the file and what is wrong:
// missing file, bad magic or version, a size that disagrees with the header, a token id >= the model's
// vocab size (with its position).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zerorun::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_documents() const = 0;
  virtual int64_t document_size(int64_t doc) const = 0;  // tokens
  // Copies tokens [begin, begin + count) of document `doc` as int32. REQUIRES: in range.
  virtual void Read(int64_t doc, int64_t begin, int64_t count, int32_t* out) const = 0;
  // For messages: "synthetic markov corpus", "/path/a.bin (+2 more)".
  virtual std::string description() const = 0;
  int64_t total_tokens() const;
};

// Documents held in memory.
std::unique_ptr<TokenDataset> MakeInMemoryDataset(std::vector<std::vector<int32_t>> documents,
                                                  std::string description = "in-memory tokens");

// Byte-level text files, one document per file (memory-mapped). vocab_size must be >= 256 unless every
// byte present is below it (checked).
std::unique_ptr<TokenDataset> OpenByteTextFiles(const std::vector<std::string>& paths, int64_t vocab_size);

// llm.c token shards, one document per file (memory-mapped, validated, token ids checked against
// vocab_size).
std::unique_ptr<TokenDataset> OpenTokenShards(const std::vector<std::string>& paths, int64_t vocab_size);

// Writes `tokens` as an llm.c shard (tests, tools). Throws DataError for ids > 65535, IoError on write errors.
void WriteTokenShard(const std::string& path, const std::vector<int32_t>& tokens);

// Expands a path that may name a directory (its *.bin files, sorted) or a glob pattern (sorted
// matches); a plain path is returned as is. Throws DataError if nothing matches.
std::vector<std::string> ExpandDataPaths(const std::string& path_or_pattern);

}  // namespace zerorun::data
