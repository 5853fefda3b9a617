// Small text helpers of the config loader: enum names, the shared enum tables, number formatting,
// JSON paths and the edit distance behind "did you mean" suggestions.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime {

const char* ZeroStageName(ZeroStage s) {
  static const char* kNames[] = {"0", "1", "2", "3"};
  return kNames[static_cast<int>(s) & 3];
}
const char* OffloadDeviceName(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone: return "none";
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
  }
  return "?";
}
const char* OptimizerKindName(OptimizerKind t) {
  switch (t) {
    case OptimizerKind::kNone: return "none";
    case OptimizerKind::kAdam: return "Adam";
    case OptimizerKind::kAdamW: return "AdamW";
    case OptimizerKind::kLamb: return "Lamb";
    case OptimizerKind::kLion: return "Lion";
    case OptimizerKind::kSgd: return "SGD";
    case OptimizerKind::kAdagrad: return "Adagrad";
  }
  return "?";
}
const char* SchedulerKindName(SchedulerKind t) {
  switch (t) {
    case SchedulerKind::kNone: return "none";
    case SchedulerKind::kWarmupLR: return "WarmupLR";
    case SchedulerKind::kWarmupDecayLR: return "WarmupDecayLR";
    case SchedulerKind::kWarmupCosineLR: return "WarmupCosineLR";
    case SchedulerKind::kOneCycle: return "OneCycle";
    case SchedulerKind::kLRRangeTest: return "LRRangeTest";
  }
  return "?";
}

double OptimizerConfig::Lr() const {
  switch (type) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: return adam.lr;
    case OptimizerKind::kLamb: return lamb.lr;
    case OptimizerKind::kLion: return lion.lr;
    case OptimizerKind::kSgd: return sgd.lr;
    case OptimizerKind::kAdagrad: return adagrad.lr;
    case OptimizerKind::kNone: break;
  }
  return 0.0;
}

namespace config_detail {

std::string EnumSpec::Choices() const {
  std::string out;
  int last = -1;
  for (const auto& [name, value] : names) {
    if (value == last) continue;  // only the written name of each value
    last = value;
    if (!out.empty()) out += ", ";
    out += '"';
    out += name;
    out += '"';
  }
  return out;
}

const EnumSpec& DTypeEnum() {
  static const EnumSpec spec{{{"fp16", int(DType::kF16)},
                              {"float16", int(DType::kF16)},
                              {"half", int(DType::kF16)},
                              {"torch.float16", int(DType::kF16)},
                              {"bf16", int(DType::kBF16)},
                              {"bfloat16", int(DType::kBF16)},
                              {"torch.bfloat16", int(DType::kBF16)},
                              {"fp32", int(DType::kF32)},
                              {"float32", int(DType::kF32)},
                              {"float", int(DType::kF32)},
                              {"torch.float32", int(DType::kF32)}},
                             true,
                             {"int8", "torch.int8"}};
  return spec;
}
const EnumSpec& OffloadDeviceEnum() {
  static const EnumSpec spec{
      {{"none", int(OffloadDevice::kNone)}, {"cpu", int(OffloadDevice::kCpu)}, {"nvme", int(OffloadDevice::kNvme)}},
      true,
      {}};
  return spec;
}
const EnumSpec& WarmupTypeEnum() {
  static const EnumSpec spec{{{"log", int(WarmupType::kLog)}, {"linear", int(WarmupType::kLinear)}}, true, {}};
  return spec;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions and adjacent transpositions.
  const size_t n = a.size(), m = b.size();
  std::vector<size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::string SuggestKey(std::string_view typo, const std::vector<std::string>& candidates) {
  if (typo.size() > 200) return "";
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(typo, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A typo: up to a third of the longer name (at least 2 edits); or one name contains the other
  // ("prefetch_bucket" for "stage3_prefetch_bucket_size").
  const size_t limit = std::max<size_t>(2, std::max(typo.size(), best.size()) / 3);
  if (!best.empty() && best_d <= limit) return best;
  if (typo.size() >= 4) {
    for (const std::string& c : candidates) {
      if (c.find(typo) != std::string::npos) return c;
    }
  }
  return "";
}

std::string FormatDouble(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, r.ptr);
  return s;
}

std::string RangeText(const Field& f, bool integer) {
  const bool lo = std::isfinite(f.min), hi = std::isfinite(f.max);
  auto num = [&](double d) {
    const bool fits = d > -9.2e18 && d < 9.2e18;
    return integer && fits ? std::to_string(static_cast<int64_t>(d)) : FormatDouble(d);
  };
  if (lo && hi) return Format(" in {}{}, {}]", f.min_exclusive ? "(" : "[", num(f.min), num(f.max));
  if (lo) return Format(" {} {}", f.min_exclusive ? ">" : ">=", num(f.min));
  if (hi) return Format(" <= {}", num(f.max));
  return "";
}

std::string JoinPath(const std::string& base, const std::string& key) {
  if (base.empty()) return key;
  if (!key.empty() && key[0] == '[') return base + key;
  return base + "." + key;
}

}  // namespace config_detail
}  // namespace zerorun::runtime
