// CsvMonitor: append-only CSV files, one per event name, header on creation.
#include "zerorun/runtime/monitor.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "zerorun/core/error.h"

namespace zerorun::runtime {

CsvMonitor::CsvMonitor(const std::string& output_path, const std::string& job_name) {
  std::filesystem::path base = output_path.empty() ? std::filesystem::path("csv_monitor") : std::filesystem::path(output_path);
  dir_ = (base / job_name).string();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) ZR_THROW(IoError, "csv_monitor: cannot create directory {}: {}", dir_, ec.message());
}

CsvMonitor::~CsvMonitor() {
  for (auto& [name, f] : files_) std::fclose(f);
}

std::string CsvMonitor::PathFor(const std::string& event_name) const {
  std::string file = event_name;
  for (char& c : file) {
    if (c == '/' || c == ' ') c = '_';
  }
  return dir_ + "/" + file + ".csv";
}

void CsvMonitor::Write(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    FILE*& f = files_[e.name];
    if (f == nullptr) {
      std::string path = PathFor(e.name);
      bool fresh = !std::filesystem::exists(path);
      f = std::fopen(path.c_str(), "a");
      if (f == nullptr) throw IoError(ErrnoMessage("csv_monitor: cannot open " + path, errno));
      if (fresh) {
        size_t slash = e.name.rfind('/');
        std::fprintf(f, "step,%s\n", slash == std::string::npos ? e.name.c_str() : e.name.c_str() + slash + 1);
      }
    }
    if (std::fprintf(f, "%lld,%.9g\n", static_cast<long long>(e.step), e.value) < 0) {
      throw IoError(ErrnoMessage("csv_monitor: cannot write " + PathFor(e.name), errno));
    }
  }
}

void CsvMonitor::Flush() {
  for (auto& [name, f] : files_) {
    if (std::fflush(f) != 0) throw IoError(ErrnoMessage("csv_monitor: cannot flush " + PathFor(name), errno));
  }
}

}  // namespace zerorun::runtime
