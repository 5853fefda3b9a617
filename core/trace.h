// Tracer: a timeline in Chrome's trace-event format (JSON; opens in Perfetto and chrome://tracing).
// One Tracer per rank: pid = the rank, one track (tid) per named thread role ("main", "comm world").
// Spans are complete events ("ph": "X") with microsecond timestamps on the monotonic clock
// (NowSeconds() · 1e6), so the files of ranks of one machine line up when merged.
//
// Who records: the thread that installs a ScopedTrace (the engine's, around Forward/Backward/Step)
// makes the tracer current on that thread, and TraceSpan records into it — from any layer (nn modules
// through the engine's observer, zero/'s optimizer sub-groups) at no cost while none is current. Other
// threads (the communicator's executor) record through Complete() with their own track.
// Thread-safe. The tracer keeps at most `max_events` events (then drops, and says so in the file).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace zerorun {

class Tracer {
 public:
  explicit Tracer(int pid, std::string process_name, size_t max_events = 2000000);
  // The track named `name` (created on first use; "main" is track 0).
  int Track(const std::string& name);
  // A span [start_s, end_s) on `track`; `args_json` is the body of the "args" object ("\"bytes\": 4096")
  // or empty.
  void Complete(const std::string& name, const char* category, double start_s, double end_s, int track,
                const std::string& args_json = "");
  // The trace as one JSON object: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
  std::string ToJson() const;
  // Writes ToJson() to `path` (temp file + rename). Throws IoError naming the path.
  void WriteFile(const std::string& path) const;
  size_t num_events() const;
  int pid() const { return pid_; }

  // The tracer current on this thread (nullptr: none) and its track there.
  static Tracer* Current();
  static int CurrentTrack();

 private:
  struct Event {
    std::string name;
    const char* category;
    double start_us;
    double dur_us;
    int track;
    std::string args;
  };
  int pid_;
  std::string process_name_;
  size_t max_events_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::string> tracks_;
  size_t dropped_ = 0;
};

// Makes `tracer` current on this thread (with `track`) for the scope's lifetime; nullptr is allowed
// (nothing is traced). Nests: the previous one is restored.
class ScopedTrace {
 public:
  ScopedTrace(Tracer* tracer, int track = 0);
  ~ScopedTrace();
  ScopedTrace(const ScopedTrace&) = delete;
  ScopedTrace& operator=(const ScopedTrace&) = delete;

 private:
  Tracer* previous_;
  int previous_track_;
};

// A span from construction to destruction in the thread's current tracer (none: nothing, and the name
// is not even built when given as a callable-free const char*).
class TraceSpan {
 public:
  TraceSpan(const char* category, std::string name, std::string args_json = "");
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  // True while a tracer is current on this thread (to skip building names and args).
  static bool Active() { return Tracer::Current() != nullptr; }

 private:
  Tracer* tracer_;
  int track_ = 0;
  const char* category_;
  std::string name_;
  std::string args_;
  double start_ = 0;
};

// `s` as a JSON string literal (quotes and escapes).
std::string JsonQuote(const std::string& s);

}  // namespace zerorun
