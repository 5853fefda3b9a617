// Tracer: Chrome trace-event JSON, written by hand (flat records; no JSON library below runtime/).
#include "zerorun/core/trace.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"

namespace zerorun {

namespace {
thread_local Tracer* t_tracer = nullptr;
thread_local int t_track = 0;
}  // namespace

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Tracer::Tracer(int pid, std::string process_name, size_t max_events)
    : pid_(pid), process_name_(std::move(process_name)), max_events_(max_events), tracks_{"main"} {}

int Tracer::Track(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < tracks_.size(); ++i) {
    if (tracks_[i] == name) return static_cast<int>(i);
  }
  tracks_.push_back(name);
  return static_cast<int>(tracks_.size() - 1);
}

void Tracer::Complete(const std::string& name, const char* category, double start_s, double end_s, int track,
                      const std::string& args_json) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back({name, category, start_s * 1e6, (end_s > start_s ? end_s - start_s : 0) * 1e6, track, args_json});
}

size_t Tracer::num_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string Tracer::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"producer\": \"zerorun\", \"dropped_events\": " +
                    std::to_string(dropped_) + "},\n\"traceEvents\": [\n";
  const std::string pid = std::to_string(pid_);
  bool first = true;
  auto meta = [&](const char* what, size_t tid, const std::string& args) {
    out += std::string(first ? "" : ",\n") + "{\"name\": \"" + what +
           "\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + std::to_string(tid) + ", \"args\": {" + args + "}}";
    first = false;
  };
  meta("process_name", 0, "\"name\": " + JsonQuote(process_name_));
  meta("process_sort_index", 0, "\"sort_index\": " + pid);
  for (size_t i = 0; i < tracks_.size(); ++i) meta("thread_name", i, "\"name\": " + JsonQuote(tracks_[i]));
  char num[64];
  for (const Event& e : events_) {
    out += ",\n{\"name\": " + JsonQuote(e.name) + ", \"cat\": " + JsonQuote(e.category) + ", \"ph\": \"X\", \"ts\": ";
    std::snprintf(num, sizeof num, "%.3f", e.start_us);
    out += num;
    out += ", \"dur\": ";
    std::snprintf(num, sizeof num, "%.3f", e.dur_us);
    out += num;
    out += ", \"pid\": " + pid + ", \"tid\": " + std::to_string(e.track);
    if (!e.args.empty()) out += ", \"args\": {" + e.args + "}";
    out += "}";
  }
  return out + "\n]}\n";
}

void Tracer::WriteFile(const std::string& path) const {
  const std::string json = ToJson();
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw IoError(ErrnoMessage("trace: cannot create " + tmp, errno));
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw IoError(ErrnoMessage("trace: cannot write " + tmp, ok ? errno : err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw IoError(ErrnoMessage("trace: cannot rename " + tmp + " to " + path, e));
  }
}

Tracer* Tracer::Current() { return t_tracer; }
int Tracer::CurrentTrack() { return t_track; }

ScopedTrace::ScopedTrace(Tracer* tracer, int track) : previous_(t_tracer), previous_track_(t_track) {
  t_tracer = tracer;
  t_track = track;
}

ScopedTrace::~ScopedTrace() {
  t_tracer = previous_;
  t_track = previous_track_;
}

TraceSpan::TraceSpan(const char* category, std::string name, std::string args_json)
    : tracer_(t_tracer), track_(t_track), category_(category) {
  if (tracer_ == nullptr) return;
  name_ = std::move(name);
  args_ = std::move(args_json);
  start_ = NowSeconds();
}

TraceSpan::~TraceSpan() {
  if (tracer_ != nullptr) tracer_->Complete(name_, category_, start_, NowSeconds(), track_, args_);
}

}  // namespace zerorun
