// What the engine reports about each boundary step: the monitors (csv_monitor, tensorboard) on rank 0
// and memory_breakdown's log line. The scalars, with x-axis global_samples (DeepSpeed's):
//   Train/Samples/lr, loss_scale (fp16), train_loss, elapsed_time_ms_{forward,backward,
//   backward_allreduce,step} (wall_clock_breakdown) — DeepSpeed's tags;
//   Train/Samples/grad_norm (applied steps), tokens_per_second (since the previous boundary),
//   memory_MiB/<category> (this rank's account, current at the step's end), peak_memory_MiB,
//   comm_bytes/<op> (bytes this rank sent in the step, per collective kind) — zerorun's.
#include <memory>
#include <string>
#include <vector>

#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/observe/tensorboard.h"

namespace zerorun::runtime {

void Engine::InitMonitors() {
  impl_->last_boundary_time = NowSeconds();
  impl_->last_comm_stats = comm_->Stats();
  if (rank() != 0) return;
  if (config_.csv_monitor.enabled) {
    impl_->monitors.push_back(
        std::make_unique<CsvMonitor>(config_.csv_monitor.output_path, config_.csv_monitor.job_name));
  }
  if (config_.tensorboard.enabled) {
    auto tb = std::make_unique<TensorBoardMonitor>(config_.tensorboard.output_path, config_.tensorboard.job_name);
    ZR_INFO("tensorboard: writing {}", tb->path());
    impl_->monitors.push_back(std::move(tb));
  }
}

Tracer* Engine::ActiveTracer() {
  Tracer* t = impl_->tracer.get();
  if (t == nullptr || (options_.trace_steps > 0 && global_steps_ >= options_.trace_steps)) return nullptr;
  return t;
}

void Engine::TraceStepEnd() {
  // global_steps_ has advanced: the window just ended was step global_steps_.
  Tracer* t = impl_->tracer.get();
  if (t == nullptr || (options_.trace_steps > 0 && global_steps_ > options_.trace_steps)) return;
  t->Complete(Format("step {}", global_steps_), "step", impl_->window_start, NowSeconds(), 0,
              Format("\"global_step\": {}, \"global_samples\": {}, \"loss\": {}", global_steps_, global_samples_,
                     last_loss_));
  if (options_.trace_steps > 0 && global_steps_ >= options_.trace_steps) comm_->SetTracer(nullptr);
}

std::string Engine::WriteTrace() {
  if (!impl_->tracer) return "";
  std::string path = options_.trace_file;
  if (size_t at = path.find("{rank}"); at != std::string::npos) {
    path.replace(at, 6, std::to_string(rank()));
  } else if (rank() > 0) {
    const size_t dot = path.rfind('.');
    const size_t slash = path.rfind('/');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    path.insert(ext ? dot : path.size(), Format(".rank{}", rank()));
  }
  impl_->tracer->WriteFile(path);
  impl_->trace_written = true;
  if (rank() == 0) ZR_INFO("trace: wrote {} ({} events; open it in https://ui.perfetto.dev)", path,
                           impl_->tracer->num_events());
  return path;
}

void Engine::NoteMemory(const char* point) {
  if (!config_.memory_breakdown || !IsGradientAccumulationBoundary()) return;
  (point[0] == 'f' ? impl_->mem_after_forward : impl_->mem_after_backward) = account_.CurrentTotal();
}

void Engine::WriteMonitorEvents(const StepResult& r) {
  const double now = NowSeconds();
  const double seconds = now - impl_->last_boundary_time;
  impl_->last_boundary_time = now;
  const comm::CommStats stats = comm_->Stats();
  comm::CommStats delta;
  for (int op = 0; op < comm::kNumOpTypes; ++op) {
    delta.by_op[op].bytes_sent = stats.by_op[op].bytes_sent - impl_->last_comm_stats.by_op[op].bytes_sent;
    delta.by_op[op].calls = stats.by_op[op].calls - impl_->last_comm_stats.by_op[op].calls;
  }
  impl_->last_comm_stats = stats;
  constexpr double kMiB = 1024.0 * 1024.0;
  if (config_.memory_breakdown && rank() == 0) {
    ZR_INFO("memory_breakdown step {}: total after forward {}, after backward {}, after step {} (peak {}) | {}",
            global_steps_, FormatBytes(static_cast<double>(impl_->mem_after_forward)),
            FormatBytes(static_cast<double>(impl_->mem_after_backward)),
            FormatBytes(static_cast<double>(account_.CurrentTotal())),
            FormatBytes(static_cast<double>(account_.PeakTotal())), account_.Summary());
  }
  if (impl_->monitors.empty()) return;
  const int64_t x = global_samples_;
  const std::vector<double> lrs = GetLr();
  std::vector<MonitorEvent> events = {{"Train/Samples/lr", lrs.empty() ? 0.0 : lrs[0], x}};
  if (config_.fp16.enabled) events.push_back({"Train/Samples/loss_scale", impl_->scaler.scale(), x});
  events.push_back({"Train/Samples/train_loss", last_loss_, x});
  if (config_.wall_clock_breakdown) {
    for (const char* t : {"forward", "backward", "backward_allreduce", "step"}) {
      events.push_back({Format("Train/Samples/elapsed_time_ms_{}", t), timers_.Get(t).total_ms, x});
    }
  }
  if (r.applied) events.push_back({"Train/Samples/grad_norm", r.grad_norm, x});
  if (seconds > 0 && impl_->tokens_per_sample > 0) {
    const double tokens = static_cast<double>(config_.train_batch_size() * impl_->tokens_per_sample);
    events.push_back({"Train/Samples/tokens_per_second", tokens / seconds, x});
  }
  for (int c = 0; c < kNumMemCategories; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    if (account_.Peak(cat) == 0) continue;
    events.push_back({Format("Train/Samples/memory_MiB/{}", MemCategoryName(cat)), account_.Current(cat) / kMiB, x});
  }
  events.push_back({"Train/Samples/peak_memory_MiB", account_.PeakTotal() / kMiB, x});
  for (int op = 0; op < comm::kNumOpTypes; ++op) {
    if (stats.by_op[op].calls == 0) continue;
    events.push_back({Format("Train/Samples/comm_bytes/{}", comm::OpTypeName(static_cast<comm::OpType>(op))),
                      static_cast<double>(delta.by_op[op].bytes_sent), x});
  }
  for (auto& m : impl_->monitors) {
    m->Write(events);
    m->Flush();
  }
}

}  // namespace zerorun::runtime
