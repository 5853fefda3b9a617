// zerorun-ckpt: look into, check and export training checkpoints (docs/checkpoint.md).
//   zerorun-ckpt inspect PATH [--tag T] [--json]
//   zerorun-ckpt verify PATH [--tag T]
//   zerorun-ckpt export PATH --out DIR [--tag T] [--dtype fp32|bf16|fp16] [--slot S]
//                       [--max_shard_size 5GB] [--buffer_size 64MiB]
// PATH is a save directory (the tag `latest` names, or --tag) or one checkpoint directory.
// Exit status: 0 fine; 1 the checkpoint is damaged, missing or unreadable (each problem on stderr,
// naming file, rank and tensor); 2 bad usage.
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <sys/resource.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/runtime/checkpoint_export.h"
#include "zerorun/runtime/checkpoint_reader.h"
#include "zerorun/runtime/checkpoint_state.h"
#include "zerorun/runtime/safetensors.h"

namespace {

namespace rt = zerorun::runtime;
using zerorun::Format;

constexpr const char* kUsage =
    "usage: zerorun-ckpt inspect PATH [--tag T] [--json]\n"
    "       zerorun-ckpt verify PATH [--tag T]\n"
    "       zerorun-ckpt export PATH --out DIR [--tag T] [--dtype fp32|bf16|fp16] [--slot S]\n"
    "                           [--max_shard_size 5GB] [--buffer_size 64MiB]\n"
    "  PATH     a save directory (its `latest` tag, or --tag) or one checkpoint directory\n"
    "  inspect  tags, world size, ZeRO stage, dtypes, steps, sizes (--json: machine-readable)\n"
    "  verify   every rank's files present and consistent, every checksum block of every shard\n"
    "  export   one consolidated model as safetensors (fp32 masters where saved, else the model-dtype\n"
    "           weights; --slot picks another), streamed through one buffer of --buffer_size;\n"
    "           above --max_shard_size (default 5GB) it writes model-0000i-of-0000N.safetensors and\n"
    "           model.safetensors.index.json as Hugging Face does\n";

int Usage(const std::string& problem) {
  std::cerr << "zerorun-ckpt: " << problem << "\n" << kUsage;
  return 2;
}

struct Args {
  std::string command;
  std::string path;
  std::string tag;
  bool json = false;
  std::string out;
  std::string dtype = "fp32";
  std::string slot;
  uint64_t max_shard = 5'000'000'000;
  uint64_t buffer = uint64_t{64} << 20;
};

// "" or the usage problem.
std::string ParseArgs(int argc, char** argv, Args* a) {
  if (argc < 3) return "expected a command and a path";
  a->command = argv[1];
  if (a->command != "inspect" && a->command != "verify" && a->command != "export") {
    return Format("unknown command '{}'", a->command);
  }
  for (int i = 2; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&](std::string* out) -> bool {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (f == "--json" && a->command == "inspect") {
      a->json = true;
    } else if (f == "--tag") {
      if (!value(&a->tag)) return "--tag needs a value";
    } else if (a->command == "export" && f == "--out") {
      if (!value(&a->out)) return "--out needs a directory";
    } else if (a->command == "export" && f == "--dtype") {
      if (!value(&a->dtype)) return "--dtype needs a value";
      if (a->dtype != "fp32" && a->dtype != "bf16" && a->dtype != "fp16") {
        return Format("--dtype must be fp32, bf16 or fp16, not '{}'", a->dtype);
      }
    } else if (a->command == "export" && f == "--slot") {
      if (!value(&a->slot)) return "--slot needs a value";
    } else if (a->command == "export" && (f == "--max_shard_size" || f == "--buffer_size")) {
      uint64_t bytes = 0;
      if (!value(&v) || !rt::ParseByteSize(v, &bytes) || bytes == 0) {
        return Format("{} needs a positive size such as 5GB, 500MiB or 1e9", f);
      }
      (f == "--max_shard_size" ? a->max_shard : a->buffer) = bytes;
    } else if (!f.empty() && f[0] == '-') {
      return Format("unknown flag '{}' for {}", f, a->command);
    } else if (a->path.empty()) {
      a->path = f;
    } else {
      return Format("unexpected argument '{}'", f);
    }
  }
  if (a->path.empty()) return "expected a checkpoint path";
  if (a->command == "export" && a->out.empty()) return "export needs --out DIR";
  return "";
}

std::string Human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(u == 0 ? 0 : 1);
  os << v << ' ' << units[u];
  return os.str();
}

// The checkpoint directory PATH (and --tag) name; exits through the exception on problems.
std::string Resolve(const Args& a) {
  std::optional<std::string> dir = rt::ResolveCheckpointDir(a.path, a.tag);
  if (!dir) {
    throw zerorun::CheckpointError(
        Format("{} holds no checkpoint: no 'latest' file and no manifest.json (pass --tag or a checkpoint directory)",
               a.path));
  }
  return *dir;
}

uint64_t PeakRssBytes() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

int Inspect(const Args& a) {
  const std::string dir = Resolve(a);
  rt::CheckpointReader reader(dir);
  const rt::CheckpointManifest& m = reader.manifest();
  const std::string save_dir = rt::DirName(dir);
  std::vector<std::string> tags;
  std::optional<std::string> latest;
  try {
    tags = rt::ListCheckpointTags(save_dir);
    latest = rt::ReadLatestCheckpointTag(save_dir);
  } catch (const zerorun::Error&) {  // the parent is not a save directory we can read: no tag list
  }
  std::map<std::string, std::pair<std::string, uint64_t>> slot_bytes;  // slot -> (dtype, bytes)
  int64_t elements = 0;
  for (const rt::CheckpointTensor& t : m.tensors) {
    elements += t.numel();
    for (const rt::CheckpointSlot& s : t.slots) {
      auto& e = slot_bytes[s.name];
      e.first = rt::SafetensorsDTypeName(s.dtype);
      e.second += static_cast<uint64_t>(t.numel()) * zerorun::DTypeSize(s.dtype);
    }
  }
  uint64_t total = 0;
  for (const rt::CheckpointRankIndex& r : reader.ranks()) total += r.shard_bytes;
  rt::TrainingState state;
  bool have_state = true;
  try {
    state = rt::TrainingStateFromJson(m.state_json, dir + "/manifest.json");
  } catch (const zerorun::CheckpointError&) {
    have_state = false;
  }

  if (a.json) {
    rapidjson::StringBuffer buf;
    rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    w.Key("dir");
    w.String(dir.c_str());
    w.Key("tag");
    w.String(m.tag.c_str());
    w.Key("latest");
    w.Bool(latest && *latest == m.tag);
    w.Key("tags");
    w.StartArray();
    for (const std::string& t : tags) w.String(t.c_str());
    w.EndArray();
    w.Key("format_version");
    w.Int(m.format_version);
    w.Key("world_size");
    w.Int(m.world_size);
    w.Key("zero_stage");
    w.Int(m.zero_stage);
    w.Key("model_dtype");
    w.String(rt::SafetensorsDTypeName(m.model_dtype));
    w.Key("optimizer");
    w.String(m.optimizer.c_str());
    w.Key("tensors");
    w.Int64(static_cast<int64_t>(m.tensors.size()));
    w.Key("elements");
    w.Int64(elements);
    w.Key("slots");
    w.StartObject();
    for (const auto& [slot, e] : slot_bytes) {
      w.Key(slot.c_str());
      w.StartObject();
      w.Key("dtype");
      w.String(e.first.c_str());
      w.Key("bytes");
      w.Uint64(e.second);
      w.EndObject();
    }
    w.EndObject();
    w.Key("rank_bytes");
    w.StartArray();
    for (const rt::CheckpointRankIndex& r : reader.ranks()) w.Uint64(r.shard_bytes);
    w.EndArray();
    w.Key("total_bytes");
    w.Uint64(total);
    w.Key("state");
    rapidjson::Document sd;
    sd.Parse<rapidjson::kParseFullPrecisionFlag>(m.state_json.c_str());
    sd.Accept(w);
    w.EndObject();
    std::cout << buf.GetString() << "\n";
    return 0;
  }
  std::cout << "checkpoint " << dir << " (tag " << m.tag << (latest && *latest == m.tag ? ", latest" : "") << ")\n";
  std::cout << "  saved by " << m.world_size << " rank" << (m.world_size > 1 ? "s" : "") << ", ZeRO stage "
            << m.zero_stage << ", model dtype " << rt::SafetensorsDTypeName(m.model_dtype) << ", optimizer "
            << (m.optimizer.empty() ? "none" : m.optimizer) << ", format version " << m.format_version << "\n";
  if (have_state) {
    std::cout << "  steps: global " << state.global_steps << ", micro " << state.micro_steps << ", skipped "
              << state.skipped_steps << ", samples " << state.global_samples << "\n";
  }
  std::cout << "  tensors: " << m.tensors.size() << " (" << elements << " elements); slots:";
  for (const auto& [slot, e] : slot_bytes) std::cout << " " << slot << " " << e.first << " " << Human(e.second) << ";";
  std::cout << "\n  size: " << Human(total) << " in " << reader.ranks().size() << " shard"
            << (reader.ranks().size() > 1 ? "s" : "") << " (";
  for (size_t r = 0; r < reader.ranks().size(); ++r) {
    std::cout << (r ? ", " : "") << "rank " << r << " " << Human(reader.ranks()[r].shard_bytes);
  }
  std::cout << ")\n";
  if (!tags.empty()) {
    std::cout << "  tags in " << save_dir << ":";
    for (const std::string& t : tags) std::cout << " " << t << (latest && *latest == t ? " (latest)" : "");
    std::cout << "\n";
  }
  return 0;
}

int Verify(const Args& a) {
  const std::string dir = Resolve(a);
  rt::CheckpointVerifyReport report = rt::VerifyCheckpoint(dir);
  if (!report.ok()) {
    for (const std::string& p : report.problems) std::cerr << "zerorun-ckpt: " << p << "\n";
    std::cerr << "zerorun-ckpt: " << dir << ": " << report.problems.size() << " problem"
              << (report.problems.size() > 1 ? "s" : "") << " found\n";
    return 1;
  }
  std::cout << "OK " << dir << ": " << report.ranks << " rank" << (report.ranks > 1 ? "s" : "") << ", "
            << report.chunks << " chunks, " << Human(report.bytes_verified) << " verified\n";
  return 0;
}

int Export(const Args& a) {
  const uint64_t rss_start = PeakRssBytes();
  const std::string dir = Resolve(a);
  rt::CheckpointExportOptions o;
  o.out_dir = a.out;
  o.dtype = a.dtype == "fp32" ? zerorun::DType::kF32 : a.dtype == "bf16" ? zerorun::DType::kBF16 : zerorun::DType::kF16;
  o.slot = a.slot;
  o.max_shard_bytes = a.max_shard;
  o.buffer_bytes = a.buffer;
  rt::CheckpointExportResult r = rt::ExportCheckpoint(dir, o);
  const uint64_t rss_end = PeakRssBytes();
  std::cout << "exported " << r.tensors << " tensors (" << Human(r.bytes) << ", " << a.dtype << ") from " << dir
            << " to " << r.files.size() << " file" << (r.files.size() > 1 ? "s" : "") << " in " << a.out
            << (r.index_file.empty() ? "" : " with model.safetensors.index.json") << "\n";
  std::cout << "memory: peak RSS " << Human(rss_end) << ", " << Human(rss_end - rss_start)
            << " above the start (read buffer " << Human(a.buffer) << ")\n";
  std::cout << "peak_rss_bytes " << rss_end << " start_rss_bytes " << rss_start << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::string problem = ParseArgs(argc, argv, &a);
  if (!problem.empty()) return Usage(problem);
  try {
    if (a.command == "inspect") return Inspect(a);
    if (a.command == "verify") return Verify(a);
    return Export(a);
  } catch (const zerorun::InvalidArgument& e) {
    std::cerr << "zerorun-ckpt: " << e.what() << "\n";
    return 2;
  } catch (const zerorun::Error& e) {
    std::cerr << "zerorun-ckpt: " << e.what() << "\n";
    return 1;
  }
}
