// TensorBoard event files: tensorflow.Event records (libprotobuf) in TFRecord framing.
#include "zerorun/runtime/observe/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tensorboard_event.pb.h"
#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/runtime/observe/crc32c.h"

namespace zerorun::runtime {

namespace {
double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}
}  // namespace

std::string TfRecordFrame(const std::string& payload) {
  std::string out(12, '\0');
  const uint64_t len = payload.size();
  std::memcpy(out.data(), &len, 8);  // little-endian hosts only (crc32c.cc asserts it)
  const uint32_t len_crc = MaskCrc32c(Crc32c(out.data(), 8));
  std::memcpy(out.data() + 8, &len_crc, 4);
  out += payload;
  const uint32_t data_crc = MaskCrc32c(Crc32c(payload.data(), payload.size()));
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

TensorBoardMonitor::TensorBoardMonitor(const std::string& output_path, const std::string& job_name) {
  std::filesystem::path base = output_path.empty() ? std::filesystem::path("tensorboard") : std::filesystem::path(output_path);
  std::filesystem::path dir = base / job_name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) ZR_THROW(IoError, "tensorboard: cannot create directory {}: {}", dir.string(), ec.message());
  const auto secs = static_cast<long long>(WallTime());
  path_ = (dir / Format("events.out.tfevents.{}.{}.{}", secs, HostName(), ::getpid())).string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw IoError(ErrnoMessage("tensorboard: cannot create " + path_, errno));
  tb::Event first;
  first.set_wall_time(WallTime());
  first.set_file_version("brain.Event:2");
  WriteRecord(first.SerializeAsString());
  Flush();
}

TensorBoardMonitor::~TensorBoardMonitor() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardMonitor::WriteRecord(const std::string& payload) {
  const std::string frame = TfRecordFrame(payload);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size()) {
    throw IoError(ErrnoMessage("tensorboard: cannot write " + path_, errno));
  }
}

void TensorBoardMonitor::Write(const std::vector<MonitorEvent>& events) {
  std::vector<bool> done(events.size(), false);
  const double now = WallTime();
  for (size_t i = 0; i < events.size(); ++i) {
    if (done[i]) continue;
    tb::Event ev;
    ev.set_wall_time(now);
    ev.set_step(events[i].step);
    tb::Summary* summary = ev.mutable_summary();
    for (size_t j = i; j < events.size(); ++j) {
      if (done[j] || events[j].step != events[i].step) continue;
      tb::SummaryValue* v = summary->add_value();
      v->set_tag(events[j].name);
      v->set_simple_value(static_cast<float>(events[j].value));
      done[j] = true;
    }
    WriteRecord(ev.SerializeAsString());
  }
}

void TensorBoardMonitor::Flush() {
  if (std::fflush(file_) != 0) throw IoError(ErrnoMessage("tensorboard: cannot flush " + path_, errno));
}

}  // namespace zerorun::runtime
