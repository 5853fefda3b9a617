// TensorBoardMonitor: DeepSpeed's `tensorboard` monitor. Writes one TensorBoard event file,
// <output_path>/<job_name>/events.out.tfevents.<unix seconds>.<host>.<pid>, as TFRecords: each record
// is a little-endian uint64 length, its masked CRC-32C, the payload (a serialized tensorflow.Event,
// runtime/observe/tensorboard_event.proto, encoded with libprotobuf), and the payload's masked CRC-32C.
// The first record carries file_version "brain.Event:2"; then one Event per (step, batch of scalars),
// a Summary with one simple_value per tag. The x-axis is global_samples (as DeepSpeed's). An empty
// output_path means "./tensorboard" (DeepSpeed writes under the launch directory). Only rank 0 writes
// (the engine decides).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "zerorun/runtime/monitor.h"

namespace zerorun::runtime {

class TensorBoardMonitor final : public Monitor {
 public:
  // Creates the directory and the file. Throws IoError naming the path on failure.
  TensorBoardMonitor(const std::string& output_path, const std::string& job_name);
  ~TensorBoardMonitor() override;
  // Groups `events` by step: one Event record per distinct step, in first-appearance order.
  void Write(const std::vector<MonitorEvent>& events) override;
  void Flush() override;
  const std::string& path() const { return path_; }

 private:
  void WriteRecord(const std::string& payload);

  std::string path_;
  FILE* file_ = nullptr;
};

// One TFRecord (length, masked CRC of the length, payload, masked CRC of the payload) as bytes.
std::string TfRecordFrame(const std::string& payload);

}  // namespace zerorun::runtime
