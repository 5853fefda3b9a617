// Format("x={} of {}", a, b): a tiny formatter for messages (GCC 12 has no <format>). Each "{}" is
// replaced by the next argument written with operator<<; "{{" and "}}" are literal braces. Surplus
// arguments are appended, missing ones leave "{}" in place, so a wrong message never throws.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace zerorun {

namespace detail {
// Writes `fmt` up to (not including) the next "{}" into `os`; returns the rest after "{}", or
// an empty view with *found=false when there is none.
std::string_view FormatUntilPlaceholder(std::ostream& os, std::string_view fmt, bool* found);
}  // namespace detail

template <typename... Args>
std::string Format(std::string_view fmt, const Args&... args) {
  std::ostringstream os;
  auto one = [&](const auto& arg) {
    bool found = false;
    fmt = detail::FormatUntilPlaceholder(os, fmt, &found);
    if (!found) os << ' ';
    os << arg;
  };
  (one(args), ...);
  bool found = false;
  detail::FormatUntilPlaceholder(os, fmt, &found);
  if (found) os << "{}";  // a placeholder without an argument stays visible
  return os.str();
}

inline std::string Format(std::string_view fmt) {
  std::ostringstream os;
  bool found = false;
  std::string_view rest = detail::FormatUntilPlaceholder(os, fmt, &found);
  while (found) {
    os << "{}";
    rest = detail::FormatUntilPlaceholder(os, rest, &found);
  }
  return os.str();
}

// Human-readable byte count: 0 B, 512 B, 1.50 KiB, 3.00 MiB, ...
std::string FormatBytes(double bytes);

}  // namespace zerorun
