// Log sink: level from the environment, a rank tag per process or per thread, one mutex per line.
#include "zerorun/core/log.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string_view>

#include "zerorun/core/error.h"

namespace zerorun {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("ZERORUN_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return LogLevel::kInfo;
  try {
    return ParseLogLevel(env);
  } catch (const Error&) {
    std::fprintf(stderr, "zerorun: ignoring ZERORUN_LOG_LEVEL='%s' (use trace|debug|info|warning|error|off)\n", env);
    return LogLevel::kInfo;
  }
}

std::atomic<int>& LevelRef() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

std::atomic<int> g_rank{-1};
thread_local int t_rank = -1;

struct Sink {
  std::mutex mu;
  FILE* file = nullptr;  // nullptr: stderr
};
Sink& GetSink() {
  static Sink sink;
  return sink;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "OFF";
  }
  return "?";
}

}  // namespace

LogLevel GetLogLevel() { return static_cast<LogLevel>(LevelRef().load(std::memory_order_relaxed)); }
void SetLogLevel(LogLevel level) { LevelRef().store(static_cast<int>(level), std::memory_order_relaxed); }
bool LogEnabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= LevelRef().load(std::memory_order_relaxed);
}

LogLevel ParseLogLevel(const std::string& name) {
  std::string s;
  for (char c : name) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s == "trace") return LogLevel::kTrace;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warning" || s == "warn") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  if (s == "off" || s == "none") return LogLevel::kOff;
  ZR_THROW(InvalidArgument, "unknown log level '{}' (use trace, debug, info, warning, error or off)", name);
}

void SetLogRank(int rank) {
  g_rank.store(rank);
  const char* dir = std::getenv("ZERORUN_LOG_DIR");
  if (dir != nullptr && *dir != '\0' && rank >= 0) {
    SetLogFile(Format("{}/rank{}.log", dir, rank));
  }
}

void SetThreadLogRank(int rank) { t_rank = rank; }

void SetLogFile(const std::string& path) {
  Sink& sink = GetSink();
  std::lock_guard<std::mutex> lock(sink.mu);
  if (sink.file != nullptr) {
    std::fclose(sink.file);
    sink.file = nullptr;
  }
  if (path.empty()) return;
  sink.file = std::fopen(path.c_str(), "a");
  if (sink.file == nullptr) throw IoError(ErrnoMessage("cannot open log file " + path, errno));
  setvbuf(sink.file, nullptr, _IOLBF, 0);
}

void LogLine(LogLevel level, const std::string& message) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  int millis = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  int rank = t_rank >= 0 ? t_rank : g_rank.load(std::memory_order_relaxed);
  char prefix[96];
  if (rank >= 0) {
    std::snprintf(prefix, sizeof prefix, "[%02d:%02d:%02d.%03d] [rank %d] [%s] ", tm.tm_hour, tm.tm_min,
                  tm.tm_sec, millis, rank, LevelName(level));
  } else {
    std::snprintf(prefix, sizeof prefix, "[%02d:%02d:%02d.%03d] [%s] ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                  millis, LevelName(level));
  }
  std::string line = prefix + message + "\n";
  Sink& sink = GetSink();
  std::lock_guard<std::mutex> lock(sink.mu);
  FILE* out = sink.file != nullptr ? sink.file : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace zerorun
