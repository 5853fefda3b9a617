// Implementation of the placeholder scanner behind Format() and of FormatBytes().
#include "zerorun/core/format.h"

#include <cmath>
#include <cstdio>

namespace zerorun {
namespace detail {

std::string_view FormatUntilPlaceholder(std::ostream& os, std::string_view fmt, bool* found) {
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      os << '{';
      i += 2;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      os << '}';
      i += 2;
    } else if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      *found = true;
      return fmt.substr(i + 2);
    } else {
      os << c;
      ++i;
    }
  }
  *found = false;
  return {};
}

}  // namespace detail

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  }
  return buf;
}

}  // namespace zerorun
