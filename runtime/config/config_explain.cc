// The effective config, two ways: as JSON with DeepSpeed's key names (defaults filled, derived values
// included; loading it again gives the same Config) and as a human-readable explanation with every
// value's origin, the batch identity, bucket sizes in bytes and the features that are on.
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <sstream>

#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime {
namespace config_detail {
namespace {

using rapidjson::Value;

std::string EnumName(const EnumSpec& spec, int value) {
  for (const auto& [name, v] : spec.names) {
    if (v == value) return name;
  }
  return "?";
}

struct Line {
  std::string path, value, origin;
};

class Emitter final : public ConfigVisitor {
 public:
  Emitter(const Config& config, rapidjson::Document& doc) : config_(config), doc_(doc), alloc_(doc.GetAllocator()) {
    doc_.SetObject();
    stack_.push_back({&doc_, ""});
  }
  std::vector<Line> lines;

  void Bool(const Field& f, bool& v) override { Put(f, Value(v), v ? "true" : "false"); }
  void OptBool(const Field& f, std::optional<bool>& v) override {
    if (v) Put(f, Value(*v), *v ? "true" : "false");
    else Put(f, Value(), "null");
  }
  void Int(const Field& f, int64_t& v) override { Put(f, Value(static_cast<int64_t>(v)), std::to_string(v)); }
  void OptInt(const Field& f, std::optional<int64_t>& v) override {
    if (v) Put(f, Value(static_cast<int64_t>(*v)), std::to_string(*v));
    else Put(f, Value(), "null");
  }
  void Float(const Field& f, double& v) override { Put(f, Value(v), FormatDouble(v)); }
  void OptFloat(const Field& f, std::optional<double>& v) override {
    if (v) Put(f, Value(*v), FormatDouble(*v));
    else Put(f, Value(), "null");
  }
  void String(const Field& f, std::string& v) override { Put(f, Str(v), "\"" + v + "\""); }
  void OptString(const Field& f, std::optional<std::string>& v) override {
    if (v) Put(f, Str(*v), "\"" + *v + "\"");
    else Put(f, Value(), "null");
  }
  void Enum(const Field& f, int& v, const EnumSpec& spec) override {
    const std::string name = EnumName(spec, v);
    Put(f, Str(name), "\"" + name + "\"");
  }
  void OptEnum(const Field& f, std::optional<int>& v, const EnumSpec& spec) override {
    if (!v) return Put(f, Value(), "null");
    const std::string name = EnumName(spec, *v);
    Put(f, Str(name), "\"" + name + "\"");
  }
  void FloatList(const Field& f, std::vector<double>& v, size_t) override {
    Value a(rapidjson::kArrayType);
    std::string text = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      a.PushBack(Value(v[i]), alloc_);
      text += (i ? ", " : "") + FormatDouble(v[i]);
    }
    Put(f, std::move(a), text + "]");
  }
  void IntList(const Field& f, std::vector<int64_t>& v) override {
    Value a(rapidjson::kArrayType);
    std::string text = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      a.PushBack(Value(static_cast<int64_t>(v[i])), alloc_);
      text += (i ? ", " : "") + std::to_string(v[i]);
    }
    Put(f, std::move(a), text + "]");
  }
  void StringList(const Field& f, std::vector<std::string>& v) override {
    Value a(rapidjson::kArrayType);
    std::string text = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      a.PushBack(Str(v[i]), alloc_);
      text += (i ? ", \"" : "\"") + v[i] + "\"";
    }
    Put(f, std::move(a), text + "]");
  }
  bool BeginSection(const Field& f, bool optional, bool* present) override {
    if (optional && !*present) {
      Put(f, Value(), "null");
      return false;
    }
    // Writing activation_checkpointing turns checkpointing on (activation_checkpointing.h), so the
    // section is written out only when the config had it.
    const std::string path = JoinPath(stack_.back().second, f.key);
    if (path == "activation_checkpointing") {
      const Provenance* p = config_.ProvenanceOf(path);
      if (p == nullptr || p->kind == Provenance::Kind::kDefault) return false;
    }
    Value* parent = stack_.back().first;
    parent->AddMember(Str(f.key), Value(rapidjson::kObjectType), alloc_);
    stack_.push_back({&(parent->MemberEnd() - 1)->value, JoinPath(stack_.back().second, f.key)});
    return true;
  }
  void EndSection() override { stack_.pop_back(); }
  void Opaque(const Field&) override {}
  void Refused(const Field&, const char*) override {}
  std::optional<bool> DeprecatedBool(const Field&, const char*) override { return std::nullopt; }

 private:
  Value Str(const std::string& s) { return Value(s.c_str(), static_cast<rapidjson::SizeType>(s.size()), alloc_); }
  void Put(const Field& f, Value v, std::string text) {
    if (f.status == FieldStatus::kDeprecated) return;
    stack_.back().first->AddMember(Str(f.key), v, alloc_);
    const std::string path = JoinPath(stack_.back().second, f.key);
    const Provenance* p = config_.ProvenanceOf(path);
    lines.push_back({path, std::move(text), p ? p->ToString() : "default"});
  }
  const Config& config_;
  rapidjson::Document& doc_;
  rapidjson::Document::AllocatorType& alloc_;
  std::vector<std::pair<Value*, std::string>> stack_;
};

std::string OnOff(bool b) { return b ? "on" : "off"; }

std::string Bytes(int64_t elems, DType t) {
  const double bytes = static_cast<double>(elems) * static_cast<double>(DTypeSize(t));
  return Format("{} elements × {} B ({}) = {} B ({})", elems, DTypeSize(t), DTypeName(t),
                static_cast<unsigned long long>(elems) * DTypeSize(t), FormatBytes(bytes));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> EffectiveValues(const Config& config) {
  rapidjson::Document doc;
  ConfigBody body = config;
  Emitter e(config, doc);
  VisitConfig(e, body);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(e.lines.size());
  for (Line& l : e.lines) out.emplace_back(std::move(l.path), std::move(l.value));
  return out;
}

}  // namespace config_detail

std::string EffectiveConfigJson(const Config& config, bool pretty) {
  rapidjson::Document doc;
  ConfigBody body = config;
  body.lr_scaling.rule = LrScalingRule::kNone;  // its lrs are already scaled: re-loading must not scale again
  config_detail::Emitter e(config, doc);
  config_detail::VisitConfig(e, body);
  rapidjson::StringBuffer buf;
  if (pretty) {
    rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
    w.SetIndent(' ', 2);
    doc.Accept(w);
  } else {
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    doc.Accept(w);
  }
  return std::string(buf.GetString(), buf.GetSize()) + "\n";
}

std::string ExplainConfig(const Config& c) {
  using config_detail::Bytes;
  using config_detail::OnOff;
  std::ostringstream os;
  const ZeroConfig& z = c.zero_optimization;
  const int stage = z.StageNumber();
  const DType model = c.ModelDType();
  os << "config: " << (c.source().empty() ? "<string>" : c.source()) << "\n\n";

  os << "Batch\n";
  os << Format("  train_batch_size = micro × accumulation × world: {} = {} × {} × {}\n", c.train_batch_size(),
               c.micro_batch_per_gpu(), c.gradient_accumulation_steps(), c.batch.world_size);
  os << Format("  accumulation: {}\n", c.batch.managed_gradient_accumulation ? "managed (boundary every N micro-steps)"
                                                                            : "unmanaged (every step() is a boundary)");

  os << "\nPrecision\n";
  os << Format("  model dtype {}, gradients accumulated in {}, reduced in {}\n", DTypeName(model),
               DTypeName(c.GradAccumDType()), DTypeName(c.CommDType()));
  if (c.fp16.enabled) {
    if (c.fp16.DynamicLossScale()) {
      os << Format("  fp16 dynamic loss scale: initial 2^{}, window {}, hysteresis {}{}, min {}\n",
                   c.fp16.initial_scale_power, c.fp16.loss_scale_window, c.fp16.hysteresis,
                   c.fp16.consecutive_hysteresis ? " (consecutive)" : "", c.fp16.min_loss_scale);
    } else {
      os << Format("  fp16 static loss scale {}\n", config_detail::FormatDouble(c.fp16.loss_scale));
    }
  }
  if (c.bf16.enabled) os << Format("  bf16: no loss scaling; overflow check {}\n", OnOff(c.bf16.check_grad_overflow));

  os << "\nZeRO\n";
  static const char* kStage[] = {"off (data parallel, everything replicated)", "optimizer states partitioned",
                                 "optimizer states + gradients partitioned",
                                 "optimizer states + gradients + parameters partitioned"};
  os << Format("  stage {}: {}\n", stage, kStage[stage & 3]);
  // The engine overlaps unless the file turns it off; DeepSpeed's resolved default (off below stage 3) is
  // shown as such.
  const bool overlap_off = c.OverlapCommDisabled();
  os << Format("  overlap_comm {}{}, contiguous_gradients {}, reduce_scatter {}\n", OnOff(!overlap_off),
               overlap_off || z.overlap_comm.value_or(false) ? ""
                                                              : " (DeepSpeed's default here is off; zerorun overlaps "
                                                                "unless the config sets it to false)",
               OnOff(z.contiguous_gradients), OnOff(z.reduce_scatter));
  os << "  reduce bucket:     " << Bytes(z.reduce_bucket_size, c.CommDType()) << "\n";
  if (stage == 1 || stage == 2) {
    // Only a bucket slice larger than the allgather bucket is gathered in chunks, through two W-chunk
    // staging buffers.
    os << "  allgather bucket:  " << Bytes(z.allgather_bucket_size, model) << " per chunk (staging "
       << Bytes(2 * c.batch.world_size * z.allgather_bucket_size, model)
       << " during the step when a reduce bucket's slice is larger)\n";
  }
  if (stage == 3) {
    os << "  prefetch bucket:   " << Bytes(z.prefetch_bucket_size, model) << "\n";
    os << "  persistence threshold: " << Bytes(z.param_persistence_threshold, model) << "\n";
    os << "  max live parameters:   " << Bytes(z.max_live_parameters, model) << "\n";
  }
  os << "  optimizer sub-group: " << Bytes(z.sub_group_size, DType::kF32) << " (fp32 master; the unit of optimizer work)\n";
  auto offload = [&](const char* what, OffloadDevice d, const std::optional<std::string>& path, bool pin) {
    if (d == OffloadDevice::kNone) return Format("  {} offload: off\n", what);
    return Format("  {} offload: {}{}{}\n", what, OffloadDeviceName(d), path ? " at " + *path : std::string(),
                  pin ? ", pinned host buffers" : "");
  };
  os << (z.offload_optimizer ? offload("optimizer", z.offload_optimizer->device, z.offload_optimizer->nvme_path,
                                       z.offload_optimizer->pin_memory)
                             : std::string("  optimizer offload: off\n"));
  os << (z.offload_param ? offload("parameter", z.offload_param->device, z.offload_param->nvme_path,
                                   z.offload_param->pin_memory)
                         : std::string("  parameter offload: off\n"));
  if (z.OptimizerOffload() == OffloadDevice::kNvme || z.ParamOffload() == OffloadDevice::kNvme) {
    os << Format("  aio: block {} B, queue depth {}, {} thread(s)\n", c.aio.block_size, c.aio.queue_depth,
                 c.aio.intra_op_parallelism);
  }

  os << "\nOptimizer\n";
  if (c.optimizer.type == OptimizerKind::kNone) {
    os << "  none in the config (the program supplies one)\n";
  } else {
    os << Format("  {}{}, lr {}\n", OptimizerKindName(c.optimizer.type),
                 c.optimizer.type == OptimizerKind::kAdam ? (c.optimizer.AdamWMode() ? " (AdamW mode: decoupled weight decay)"
                                                                                     : " (L2 weight decay)")
                                                          : "",
                 config_detail::FormatDouble(c.optimizer.Lr()));
  }
  os << Format("  scheduler: {}\n", c.scheduler.type == SchedulerKind::kNone ? "none" : SchedulerKindName(c.scheduler.type));

  os << "\nFeatures on\n";
  std::vector<std::string> on;
  if (c.fp16.enabled) on.push_back("fp16");
  if (c.bf16.enabled) on.push_back("bf16");
  if (stage > 0) on.push_back(Format("ZeRO stage {}", stage));
  if (c.gradient_clipping > 0) on.push_back("gradient clipping at " + config_detail::FormatDouble(c.gradient_clipping));
  if (c.prescale_gradients) on.push_back("prescale_gradients");
  if (z.OptimizerOffload() != OffloadDevice::kNone) on.push_back("optimizer offload");
  if (z.ParamOffload() != OffloadDevice::kNone) on.push_back("parameter offload");
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  const Provenance* ac_written = c.ProvenanceOf("activation_checkpointing");
  if (ac_written && ac_written->kind != Provenance::Kind::kDefault) {  // the section turns it on
    on.push_back(ac.number_checkpoints ? Format("activation checkpointing ({} segments)", *ac.number_checkpoints)
                                       : std::string("activation checkpointing (every block)"));
    if (ac.cpu_checkpointing) on.push_back("checkpoints in host memory");
    if (ac.contiguous_memory_optimization) on.push_back("contiguous checkpoint buffer");
  }
  if (c.tensorboard.enabled) on.push_back("tensorboard");
  if (c.csv_monitor.enabled) on.push_back("csv_monitor");
  if (c.flops_profiler.enabled) on.push_back("flops_profiler");
  if (c.comms_logger.enabled) on.push_back("comms_logger");
  if (c.wall_clock_breakdown) on.push_back("wall_clock_breakdown");
  if (c.memory_breakdown) on.push_back("memory_breakdown");
  if (c.steps_per_print) on.push_back(Format("progress line every {} steps", *c.steps_per_print));
  if (c.checkpoint.load_universal) on.push_back("load_universal");
  os << "  " << (on.empty() ? std::string("(nothing beyond plain fp32 data parallel)") : "") ;
  for (size_t i = 0; i < on.size(); ++i) os << (i ? ", " : "") << on[i];
  os << "\n";

  os << "\nEffective values (origin)\n";
  rapidjson::Document doc;
  ConfigBody body = c;
  config_detail::Emitter e(c, doc);
  config_detail::VisitConfig(e, body);
  size_t width = 0;
  for (const auto& l : e.lines) width = std::max(width, l.path.size() + 3 + l.value.size());
  width = std::min<size_t>(width, 72);
  for (const auto& l : e.lines) {
    std::string left = l.path + " = " + l.value;
    if (left.size() < width) left.append(width - left.size(), ' ');
    os << "  " << left << "  [" << l.origin << "]\n";
  }
  const std::vector<ConfigIssue> refused = UnsupportedKeys(c);
  if (!refused.empty()) {
    os << "\nRefused by the engine (zerorun-config check fails, the engine does not start)\n";
    for (const ConfigIssue& r : refused) os << "  " << r.ToString() << "\n";
  }
  if (!c.warnings().empty()) {
    os << "\nWarnings\n";
    for (const ConfigIssue& w : c.warnings()) os << "  " << w.ToString() << "\n";
  }
  return os.str();
}

}  // namespace zerorun::runtime
