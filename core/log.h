// Leveled logging. Every line is "[HH:MM:SS.mmm] [rank R] [LEVEL] message" (the rank part appears
// once SetLogRank has been called). The level comes from ZERORUN_LOG_LEVEL (trace, debug, info,
// warning, error, off; default info). ZERORUN_LOG_DIR routes each rank's lines to DIR/rank<R>.log
// (set before SetLogRank), or SetLogFile does it explicitly. Thread-safe; a line is written whole.
//
// With the `local` backend several ranks are threads of one process, so the rank tag is per thread
// (SetThreadLogRank) with the process-wide one as fallback.
#pragma once

#include <string>

#include "zerorun/core/format.h"

namespace zerorun {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kOff = 5 };

LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
// Parses "trace|debug|info|warning|warn|error|off" (case-insensitive); throws InvalidArgument.
LogLevel ParseLogLevel(const std::string& name);
bool LogEnabled(LogLevel level);

// The rank shown in every line (-1: none). If ZERORUN_LOG_DIR is set, also opens DIR/rank<R>.log.
void SetLogRank(int rank);
// Overrides the rank tag for the calling thread only (-1: use the process-wide rank).
void SetThreadLogRank(int rank);
// Appends lines to `path` instead of stderr ("" restores stderr). Throws IoError if it cannot open.
void SetLogFile(const std::string& path);

void LogLine(LogLevel level, const std::string& message);

}  // namespace zerorun

#define ZR_LOG_AT(level, ...)                                             \
  do {                                                                    \
    if (::zerorun::LogEnabled(level)) {                                   \
      ::zerorun::LogLine(level, ::zerorun::Format(__VA_ARGS__));          \
    }                                                                     \
  } while (0)
#define ZR_TRACE(...) ZR_LOG_AT(::zerorun::LogLevel::kTrace, __VA_ARGS__)
#define ZR_DEBUG(...) ZR_LOG_AT(::zerorun::LogLevel::kDebug, __VA_ARGS__)
#define ZR_INFO(...) ZR_LOG_AT(::zerorun::LogLevel::kInfo, __VA_ARGS__)
#define ZR_WARN(...) ZR_LOG_AT(::zerorun::LogLevel::kWarning, __VA_ARGS__)
#define ZR_ERROR(...) ZR_LOG_AT(::zerorun::LogLevel::kError, __VA_ARGS__)
