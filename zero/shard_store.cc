// The shard-store layout's helpers.
#include "zerorun/zero/shard_store.h"

#include <algorithm>

#include "zerorun/core/format.h"

namespace zerorun::zero {

int64_t ShardStoreLayout::LargestUnitNumel() const {
  int64_t m = 0;
  for (int64_t n : unit_numels) m = std::max(m, n);
  return m;
}

int64_t ShardStoreLayout::TotalNumel() const {
  int64_t t = 0;
  for (int64_t n : unit_numels) t += n;
  return t;
}

std::string ShardStoreLayout::UnitName(int u) const {
  if (u >= 0 && static_cast<size_t>(u) < unit_names.size() && !unit_names[static_cast<size_t>(u)].empty()) {
    return Format("parameter '{}'", unit_names[static_cast<size_t>(u)]);
  }
  return Format("unit {}", u);
}

}  // namespace zerorun::zero
