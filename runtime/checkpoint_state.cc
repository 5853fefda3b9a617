// TrainingState <-> JSON, and capture/restore of the live objects (see checkpoint_state.h).
#include "zerorun/runtime/checkpoint_state.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/runtime/checkpoint_json.h"

namespace zerorun::runtime {

using namespace ckpt_json;

namespace {

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinI64 = std::numeric_limits<int64_t>::min();

void FiniteDouble(JsonWriter& w, double v, const std::string& field) {
  if (!std::isfinite(v)) ZR_THROW(InvalidArgument, "checkpoint state: {} is {}, which JSON cannot hold", field, v);
  w.Double(v);
}

}  // namespace

bool operator==(const TrainingState& a, const TrainingState& b) {
  auto same_scaler = [](const std::optional<LossScalerCheckpoint>& x, const std::optional<LossScalerCheckpoint>& y) {
    if (x.has_value() != y.has_value()) return false;
    if (!x) return true;
    const LossScaler::State &s = x->state, &t = y->state;
    return x->dynamic == y->dynamic && s.cur_scale == t.cur_scale && s.cur_iter == t.cur_iter &&
           s.last_overflow_iter == t.last_overflow_iter && s.cur_hysteresis == t.cur_hysteresis;
  };
  auto same_lr = [](const std::optional<LrSchedulerCheckpoint>& x, const std::optional<LrSchedulerCheckpoint>& y) {
    return x.has_value() == y.has_value() &&
           (!x || (x->type == y->type && x->last_batch_iteration == y->last_batch_iteration));
  };
  auto same_sampler = [](const std::optional<SamplerCheckpoint>& x, const std::optional<SamplerCheckpoint>& y) {
    return x.has_value() == y.has_value() &&
           (!x || (x->cursor.epoch == y->cursor.epoch && x->cursor.batch == y->cursor.batch &&
                   x->batch_size == y->batch_size && x->seq_len == y->seq_len && x->world_size == y->world_size &&
                   x->seed == y->seed && x->shuffle == y->shuffle && x->drop_last == y->drop_last &&
                   x->num_windows == y->num_windows));
  };
  auto same_rng = [](const std::optional<RngCheckpoint>& x, const std::optional<RngCheckpoint>& y) {
    return x.has_value() == y.has_value() && (!x || (x->seed == y->seed && x->calls == y->calls));
  };
  return a.global_steps == b.global_steps && a.global_samples == b.global_samples && a.micro_steps == b.micro_steps &&
         a.skipped_steps == b.skipped_steps && same_scaler(a.loss_scaler, b.loss_scaler) &&
         same_lr(a.lr_scheduler, b.lr_scheduler) && same_sampler(a.sampler, b.sampler) && same_rng(a.rng, b.rng) &&
         a.optimizer_scalars == b.optimizer_scalars;
}

std::string TrainingStateToJson(const TrainingState& s) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  PutInt(w, "global_steps", s.global_steps);
  PutInt(w, "global_samples", s.global_samples);
  PutInt(w, "micro_steps", s.micro_steps);
  PutInt(w, "skipped_steps", s.skipped_steps);
  if (s.loss_scaler) {
    const LossScalerCheckpoint& l = *s.loss_scaler;
    Key(w, "loss_scaler");
    w.StartObject();
    PutBool(w, "dynamic", l.dynamic);
    Key(w, "cur_scale");
    FiniteDouble(w, l.state.cur_scale, "loss_scaler.cur_scale");
    PutInt(w, "cur_iter", l.state.cur_iter);
    PutInt(w, "last_overflow_iter", l.state.last_overflow_iter);
    PutInt(w, "cur_hysteresis", l.state.cur_hysteresis);
    w.EndObject();
  }
  if (s.lr_scheduler) {
    Key(w, "lr_scheduler");
    w.StartObject();
    PutStr(w, "type", s.lr_scheduler->type);
    PutInt(w, "last_batch_iteration", s.lr_scheduler->last_batch_iteration);
    w.EndObject();
  }
  if (s.sampler) {
    const SamplerCheckpoint& d = *s.sampler;
    Key(w, "sampler");
    w.StartObject();
    PutInt(w, "epoch", d.cursor.epoch);
    PutInt(w, "batch", d.cursor.batch);
    PutInt(w, "batch_size", d.batch_size);
    PutInt(w, "seq_len", d.seq_len);
    PutInt(w, "world_size", d.world_size);
    PutUint(w, "seed", d.seed);
    PutBool(w, "shuffle", d.shuffle);
    PutBool(w, "drop_last", d.drop_last);
    PutInt(w, "num_windows", d.num_windows);
    w.EndObject();
  }
  if (s.rng) {
    Key(w, "rng");
    w.StartObject();
    PutUint(w, "seed", s.rng->seed);
    Key(w, "calls");
    w.StartObject();
    std::set<std::string> seen;
    for (const auto& [path, calls] : s.rng->calls) {
      if (!seen.insert(path).second) ZR_THROW(InvalidArgument, "checkpoint state: rng module '{}' appears twice", path);
      PutUint(w, path, calls);
    }
    w.EndObject();
    w.EndObject();
  }
  Key(w, "optimizer_scalars");
  w.StartObject();
  std::set<std::string> seen;
  for (const auto& [name, v] : s.optimizer_scalars) {
    if (name.empty() || !seen.insert(name).second) {
      ZR_THROW(InvalidArgument, "checkpoint state: optimizer scalar name '{}' is empty or appears twice", name);
    }
    Key(w, name);
    FiniteDouble(w, v, "optimizer_scalars." + name);
  }
  w.EndObject();
  w.EndObject();
  return {buf.GetString(), buf.GetSize()};
}

TrainingState TrainingStateFromJson(const std::string& json, const std::string& source) {
  rapidjson::Document doc = Parse(json, source);
  const At at{source, "state"};
  Object(doc, at);
  TrainingState s;
  s.global_steps = Int(doc, at, "global_steps", 0, kMaxI64);
  s.global_samples = Int(doc, at, "global_samples", 0, kMaxI64);
  s.micro_steps = Int(doc, at, "micro_steps", 0, kMaxI64);
  s.skipped_steps = Int(doc, at, "skipped_steps", 0, kMaxI64);
  if (const Value* v = OptionalMember(doc, "loss_scaler")) {
    const At a = at.Child("loss_scaler");
    Object(*v, a);
    LossScalerCheckpoint l;
    l.dynamic = Bool(*v, a, "dynamic");
    l.state.cur_scale = Double(*v, a, "cur_scale");
    l.state.cur_iter = Int(*v, a, "cur_iter", 0, kMaxI64);
    l.state.last_overflow_iter = Int(*v, a, "last_overflow_iter", -1, kMaxI64);
    l.state.cur_hysteresis = static_cast<int>(Int(*v, a, "cur_hysteresis", 0, std::numeric_limits<int>::max()));
    s.loss_scaler = l;
  }
  if (const Value* v = OptionalMember(doc, "lr_scheduler")) {
    const At a = at.Child("lr_scheduler");
    Object(*v, a);
    s.lr_scheduler = LrSchedulerCheckpoint{String(*v, a, "type"), Int(*v, a, "last_batch_iteration", kMinI64, kMaxI64)};
  }
  if (const Value* v = OptionalMember(doc, "sampler")) {
    const At a = at.Child("sampler");
    Object(*v, a);
    SamplerCheckpoint d;
    d.cursor.epoch = Int(*v, a, "epoch", 0, kMaxI64);
    d.cursor.batch = Int(*v, a, "batch", 0, kMaxI64);
    d.batch_size = Int(*v, a, "batch_size", 1, kMaxI64);
    d.seq_len = Int(*v, a, "seq_len", 1, kMaxI64);
    d.world_size = static_cast<int>(Int(*v, a, "world_size", 1, std::numeric_limits<int>::max()));
    d.seed = Uint64(*v, a, "seed");
    d.shuffle = Bool(*v, a, "shuffle");
    d.drop_last = Bool(*v, a, "drop_last");
    d.num_windows = Int(*v, a, "num_windows", 0, kMaxI64);
    s.sampler = d;
  }
  if (const Value* v = OptionalMember(doc, "rng")) {
    const At a = at.Child("rng");
    Object(*v, a);
    RngCheckpoint r;
    r.seed = Uint64(*v, a, "seed");
    const At ca = a.Child("calls");
    const Value& calls = Object(Member(*v, a, "calls"), ca);
    for (auto it = calls.MemberBegin(); it != calls.MemberEnd(); ++it) {
      std::string path(it->name.GetString(), it->name.GetStringLength());
      if (!it->value.IsUint64()) Fail(ca.Child(path), "expected a non-negative integer");
      r.calls.emplace_back(std::move(path), it->value.GetUint64());
    }
    s.rng = std::move(r);
  }
  const At oa = at.Child("optimizer_scalars");
  const Value& scalars = Object(Member(doc, at, "optimizer_scalars"), oa);
  for (auto it = scalars.MemberBegin(); it != scalars.MemberEnd(); ++it) {
    std::string name(it->name.GetString(), it->name.GetStringLength());
    s.optimizer_scalars.emplace_back(name, Double(scalars, oa, name.c_str()));
  }
  return s;
}

// ---- capture / restore --------------------------------------------------------------------------

LossScalerCheckpoint CaptureLossScaler(const LossScaler& scaler) { return {scaler.dynamic(), scaler.GetState()}; }

void RestoreLossScaler(LossScaler& scaler, const LossScalerCheckpoint& saved) {
  if (saved.dynamic != scaler.dynamic()) {
    ZR_THROW(CheckpointError, "the checkpoint's loss scaler is {} but this run's is {} (fp16.loss_scale changed?)",
             saved.dynamic ? "dynamic" : "static", scaler.dynamic() ? "dynamic" : "static");
  }
  try {
    scaler.SetState(saved.state);
  } catch (const InvalidArgument& e) {
    ZR_THROW(CheckpointError, "checkpoint: {}", e.what());
  }
}

LrSchedulerCheckpoint CaptureLrScheduler(const LrScheduler& scheduler) {
  return {scheduler.type(), scheduler.SaveState()};
}

void RestoreLrScheduler(LrScheduler& scheduler, const LrSchedulerCheckpoint& saved) {
  if (saved.type != scheduler.type()) {
    ZR_THROW(CheckpointError, "the checkpoint's LR scheduler is {} but this run's is {} (set "
             "load_lr_scheduler_states to false to keep the new schedule)", saved.type, scheduler.type());
  }
  scheduler.LoadState(saved.last_batch_iteration);
}

SamplerCheckpoint CaptureSampler(const data::DistributedSampler& sampler) {
  const data::SamplerOptions& o = sampler.options();
  return {sampler.cursor(), o.batch_size, o.seq_len, o.world_size, o.seed, o.shuffle, o.drop_last,
          sampler.num_windows()};
}

void RestoreSampler(data::DistributedSampler& sampler, const SamplerCheckpoint& saved) {
  const data::SamplerOptions& o = sampler.options();
  auto differs = [](const char* field, const std::string& was, const std::string& now) {
    ZR_THROW(CheckpointError, "the data sampler cannot resume: {} was {} when the checkpoint was saved and is {} now",
             field, was, now);
  };
  if (saved.seed != o.seed) differs("seed", std::to_string(saved.seed), std::to_string(o.seed));
  if (saved.shuffle != o.shuffle) differs("shuffle", saved.shuffle ? "true" : "false", o.shuffle ? "true" : "false");
  if (saved.seq_len != o.seq_len) differs("seq_len", std::to_string(saved.seq_len), std::to_string(o.seq_len));
  if (saved.num_windows != sampler.num_windows()) {
    differs("the dataset's window count (another data set?)", std::to_string(saved.num_windows),
            std::to_string(sampler.num_windows()));
  }
  const int64_t old_global = saved.batch_size * saved.world_size;
  const int64_t new_global = o.batch_size * o.world_size;
  data::SamplerCursor c = saved.cursor;
  if (old_global != new_global) {
    // Positions [0, batch × old_global) of this epoch's order are consumed; continue at the new
    // global batch that starts there.
    const int64_t consumed = saved.cursor.batch * old_global;
    if (consumed % new_global != 0) {
      ZR_THROW(CheckpointError, "the data sampler cannot resume exactly: {} windows of epoch {} were consumed "
               "({} batches of {} x {} ranks), not a whole number of the new global batch {} x {} ranks",
               consumed, saved.cursor.epoch, saved.cursor.batch, saved.batch_size, saved.world_size, o.batch_size,
               o.world_size);
    }
    c.batch = consumed / new_global;
    ZR_INFO("data sampler: resuming epoch {} at batch {} of {} x {} ranks (saved at batch {} of {} x {})", c.epoch,
            c.batch, o.batch_size, o.world_size, saved.cursor.batch, saved.batch_size, saved.world_size);
  }
  if (c.batch >= sampler.batches_per_epoch()) {
    c.batch = 0;
    ++c.epoch;
  }
  sampler.set_cursor(c);
}

RngCheckpoint CaptureRng(nn::Module& root) {
  RngCheckpoint r;
  r.seed = root.rng_seed();
  for (nn::Module* m : root.Modules()) r.calls.emplace_back(m->path(), m->rng_calls());
  return r;
}

void RestoreRng(nn::Module& root, const RngCheckpoint& saved) {
  std::vector<nn::Module*> modules = root.Modules();
  std::map<std::string, uint64_t, std::less<>> calls(saved.calls.begin(), saved.calls.end());
  for (nn::Module* m : modules) {
    if (!calls.count(m->path())) {
      ZR_THROW(CheckpointError, "the checkpoint's RNG state has no module '{}' (saved from another model?)", m->path());
    }
  }
  if (calls.size() != modules.size()) {
    std::set<std::string> live;
    for (nn::Module* m : modules) live.insert(m->path());
    for (const auto& [path, n] : saved.calls) {
      if (!live.count(path)) ZR_THROW(CheckpointError, "the checkpoint's RNG state names module '{}', which this model lacks", path);
    }
  }
  root.SetRngSeed(saved.seed);
  for (nn::Module* m : modules) m->set_rng_calls(calls.at(m->path()));
}

}  // namespace zerorun::runtime
