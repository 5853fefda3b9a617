// Exporting a training checkpoint as one consolidated model — DeepSpeed's zero_to_fp32 without the
// terabyte of RAM: every tensor is assembled from the chunks of all ranks and streamed to safetensors
// piece by piece, so memory stays at one read buffer (buffer_bytes) plus one checksum block, whatever
// the size of the model or of its largest tensor. Output as Hugging Face writes it: model.safetensors,
// or with more than max_shard_bytes, model-00001-of-0000N.safetensors and model.safetensors.index.json
// ({"metadata": {"total_size"}, "weight_map": {name: file}}).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zerorun/core/dtype.h"
#include "zerorun/runtime/checkpoint_env.h"

namespace zerorun::runtime {

struct CheckpointExportOptions {
  std::string out_dir;            // created when missing
  DType dtype = DType::kF32;      // F32, BF16 or F16 (rounded to nearest even from fp32)
  // Which slot to export; "" means "fp32" (master weights) where saved, else "param" (frozen tensors
  // and stage-0 fp32 runs save only the model-dtype weights).
  std::string slot;
  uint64_t max_shard_bytes = 5'000'000'000;  // zero_to_fp32's default "5GB"; a larger tensor gets a file alone
  uint64_t buffer_bytes = uint64_t{64} << 20;  // the read/convert buffer
  CheckpointEnv* env = nullptr;
};

struct CheckpointExportResult {
  std::vector<std::string> files;  // the safetensors files written
  std::string index_file;          // "" when there is one file
  int64_t tensors = 0;
  uint64_t bytes = 0;              // tensor bytes written (the index's total_size)
};

// Reads checkpoint `dir` (CheckpointReader: every byte checksum-verified as it is read) and writes
// the export. Each output file appears atomically; the index is written last. Throws CheckpointError
// for checkpoint problems (a tensor without the slot asked for is named), IoError for write failures,
// InvalidArgument for bad options.
CheckpointExportResult ExportCheckpoint(const std::string& dir, const CheckpointExportOptions& options);

// "5GB" (decimal, as Hugging Face), "5GiB", "500MB", "64MiB", "1e9", "123": bytes; false otherwise.
bool ParseByteSize(const std::string& text, uint64_t* out);

}  // namespace zerorun::runtime
