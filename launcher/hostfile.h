// Hostfiles and include/exclude filters, with DeepSpeed's syntax and errors (reference §7.2).
//
// A hostfile line is `HOST slots=N` (anything after the number is ignored, '#' starts a comment
// line). A filter is `NODE_SPEC[@NODE_SPEC...]` with `NODE_SPEC = host[:slot[,slot...]]`. The result
// keeps the hostfile's host order; slot lists are sorted and de-duplicated.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zerorun::launcher {

// One host and the slot ids (GPU indices, or CPU rank slots) selected on it.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
  bool operator==(const HostSlots&) const = default;
};
// Hosts in hostfile order. A vector, not a map: order decides node ranks.
using Resources = std::vector<HostSlots>;

// Hostfiles larger than this are refused (a real one lists hosts in a few KiB).
inline constexpr size_t kMaxHostfileBytes = 16u << 20;

// Parses hostfile text. `origin` names the file in errors ("<origin>:<line>: ...").
// Throws InvalidArgument on: a malformed line, more than kMaxSlotsPerHost slots, a host listed
// twice, no entries at all.
Resources ParseHostfile(const std::string& text, const std::string& origin);
// Reads and parses `path`. Throws IoError if it cannot be read.
Resources LoadHostfile(const std::string& path);

// Applies `include` or `exclude` (at most one may be non-empty; both empty returns `pool`).
// Throws InvalidArgument naming the spec for an unknown host or slot, bad syntax, or both given.
// Excluding all slots of a host removes the host.
Resources FilterResources(const Resources& pool, const std::string& include, const std::string& exclude);

// "0,2-4,6" -> {0,2,3,4,6}. Ranges ascend and do not overlap (each item is greater than the last).
// Throws InvalidArgument naming the item otherwise.
std::vector<int> ParseRangeList(const std::string& text);

// Formats slot lists compactly for messages: {0,1,2,5} -> "0-2,5".
std::string FormatRangeList(const std::vector<int>& ids);

}  // namespace zerorun::launcher
