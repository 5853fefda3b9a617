// What the engine reports about each boundary step: the monitors (csv_monitor, tensorboard) on rank 0
// and memory_breakdown's log line. The scalars, with x-axis global_samples (DeepSpeed's):
//   Train/Samples/lr, loss_scale (fp16), train_loss, elapsed_time_ms_{forward,backward,
//   backward_allreduce,step} (wall_clock_breakdown) — DeepSpeed's tags;
//   Train/Samples/grad_norm (applied steps), tokens_per_second (since the previous boundary),
//   memory_MiB/<category> (this rank's account, current at the step's end), peak_memory_MiB,
//   comm_bytes/<op> (bytes this rank sent in the step, per collective kind) — zerorun's;
//   Numerics/group<g>/{grad_max_abs,grad_norm,grad_zero_fraction,grad_nonfinite_fraction,
//   fp16_underflow_fraction,fp16_overflow_fraction} on numerics steps (engine_numerics.cc).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/observe/flops_profiler.h"
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

// ---- flops_profiler (rank 0, the step that begins when global_steps == profile_step) ---------------

void Engine::InitFlopsProfiler() {
  if (!config_.flops_profiler.enabled || rank() != 0) return;
  if (options_.peak_flops > 0) {
    impl_->peak_flops = options_.peak_flops;
    impl_->peak_source = "given";
  } else if (const char* env = std::getenv("ZERORUN_PEAK_TFLOPS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double t = std::strtod(env, &end);
    if (*end != '\0' || !(t > 0)) {
      ZR_THROW(InvalidArgument, "ZERORUN_PEAK_TFLOPS must be a positive number of TFLOP/s, got '{}'", env);
    }
    impl_->peak_flops = t * 1e12;
    impl_->peak_source = "ZERORUN_PEAK_TFLOPS";
  } else {
    MemoryAccount probe_account("flops probe");  // the probe's buffers are not the engine's memory
    ScopedMemoryAccount scope(&probe_account);
    impl_->peak_flops = MeasurePeakFlops(model_dtype_);
    impl_->peak_source = Format("measured: best {}^3 {} GEMM of this rank at start-up", 512, DTypeName(model_dtype_));
  }
}

void Engine::MaybeStartFlopsProfile() {
  if (!config_.flops_profiler.enabled || rank() != 0 || impl_->flops_profile || impl_->profiler) return;
  if (global_steps_ != config_.flops_profiler.profile_step) return;
  impl_->profiler = std::make_unique<FlopsProfiler>(model_);
  impl_->profiler->profile().step = global_steps_;
}

void Engine::FinishFlopsProfile() {
  if (!impl_->profiler) return;
  impl_->profiler->Finish();
  auto p = std::make_unique<FlopsProfile>(impl_->profiler->profile());
  impl_->profiler.reset();
  p->samples = config_.micro_batch_per_gpu() * config_.gradient_accumulation_steps();
  p->world_size = world_size();
  p->peak_flops = impl_->peak_flops;
  p->peak_source = impl_->peak_source;
  const std::string text = FlopsProfileText(*p, config_.flops_profiler);
  if (config_.flops_profiler.output_file && !config_.flops_profiler.output_file->empty()) {
    const std::string& path = *config_.flops_profiler.output_file;
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw IoError(ErrnoMessage("flops_profiler.output_file: cannot create " + path, errno));
    const bool written = std::fputs(text.c_str(), f) >= 0;
    if (std::fclose(f) != 0 || !written) {
      throw IoError(ErrnoMessage("flops_profiler.output_file: cannot write " + path, errno));
    }
    char mfu[32];
    std::snprintf(mfu, sizeof mfu, "%.2f%%", 100 * p->mfu());
    ZR_INFO("flops_profiler: step {} profiled (MFU {}), the profile is in {}", p->step, mfu, path);
  } else {
    ZR_INFO("\n{}", text);
  }
  impl_->flops_profile = std::move(p);
}

const FlopsProfile* Engine::flops_profile() const { return impl_->flops_profile.get(); }

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
  (point[0] == 'f' ? impl_->mem_after_forward : impl_->mem_after_backward) = account_->CurrentTotal();
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
            FormatBytes(static_cast<double>(account_->CurrentTotal())),
            FormatBytes(static_cast<double>(account_->PeakTotal())), account_->Summary());
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
    if (account_->Peak(cat) == 0) continue;
    events.push_back({Format("Train/Samples/memory_MiB/{}", MemCategoryName(cat)), account_->Current(cat) / kMiB, x});
  }
  events.push_back({"Train/Samples/peak_memory_MiB", account_->PeakTotal() / kMiB, x});
  for (int op = 0; op < comm::kNumOpTypes; ++op) {
    if (stats.by_op[op].calls == 0) continue;
    events.push_back({Format("Train/Samples/comm_bytes/{}", comm::OpTypeName(static_cast<comm::OpType>(op))),
                      static_cast<double>(delta.by_op[op].bytes_sent), x});
  }
  for (size_t g = 0; g < r.numerics.size(); ++g) {
    const GroupNumerics& n = r.numerics[g];
    const std::string p = Format("Numerics/group{}/", g);
    events.push_back({p + "grad_max_abs", n.grad_max_abs, x});
    events.push_back({p + "grad_norm", n.grad_norm, x});
    events.push_back({p + "grad_zero_fraction", n.zero_fraction, x});
    events.push_back({p + "grad_nonfinite_fraction", n.nonfinite_fraction, x});
    if (config_.fp16.enabled) {
      events.push_back({p + "fp16_underflow_fraction", n.fp16_underflow_fraction, x});
      events.push_back({p + "fp16_overflow_fraction", n.fp16_overflow_fraction, x});
    }
  }
  for (auto& m : impl_->monitors) {
    m->Write(events);
    m->Flush();
  }
}

}  // namespace zerorun::runtime
