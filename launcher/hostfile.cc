// Hostfile parsing and include/exclude filtering (DeepSpeed reference §7.2).
#include "zerorun/launcher/hostfile.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "zerorun/core/error.h"
#include "zerorun/launcher/options.h"
#include "zerorun/launcher/text.h"

namespace zerorun::launcher {
namespace {

// Parses a non-negative decimal int; false on anything else (sign, spaces, overflow).
bool ParseNonNegative(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = std::stoi(s);
  return true;
}

// A line or name cut to a readable length for an error message.
std::string Shorten(const std::string& s) { return s.size() <= 120 ? s : s.substr(0, 100) + "... (" + std::to_string(s.size()) + " bytes)"; }

const HostSlots* FindHost(const Resources& pool, const std::string& host) {
  for (const HostSlots& h : pool) {
    if (h.host == host) return &h;
  }
  return nullptr;
}

// One NODE_SPEC resolved against the pool: the host and the slots it names (all when none are listed).
struct Spec {
  std::string host;
  std::vector<int> slots;
  bool whole_host;
};

std::vector<Spec> ParseSpecs(const Resources& pool, const std::string& filter, const char* what) {
  std::vector<Spec> specs;
  for (const std::string& node_spec : Split(filter, '@')) {
    Spec spec;
    size_t colon = node_spec.find(':');
    spec.host = Trim(node_spec.substr(0, colon));
    spec.whole_host = colon == std::string::npos;
    if (spec.host.empty()) {
      ZR_THROW(InvalidArgument, "--{} '{}': empty host name in node spec '{}' (syntax: host[:slot[,slot...]][@host...])",
               what, filter, node_spec);
    }
    const HostSlots* known = FindHost(pool, spec.host);
    if (known == nullptr) {
      ZR_THROW(InvalidArgument, "--{} '{}': host '{}' is not in the hostfile", what, filter, spec.host);
    }
    if (spec.whole_host) {
      spec.slots = known->slots;
    } else {
      for (const std::string& item : Split(node_spec.substr(colon + 1), ',')) {
        int slot = -1;
        if (!ParseNonNegative(Trim(item), &slot)) {
          ZR_THROW(InvalidArgument, "--{} '{}': slot '{}' on host '{}' is not a non-negative integer", what,
                   filter, item, spec.host);
        }
        if (std::find(known->slots.begin(), known->slots.end(), slot) == known->slots.end()) {
          ZR_THROW(InvalidArgument, "--{} '{}': host '{}' has no slot {} (its slots: {})", what, filter,
                   spec.host, slot, FormatRangeList(known->slots));
        }
        spec.slots.push_back(slot);
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace

Resources ParseHostfile(const std::string& text, const std::string& origin) {
  Resources out;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    // `^(\S+)\s+slots=(\d+)`, a prefix match: text after the number is tolerated.
    size_t host_end = 0;
    while (host_end < line.size() && !std::isspace(static_cast<unsigned char>(line[host_end]))) ++host_end;
    size_t pos = host_end;
    while (pos < line.size() && std::isspace(static_cast<unsigned char>(line[pos]))) ++pos;
    size_t digits = pos + 6;
    size_t digits_end = digits;
    while (digits_end < line.size() && std::isdigit(static_cast<unsigned char>(line[digits_end]))) ++digits_end;
    bool ok = pos > host_end && line.compare(pos, 6, "slots=") == 0 && digits_end > digits;
    if (!ok) {
      ZR_THROW(InvalidArgument, "{}:{}: bad hostfile line '{}': expected 'HOSTNAME slots=N'", origin, line_no,
               Shorten(line));
    }
    std::string host = line.substr(0, host_end);
    std::string number = line.substr(digits, digits_end - digits);
    number.erase(0, std::min(number.find_first_not_of('0'), number.size() - 1));  // "007" is 7
    int slots = -1;
    if (!ParseNonNegative(number, &slots) || slots > kMaxSlotsPerHost) {
      ZR_THROW(InvalidArgument, "{}:{}: host '{}' slots={}: at most {} slots per host", origin, line_no,
               Shorten(host), Shorten(number), kMaxSlotsPerHost);
    }
    if (FindHost(out, host) != nullptr) {
      ZR_THROW(InvalidArgument, "{}:{}: host '{}' is listed twice", origin, line_no, host);
    }
    HostSlots entry{host, {}};
    for (int s = 0; s < slots; ++s) entry.slots.push_back(s);
    out.push_back(std::move(entry));
  }
  if (out.empty()) {
    ZR_THROW(InvalidArgument, "{}: hostfile has no entries (expected lines 'HOSTNAME slots=N')", origin);
  }
  return out;
}

Resources LoadHostfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZR_THROW(IoError, "{}", ErrnoMessage("cannot read hostfile " + path, errno));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxHostfileBytes) {
      ZR_THROW(InvalidArgument, "{}: hostfile is larger than {} MiB: not a hostfile?", path, kMaxHostfileBytes >> 20);
    }
  }
  if (in.bad()) ZR_THROW(IoError, "{}", ErrnoMessage("cannot read hostfile " + path, errno));
  return ParseHostfile(text, path);
}

Resources FilterResources(const Resources& pool, const std::string& include, const std::string& exclude) {
  if (!include.empty() && !exclude.empty()) {
    ZR_THROW(InvalidArgument, "--include '{}' and --exclude '{}' are mutually exclusive: give only one",
             include, exclude);
  }
  if (include.empty() && exclude.empty()) return pool;

  std::map<std::string, std::set<int>> chosen;
  if (!include.empty()) {
    for (const Spec& spec : ParseSpecs(pool, include, "include")) chosen[spec.host].insert(spec.slots.begin(), spec.slots.end());
  } else {
    for (const HostSlots& h : pool) chosen[h.host].insert(h.slots.begin(), h.slots.end());
    for (const Spec& spec : ParseSpecs(pool, exclude, "exclude")) {
      for (int s : spec.slots) chosen[spec.host].erase(s);
    }
  }
  Resources out;
  for (const HostSlots& h : pool) {  // hostfile order
    auto it = chosen.find(h.host);
    if (it == chosen.end() || it->second.empty()) continue;
    out.push_back({h.host, std::vector<int>(it->second.begin(), it->second.end())});
  }
  return out;
}

std::vector<int> ParseRangeList(const std::string& text) {
  std::vector<int> out;
  for (const std::string& raw : Split(text, ',')) {
    std::string item = Trim(raw);
    size_t dash = item.find('-');
    int lo = -1;
    int hi = -1;
    bool ok = dash == std::string::npos ? ParseNonNegative(item, &lo) && (hi = lo, true)
                                        : ParseNonNegative(item.substr(0, dash), &lo) &&
                                              ParseNonNegative(item.substr(dash + 1), &hi);
    if (!ok) ZR_THROW(InvalidArgument, "core list '{}': '{}' is not N or N-M", text, item);
    if (hi < lo) ZR_THROW(InvalidArgument, "core list '{}': range '{}' descends", text, item);
    if (hi - lo >= (1 << 16)) ZR_THROW(InvalidArgument, "core list '{}': range '{}' is implausibly large", text, item);
    if (!out.empty() && lo <= out.back()) {
      ZR_THROW(InvalidArgument, "core list '{}': '{}' overlaps or comes before {} (items must ascend)", text,
               item, out.back());
    }
    for (int v = lo; v <= hi; ++v) out.push_back(v);
  }
  return out;
}

std::string FormatRangeList(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ids[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace zerorun::launcher
