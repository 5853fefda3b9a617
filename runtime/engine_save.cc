// Engine::Save16BitModel: DeepSpeed's save_16bit_model as a safetensors file. Rank 0 streams one
// parameter at a time into a SafetensorsWriter; at stage 3 every rank gathers each parameter in turn
// (so collectives stay matched) and rank 0 appends it. Rank 0's failures travel to every rank through
// two small broadcasts (after opening, after publishing), so no rank is left waiting in a gather and
// every rank throws the same IoError.
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/safetensors.h"

namespace zerorun::runtime {

namespace {

// Rank 0's error text ("" = success) on every rank. A collective (two broadcasts when world > 1).
std::string ShareRootError(comm::Communicator& comm, const std::string& mine) {
  if (comm.size() == 1) return mine;
  int64_t len = comm.rank() == 0 ? static_cast<int64_t>(mine.size()) : 0;
  comm.Broadcast(&len, 1, DType::kI64, 0).Wait();
  if (len == 0) return "";
  std::string text = comm.rank() == 0 ? mine : std::string(static_cast<size_t>(len), '\0');
  comm.Broadcast(text.data(), static_cast<size_t>(len), DType::kU8, 0).Wait();
  return text;
}

}  // namespace

bool Engine::Save16BitModel(const std::string& save_dir, const std::string& filename, bool exclude_frozen_parameters) {
  if (save_dir.empty()) ZR_THROW(InvalidArgument, "Save16BitModel: save_dir must be a non-empty path");
  if (filename.empty()) ZR_THROW(InvalidArgument, "Save16BitModel: filename must be non-empty");
  const std::string path = (std::filesystem::path(save_dir) / filename).string();
  if (impl_->strategy->ShardsParameters() && !config_.zero_optimization.gather_16bit_weights_on_model_save) {
    // As DeepSpeed: without gathering, a stage-3 module holds only shards; nothing is saved.
    if (rank() == 0) {
      ZR_WARN("did not save the model {}: at ZeRO stage 3 set zero_optimization."
              "stage3_gather_16bit_weights_on_model_save to true", path);
    }
    return false;
  }
  ScopedMemoryAccount scope(account_.get());
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  ScopedTimer timer(timers_, "save_16bit_model");

  std::vector<nn::Parameter*> params;
  std::vector<SafetensorsWriter::Entry> entries;
  for (nn::Parameter* p : model_.Parameters()) {
    if (exclude_frozen_parameters && !p->requires_grad()) continue;
    params.push_back(p);
    entries.push_back({p->name(), p->dtype(), p->shape()});
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"zerorun_global_steps", std::to_string(global_steps_)},
      {"zerorun_global_samples", std::to_string(global_samples_)},
      {"zerorun_micro_steps", std::to_string(micro_steps_)},
      {"zerorun_zero_stage", std::to_string(zero_stage())},
      {"zerorun_world_size", std::to_string(world_size())},
      {"zerorun_dtype", DTypeName(model_dtype_)},
  };

  // Rank 0 opens the file (and creates the directory); everyone learns whether that worked.
  std::optional<SafetensorsWriter> writer;
  std::string error;
  if (rank() == 0) {
    try {
      std::error_code ec;
      std::filesystem::create_directories(save_dir, ec);
      if (ec) ZR_THROW(IoError, "cannot save {}: cannot create directory {}: {}", path, save_dir, ec.message());
      writer.emplace(path, std::move(entries), metadata);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = ShareRootError(*comm_, error);

  if (error.empty()) {
    // Stream the parameters. Stage 3 gathers each on every rank; rank 0 keeps taking part in the gathers
    // after a failed write so that the other ranks' collectives still complete.
    auto append = [&](const Tensor& value) {
      if (!writer || !error.empty()) return;
      try {
        writer->Append(value.device().is_cpu() ? value : value.To(value.dtype()));  // device: via the host
      } catch (const Error& e) {
        error = e.what();
        writer.reset();
      }
    };
    impl_->VisitFullParameters(zero::ParamCoordinator::Purpose::kSave, params,
                               [&](nn::Parameter*, const Tensor& value) { append(value); });
    if (writer && error.empty()) {
      try {
        writer->Commit();
      } catch (const Error& e) {
        error = e.what();
      }
    }
    writer.reset();  // removes the temporary file unless committed
    // Doubles as the final barrier: no rank returns before rank 0 published (or failed).
    error = ShareRootError(*comm_, error);
  }
  if (!error.empty()) {
    if (rank() == 0) ZR_THROW(IoError, "{}", error);
    ZR_THROW(IoError, "rank 0 could not save the model: {}", error);
  }
  if (rank() == 0) {
    ZR_INFO("saved the {} model ({} tensors, ZeRO stage {}, global step {}) to {}", DTypeName(model_dtype_),
            params.size(), zero_stage(), global_steps_, path);
  }
  return true;
}

}  // namespace zerorun::runtime
