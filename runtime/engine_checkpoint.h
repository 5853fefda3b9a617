// The options and result of Engine::SaveCheckpoint / LoadCheckpoint (DeepSpeed's save_checkpoint /
// load_checkpoint, reference §6). The format and the guarantees are docs/checkpoint.md's; the engine
// side is runtime/engine_checkpoint.cc.
#pragma once

#include <cstdint>
#include <string>

namespace zerorun::data {
class DistributedSampler;
}

namespace zerorun::runtime {

class CheckpointEnv;

struct SaveCheckpointOptions {
  // The checkpoint's name; "" = DeepSpeed's default "global_step<N>" (N = global_steps()).
  std::string tag;
  // The caller's own state, a JSON object ("{}" = none); LoadCheckpoint returns it.
  std::string client_state_json = "{}";
  // Point <save_dir>/latest at the new checkpoint once it is complete.
  bool save_latest = true;
  // Leave frozen (requires_grad false) parameters out.
  bool exclude_frozen_parameters = false;
  // The data sampler whose cursor is saved (nullptr: none). The same sampler state on every rank.
  const data::DistributedSampler* sampler = nullptr;
  // The file system (nullptr: POSIX); tests inject faults here. Not owned.
  CheckpointEnv* env = nullptr;
  // Asynchronous save (DeepSpeed's checkpoint.writer.decoupled): what this rank writes is copied to
  // host memory, the files are written on a background thread, and the call returns (its
  // bytes_written is 0). Engine::WaitForCheckpoint, the next SaveCheckpoint or LoadCheckpoint, or the
  // engine's destruction first waits for every rank's files and only then writes `latest`; an error
  // of the background write is thrown from that next call (every rank alike). `env` must outlive the
  // write.
  bool async = false;
};

struct LoadCheckpointOptions {
  // "" = the tag <load_dir>/latest names (no latest file: nothing is loaded).
  std::string tag;
  // The optimizer state slots and the optimizer's step counts / scalars.
  bool load_optimizer_states = true;
  // The LR scheduler's iteration (and with it the learning rates).
  bool load_lr_scheduler_states = true;
  // Only the model's weights (fp32 masters are set from them); no optimizer, scheduler, counters,
  // loss scaler, sampler or RNG state.
  bool load_module_only = false;
  // The checkpoint must hold exactly the model's parameters (false: tensors only on one side are
  // skipped; shapes must still agree).
  bool load_module_strict = true;
  // The data sampler whose cursor is restored (nullptr: none). Refused when the checkpoint has none.
  data::DistributedSampler* sampler = nullptr;
  // true: every byte this rank applies is read and its checksum checked before anything changes, so a
  // damaged checkpoint leaves the engine as it was; the bytes are then read again (from the page cache
  // where they fit). false (one pass): names, shapes, ranks and shard headers are still checked first,
  // then each block is read once (bypassing the page cache where the file system allows), checked and
  // applied; a checksum mismatch then leaves the engine PARTLY loaded (CheckpointError on every rank
  // says so: load a checkpoint again before training).
  bool verify_before_apply = true;
  CheckpointEnv* env = nullptr;
};

struct LoadCheckpointResult {
  bool loaded = false;             // false: no `latest` (DeepSpeed's "nothing loaded": (None, None))
  std::string dir;                 // <load_dir>/<tag>
  std::string tag;
  std::string client_state_json;  // what the save was given ("{}" when none)
  int64_t global_steps = 0;        // the counters after loading
};

// What a save wrote (every rank alike but bytes_written, which is this rank's).
struct SaveCheckpointResult {
  std::string dir;
  std::string tag;
  uint64_t bytes_written = 0;
  bool in_background = false;  // an asynchronous save: the files are still being written (bytes_written 0)
  // Seconds this call spent finishing the previous asynchronous save first (its files, fsyncs and
  // `latest`) before it started its own; 0 when none was pending.
  double waited_for_previous_s = 0;
};

}  // namespace zerorun::runtime
