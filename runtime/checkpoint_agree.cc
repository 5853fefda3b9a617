// AgreeOnErrors / BroadcastString over the communicator's all-reduce, all-gather and broadcast.
#include "zerorun/runtime/checkpoint_agree.h"

#include <algorithm>

#include "zerorun/core/format.h"

namespace zerorun::runtime {

namespace {
constexpr size_t kMaxErrorBytes = 4096;
}

std::vector<std::string> AgreeOnErrors(comm::Communicator& comm, const std::string& mine) {
  const int n = comm.size();
  std::vector<std::string> out(static_cast<size_t>(n));
  int64_t failed = mine.empty() ? 0 : 1;
  comm.AllReduce(&failed, 1, DType::kI64, comm::ReduceOp::kMax).Wait();
  if (failed == 0) return out;
  const std::string text = mine.substr(0, kMaxErrorBytes);
  int64_t len = static_cast<int64_t>(text.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  comm.AllGather(&len, lens.data(), 1, DType::kI64).Wait();
  const int64_t width = std::max<int64_t>(1, *std::max_element(lens.begin(), lens.end()));
  std::string send(static_cast<size_t>(width), '\0');
  std::copy(text.begin(), text.end(), send.begin());
  std::string recv(static_cast<size_t>(width) * static_cast<size_t>(n), '\0');
  comm.AllGather(send.data(), recv.data(), static_cast<size_t>(width), DType::kU8).Wait();
  for (int r = 0; r < n; ++r) {
    out[static_cast<size_t>(r)] = recv.substr(static_cast<size_t>(r) * static_cast<size_t>(width),
                                              static_cast<size_t>(std::clamp<int64_t>(lens[static_cast<size_t>(r)], 0, width)));
  }
  return out;
}

std::string JoinRankErrors(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    if (!out.empty()) out += "; ";
    out += Format("rank {}: {}", r, errors[r]);
  }
  return out;
}

std::string BroadcastString(comm::Communicator& comm, const std::string& value, int root) {
  if (comm.size() == 1) return value;
  int64_t len = comm.rank() == root ? static_cast<int64_t>(value.size()) : 0;
  comm.Broadcast(&len, 1, DType::kI64, root).Wait();
  if (len == 0) return "";
  std::string text = comm.rank() == root ? value : std::string(static_cast<size_t>(len), '\0');
  comm.Broadcast(text.data(), static_cast<size_t>(len), DType::kU8, root).Wait();
  return text;
}

}  // namespace zerorun::runtime
