// libFuzzer target for the launcher's text inputs: hostfiles, include/exclude filters, core lists,
// --world_info and .zerorun_env files. Arbitrary bytes must parse or throw zerorun::Error — never a
// crash, a hang, an unbounded allocation or a sanitizer report — and what parses must be sane: at most
// kMaxSlotsPerHost slots per host, slot ids 0..N-1 ascending, hosts unique, a filter's result a subset
// of its pool. Input: byte 0 picks the parser (bits 0-1) and include vs exclude (bit 2); for the
// hostfile parser the text after the first '\n\n' is the filter.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "zerorun/core/error.h"
#include "zerorun/launcher/hostfile.h"
#include "zerorun/launcher/options.h"
#include "zerorun/launcher/text.h"
#include "zerorun/launcher/world.h"

namespace zl = zerorun::launcher;

namespace {

void CheckResources(const zl::Resources& r) {
  std::set<std::string> hosts;
  for (const zl::HostSlots& h : r) {
    if (!hosts.insert(h.host).second) __builtin_trap();                 // a host twice
    if (h.slots.size() > static_cast<size_t>(zl::kMaxSlotsPerHost)) __builtin_trap();
    for (size_t i = 1; i < h.slots.size(); ++i) {
      if (h.slots[i] <= h.slots[i - 1]) __builtin_trap();               // sorted, unique
    }
  }
}

void FuzzHostfile(const std::string& text, bool include) {
  const size_t split = text.find("\n\n");
  const std::string file = text.substr(0, split);
  const std::string filter = split == std::string::npos ? "" : text.substr(split + 2);
  zl::Resources pool;
  try {
    pool = zl::ParseHostfile(file, "fuzz");
  } catch (const zerorun::Error&) {
    return;
  }
  CheckResources(pool);
  for (const zl::HostSlots& h : pool) {
    for (size_t i = 0; i < h.slots.size(); ++i) {
      if (h.slots[i] != static_cast<int>(i)) __builtin_trap();  // a hostfile's slots are 0..N-1
    }
  }
  try {
    zl::Resources out = zl::FilterResources(pool, include ? filter : "", include ? "" : filter);
    CheckResources(out);
    for (const zl::HostSlots& h : out) {  // a subset of the pool, in its order
      const zl::HostSlots* from = nullptr;
      for (const zl::HostSlots& p : pool) {
        if (p.host == h.host) from = &p;
      }
      if (!from) __builtin_trap();
      for (int s : h.slots) {
        if (std::find(from->slots.begin(), from->slots.end(), s) == from->slots.end()) __builtin_trap();
      }
    }
  } catch (const zerorun::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (sel & 3) {
    case 0:
      FuzzHostfile(text, (sel & 4) != 0);
      break;
    case 1:
      try {
        std::vector<int> ids = zl::ParseRangeList(text);
        for (size_t i = 1; i < ids.size(); ++i) {
          if (ids[i] <= ids[i - 1]) __builtin_trap();
        }
        (void)zl::FormatRangeList(ids);
      } catch (const zerorun::Error&) {
      }
      break;
    case 2:
      try {
        zl::World w = zl::DecodeWorldInfo(text);
        int64_t ranks = 0;
        for (const zl::Node& n : w.nodes) {
          if (n.first_rank != ranks) __builtin_trap();
          ranks += static_cast<int64_t>(n.slots.size());
        }
        if (ranks != w.world_size || ranks > zl::kMaxWorldSize) __builtin_trap();
        if (zl::DecodeWorldInfo(zl::EncodeWorldInfo(w)).world_size != w.world_size) __builtin_trap();
      } catch (const zerorun::Error&) {
      }
      break;
    case 3:
      try {
        for (const auto& [k, v] : zl::ParseEnvFile(text, "fuzz")) {
          if (k.empty() || k.find('=') != std::string::npos) __builtin_trap();
        }
      } catch (const zerorun::Error&) {
      }
      break;
  }
  return 0;
}
