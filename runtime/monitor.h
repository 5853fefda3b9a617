// Training monitors. CsvMonitor writes DeepSpeed's `csv_monitor` layout: one CSV per event under
// <output_path>/<job_name>/, named after the event with '/' and ' ' replaced by '_'
// (Train/Samples/lr → Train_Samples_lr.csv), a header row "step,<last part of the name>", then one
// "step,value" row per event. The x-axis is global_samples, as DeepSpeed's engine uses. Only rank 0
// writes (the engine decides).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zerorun::runtime {

struct MonitorEvent {
  std::string name;  // "Train/Samples/lr"
  double value = 0;
  int64_t step = 0;  // global_samples
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  virtual void Write(const std::vector<MonitorEvent>& events) = 0;
  virtual void Flush() {}
};

class CsvMonitor final : public Monitor {
 public:
  // Creates the directory (and parents). Throws IoError naming the path on failure.
  // An empty output_path means "./csv_monitor".
  CsvMonitor(const std::string& output_path, const std::string& job_name);
  ~CsvMonitor() override;
  void Write(const std::vector<MonitorEvent>& events) override;
  void Flush() override;
  const std::string& directory() const { return dir_; }
  // The file an event goes to.
  std::string PathFor(const std::string& event_name) const;

 private:
  std::string dir_;
  std::map<std::string, FILE*> files_;
};

}  // namespace zerorun::runtime
