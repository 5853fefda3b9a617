// TrainSummary → JSON with RapidJSON's writer; atomic file write.
#include "zerorun/runtime/summary.h"

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include "zerorun/core/error.h"

namespace zerorun::runtime {

std::string CommReport(const TrainSummary& s, int comm_elem_bytes) {
  if (s.world_size <= 1 || s.steps <= 0 || s.parameters <= 0) return "communication: none (one rank)";
  const double steps = static_cast<double>(s.steps);
  const double n = s.world_size;
  const double unit = static_cast<double>(s.parameters) * (n - 1) / n * comm_elem_bytes;  // bytes of Ψ(N-1)/N
  double bytes = 0, seconds = 0;
  std::string parts;
  char buf[256];
  for (const auto& [name, b] : s.comm_bytes) {
    bytes += static_cast<double>(b.bytes_sent);
    seconds += b.seconds;
    if (b.bytes_sent / steps < 0.005 * unit) continue;  // the scalar loss/norm reductions
    std::snprintf(buf, sizeof buf, "%s%s %.2f", parts.empty() ? "" : ", ", name.c_str(), b.bytes_sent / steps / unit);
    parts += buf;
  }
  auto timer = [&](const char* t) {
    auto it = s.timers_ms.find(t);
    return it == s.timers_ms.end() ? 0.0 : it->second;
  };
  const double exposed_ms =
      (timer("backward_allreduce") + timer("allgather") + timer("reduce_wait") + timer("gather_wait")) / steps;
  const double comm_ms = seconds * 1000.0 / steps;
  std::string out;
  std::snprintf(buf, sizeof buf, "communication per step: %.2f MiB sent = %.2fΨ(N-1)/N (ZeRO paper: %s)",
                bytes / steps / (1024.0 * 1024.0), bytes / steps / unit,
                s.zero_stage == 3 ? "3Ψ, less when persistent or reused parameters stay gathered" : "2Ψ");
  out = buf;
  if (!parts.empty()) out += ": " + parts;
  std::snprintf(buf, sizeof buf, "\ncollectives ran %.1f ms per step; the engine waited %.1f ms for them", comm_ms,
                exposed_ms);
  out += buf;
  if (comm_ms > 0) {
    std::snprintf(buf, sizeof buf, " (%.0f%% hidden behind computation)",
                  100.0 * std::max(0.0, 1.0 - exposed_ms / comm_ms));
    out += buf;
  }
  return out;
}

std::string SummaryToJson(const TrainSummary& s) {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  auto num = [&](double v) {
    if (std::isfinite(v)) {
      w.Double(v);
    } else {
      w.Null();  // JSON has no NaN/Inf
    }
  };
  w.StartObject();
  w.Key("rank"); w.Int(s.rank);
  w.Key("world_size"); w.Int(s.world_size);
  w.Key("zero_stage"); w.Int(s.zero_stage);
  w.Key("dtype"); w.String(s.dtype.c_str());
  w.Key("backend"); w.String(s.backend.c_str());
  w.Key("gemm"); w.String(s.gemm.c_str());
  w.Key("steps"); w.Int64(s.steps);
  w.Key("skipped_steps"); w.Int64(s.skipped_steps);
  w.Key("global_samples"); w.Int64(s.global_samples);
  w.Key("micro_batch"); w.Int64(s.micro_batch);
  w.Key("gradient_accumulation_steps"); w.Int64(s.gradient_accumulation_steps);
  w.Key("seq_len"); w.Int64(s.seq_len);
  w.Key("losses");
  w.StartArray();
  for (double l : s.losses) num(l);
  w.EndArray();
  w.Key("final_loss"); num(s.final_loss);
  if (s.eval_batches > 0) {
    w.Key("eval_loss"); num(s.eval_loss);
    w.Key("eval_batches"); w.Int64(s.eval_batches);
  }
  w.Key("entropy_floor"); num(s.entropy_floor);
  w.Key("loss_scale"); num(s.loss_scale);
  w.Key("lr"); num(s.lr);
  w.Key("grad_norm"); num(s.grad_norm);
  w.Key("tokens_per_second"); num(s.tokens_per_second);
  w.Key("wall_seconds"); num(s.wall_seconds);
  if (s.window_first_step > 0) {
    w.Key("window_first_step"); w.Int64(s.window_first_step);
    w.Key("window_last_step"); w.Int64(s.window_last_step);
    w.Key("window_tokens_per_second"); num(s.window_tokens_per_second);
    w.Key("window_step_ms"); num(s.window_step_ms);
  }
  if (s.spike_guard) {
    w.Key("rollbacks");
    w.StartArray();
    for (const SpikeRollback& r : s.rollbacks) {
      w.StartObject();
      w.Key("step"); w.Int64(r.step);
      w.Key("restored_step"); w.Int64(r.restored_step);
      w.Key("metric"); w.String(r.metric.c_str());
      w.Key("value"); num(r.value);
      w.Key("mean"); num(r.mean);
      w.Key("zscore"); num(r.zscore);
      w.Key("skipped_batches");
      w.StartArray();
      for (const auto& [epoch, batch] : r.skipped_batches) {
        w.StartArray();
        w.Int64(epoch);
        w.Int64(batch);
        w.EndArray();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
  }
  w.Key("parameters"); w.Int64(s.parameters);
  w.Key("memory_bytes");
  w.StartObject();
  for (int i = 0; i < kNumMemCategories; ++i) {
    w.Key(MemCategoryName(static_cast<MemCategory>(i)));
    w.StartObject();
    w.Key("current"); w.Int64(s.memory.current[static_cast<size_t>(i)]);
    w.Key("peak"); w.Int64(s.memory.peak[static_cast<size_t>(i)]);
    w.EndObject();
  }
  w.Key("current_total"); w.Int64(s.memory.current_total);
  w.Key("peak_total"); w.Int64(s.memory.peak_total);
  w.EndObject();
  w.Key("comm_bytes");
  w.StartObject();
  for (const auto& [name, b] : s.comm_bytes) {
    w.Key(name.c_str());
    w.StartObject();
    w.Key("calls"); w.Int64(b.calls);
    w.Key("bytes_sent"); w.Int64(b.bytes_sent);
    w.Key("bytes_received"); w.Int64(b.bytes_received);
    w.Key("seconds"); num(b.seconds);
    w.EndObject();
  }
  w.EndObject();
  w.Key("timers_ms");
  w.StartObject();
  for (const auto& [name, ms] : s.timers_ms) {
    w.Key(name.c_str());
    num(ms);
  }
  w.EndObject();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize()) + "\n";
}

void WriteSummaryJson(const TrainSummary& s, const std::string& path) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) throw IoError(ErrnoMessage("cannot write summary " + tmp, errno));
  std::string json = SummaryToJson(s);
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw IoError(ErrnoMessage("cannot write summary " + tmp, errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw IoError(ErrnoMessage("cannot rename summary to " + path, errno));
  }
}

std::string ExpandRankPattern(const std::string& pattern, int rank) {
  std::string out = pattern;
  const std::string key = "{rank}";
  for (size_t pos = out.find(key); pos != std::string::npos; pos = out.find(key, pos)) {
    out.replace(pos, key.size(), std::to_string(rank));
  }
  return out;
}

}  // namespace zerorun::runtime
