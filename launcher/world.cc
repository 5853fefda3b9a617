// World resolution (hostfile, filters, GPU detection) and the per-rank environment contract.
#include "zerorun/launcher/world.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "zerorun/core/error.h"

extern char** environ;

namespace zerorun::launcher {
namespace {

std::vector<int> Iota(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

std::vector<int> ParseDeviceList(const std::string& text) {
  std::vector<int> ids;
  for (const std::string& raw : Split(text, ',')) {
    std::string item = Trim(raw);
    bool digits = !item.empty() && item.size() < 6;
    for (char c : item) digits = digits && c >= '0' && c <= '9';
    if (!digits) {
      ZR_THROW(InvalidArgument,
               "CUDA_VISIBLE_DEVICES='{}': '{}' is not a device index (zerorun reads it as the local slot list; "
               "use --num_gpus N or -i localhost:0,1 instead)",
               text, item);
    }
    ids.push_back(std::stoi(item));
  }
  return ids;
}

// The whole of a small text file (a .zerorun_env); refuses anything over 1 MiB (not an env file:
// /dev/zero, a binary) instead of reading it into memory.
std::string ReadFile(const std::string& path, bool* ok) {
  constexpr size_t kMaxBytes = 1u << 20;
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::string text;
  char buf[65536];
  while (*ok && (in.read(buf, sizeof buf) || in.gcount() > 0)) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxBytes) ZR_THROW(InvalidArgument, "{}: larger than 1 MiB: not an environment file", path);
  }
  return text;
}

}  // namespace

HostFacts DetectHostFacts() {
  HostFacts f;
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) {
    f.cuda_visible_set = true;
    f.cuda_visible_devices = cvd;
  }
  if (DIR* d = opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++f.gpu_count;
    }
    closedir(d);
  }
  f.default_hostfile_exists = access("/job/hostfile", R_OK) == 0;
  return f;
}

World ResolveWorld(const LaunchOptions& opts, const HostFacts& facts) {
  if (!opts.world_info.empty()) return DecodeWorldInfo(opts.world_info);
  bool sized = opts.num_nodes > 0 || opts.num_gpus > 0 || opts.num_procs > 0;
  if (sized && (!opts.include.empty() || !opts.exclude.empty())) {
    ZR_THROW(InvalidArgument, "cannot combine --num_nodes/--num_gpus/--num_procs with --include/--exclude: "
                              "choose slots either by count or by name");
  }
  World world;
  Resources chosen;
  std::string hostfile = opts.hostfile_given ? opts.hostfile : (facts.default_hostfile_exists ? "/job/hostfile" : "");
  if (!hostfile.empty()) {
    chosen = FilterResources(LoadHostfile(hostfile), opts.include, opts.exclude);
    if (opts.num_nodes > 0) {
      if (opts.num_nodes > static_cast<int>(chosen.size())) {
        ZR_THROW(InvalidArgument, "--num_nodes {}: hostfile {} lists only {} host(s)", opts.num_nodes, hostfile,
                 chosen.size());
      }
      chosen.resize(static_cast<size_t>(opts.num_nodes));
    }
    int per_node = opts.num_procs > 0 ? opts.num_procs : opts.num_gpus;
    if (per_node > 0) {
      for (HostSlots& h : chosen) h.slots = Iota(per_node);
    }
    world.gpu_slots = opts.num_procs <= 0;
  } else {
    if (opts.num_nodes > 1) {
      ZR_THROW(InvalidArgument, "--num_nodes {} needs a hostfile (-H FILE) listing the hosts", opts.num_nodes);
    }
    HostSlots local{"localhost", {}};
    if (opts.num_procs > 0) {
      local.slots = Iota(opts.num_procs);
    } else if (opts.num_gpus > 0) {
      local.slots = Iota(opts.num_gpus);
      world.gpu_slots = true;
    } else if (facts.cuda_visible_set && !Trim(facts.cuda_visible_devices).empty()) {
      local.slots = ParseDeviceList(facts.cuda_visible_devices);
      world.gpu_slots = true;
    } else if (facts.gpu_count > 0) {
      local.slots = Iota(facts.gpu_count);
      world.gpu_slots = true;
    } else {
      local.slots = {0};  // no GPU: one CPU rank (use --num_procs for more)
    }
    chosen = FilterResources({local}, opts.include, opts.exclude);
  }
  if (chosen.empty()) ZR_THROW(InvalidArgument, "no slots left to run on after --include '{}' / --exclude '{}'", opts.include, opts.exclude);
  for (const HostSlots& h : chosen) {
    if (h.slots.empty()) continue;
    world.nodes.push_back({h.host, h.slots, world.world_size});
    world.world_size += static_cast<int>(h.slots.size());
    if (world.world_size > kMaxWorldSize) {
      ZR_THROW(InvalidArgument, "the selected hosts add up to more than {} ranks (the most zerorun supports)", kMaxWorldSize);
    }
  }
  if (world.world_size == 0) ZR_THROW(InvalidArgument, "the selected hosts have no slots (every host has slots=0)");
  return world;
}

std::string EncodeWorldInfo(const World& world) {
  std::string out = world.gpu_slots ? "gpu;" : "cpu;";
  for (size_t i = 0; i < world.nodes.size(); ++i) {
    if (i > 0) out += '@';
    out += world.nodes[i].host + ':';
    for (size_t j = 0; j < world.nodes[i].slots.size(); ++j) {
      if (j > 0) out += ',';
      out += std::to_string(world.nodes[i].slots[j]);
    }
  }
  return out;
}

World DecodeWorldInfo(const std::string& text) {
  World world;
  size_t semi = text.find(';');
  std::string kind = text.substr(0, semi);
  if (semi == std::string::npos || (kind != "gpu" && kind != "cpu")) {
    ZR_THROW(InvalidArgument, "--world_info '{}': expected 'gpu;' or 'cpu;' then host:slots@host:slots", text);
  }
  world.gpu_slots = kind == "gpu";
  for (const std::string& spec : Split(text.substr(semi + 1), '@')) {
    size_t colon = spec.rfind(':');
    if (colon == std::string::npos || colon == 0) ZR_THROW(InvalidArgument, "--world_info '{}': bad node '{}'", text, spec);
    Node node{spec.substr(0, colon), {}, world.world_size};
    for (const std::string& s : Split(spec.substr(colon + 1), ',')) {
      std::vector<int> one = ParseRangeList(s);
      node.slots.insert(node.slots.end(), one.begin(), one.end());
    }
    if (node.slots.size() > static_cast<size_t>(kMaxSlotsPerHost) ||
        world.world_size + static_cast<int64_t>(node.slots.size()) > kMaxWorldSize) {
      ZR_THROW(InvalidArgument, "--world_info: node '{}' has {} slots (at most {} per host, {} in all)", node.host,
               node.slots.size(), kMaxSlotsPerHost, kMaxWorldSize);
    }
    world.world_size += static_cast<int>(node.slots.size());
    world.nodes.push_back(std::move(node));
  }
  return world;
}

std::string DefaultMasterAddr(const LaunchOptions& opts, const World& world) {
  if (!opts.master_addr.empty()) return opts.master_addr;
  if (world.nodes.size() <= 1) return "127.0.0.1";
  return world.nodes[0].host;
}

EnvList RankEnv(const World& world, int node_rank, int local_index, const JobContext& job) {
  ZR_CHECK(node_rank >= 0 && node_rank < static_cast<int>(world.nodes.size()), "node rank {} of {}", node_rank,
           world.nodes.size());
  const Node& node = world.nodes[static_cast<size_t>(node_rank)];
  ZR_CHECK(local_index >= 0 && local_index < static_cast<int>(node.slots.size()), "local index {}", local_index);
  std::string local_size = std::to_string(node.slots.size());
  EnvList env = {
      {"RANK", std::to_string(node.first_rank + local_index)},
      {"LOCAL_RANK", std::to_string(local_index)},
      {"WORLD_SIZE", std::to_string(world.world_size)},
      {"LOCAL_SIZE", local_size},
      {"LOCAL_WORLD_SIZE", local_size},
      {"CROSS_RANK", std::to_string(node_rank)},
      {"CROSS_SIZE", std::to_string(world.nodes.size())},
      {"MASTER_ADDR", job.master_addr},
      {"MASTER_PORT", std::to_string(job.master_port)},
      {"ZERORUN_JOB_TOKEN", job.token},
      {"ZERORUN_RESTART", std::to_string(job.restart_generation)},
  };
  if (world.gpu_slots) {
    std::string cvd;
    for (size_t i = 0; i < node.slots.size(); ++i) cvd += (i ? "," : "") + std::to_string(node.slots[i]);
    env.emplace_back("CUDA_VISIBLE_DEVICES", cvd);
  }
  return env;
}

std::vector<std::string> RankArgv(const LaunchOptions& opts, int local_rank) {
  std::vector<std::string> argv = {opts.program};
  if (!opts.no_local_rank) argv.push_back("--local_rank=" + std::to_string(local_rank));
  argv.insert(argv.end(), opts.program_args.begin(), opts.program_args.end());
  return argv;
}

EnvList RemoteExports(const EnvList& environ_vars, const EnvList& env_file_entries) {
  static const char* kPerJob[] = {"ZERORUN_JOB_TOKEN", "ZERORUN_RESTART"};
  EnvList out;
  for (const auto& [key, value] : environ_vars) {
    bool wanted = StartsWith(key, "NCCL_") || StartsWith(key, "UCX_") || StartsWith(key, "ZERORUN_");
    for (const char* skip : kPerJob) wanted = wanted && key != skip;
    if (wanted) EnvSet(&out, key, value);
  }
  for (const auto& [key, value] : env_file_entries) EnvSet(&out, key, value);
  return out;
}

EnvList CurrentEnviron() {
  EnvList out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

EnvList LoadEnvFiles() {
  std::vector<std::string> paths;
  if (const char* explicit_path = std::getenv("ZERORUN_ENV_FILE"); explicit_path && *explicit_path) {
    paths.push_back(explicit_path);
  } else {
    if (const char* home = std::getenv("HOME"); home && *home) paths.push_back(std::string(home) + "/.zerorun_env");
    paths.push_back(".zerorun_env");
  }
  EnvList out;
  for (const std::string& p : paths) {
    bool ok = false;
    std::string text = ReadFile(p, &ok);
    if (!ok) continue;
    for (const auto& [k, v] : ParseEnvFile(text, p)) EnvSet(&out, k, v);
  }
  return out;
}

std::string NewJobToken() {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) ZR_THROW(IoError, "{}", ErrnoMessage("open /dev/urandom", errno));
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = read(fd, bytes + got, sizeof bytes - got);
    if (n <= 0) {
      int err = errno;
      close(fd);
      ZR_THROW(IoError, "{}", ErrnoMessage("read /dev/urandom", err));
    }
    got += static_cast<size_t>(n);
  }
  close(fd);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace zerorun::launcher
