// zerorun-train: the main job. Trains a GPT-2 style model (examples/gpt) with a DeepSpeed config on
// the synthetic Markov corpus (known entropy floor) or on token/text files, as one process or as one
// rank of a job started by the `zerorun` launcher (RANK, WORLD_SIZE, MASTER_ADDR, ... in the env).
// Prints progress on rank 0 and writes a JSON summary per rank with --summary.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/core/timer.h"
#include "zerorun/examples/gpt/gpt.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/data/dataset.h"
#include "zerorun/runtime/data/markov.h"
#include "zerorun/runtime/data/sampler.h"
#include "zerorun/runtime/distributed.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_validate.h"
#include "zerorun/runtime/spike_guard.h"
#include "zerorun/runtime/summary.h"

namespace zr = zerorun;
using zr::runtime::Config;

namespace {

// The built-in default job: a small GPT on the synthetic corpus, bf16, AdamW with a WarmupCosineLR
// schedule. Used when no --deepspeed_config is given.
const char* kDefaultConfig = R"({
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"total_num_steps": 300, "warmup_num_steps": 20, "cos_min_ratio": 0.1}},
  "bf16": {"enabled": true},
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 1}
})";

const char* kUsage = R"(usage: zerorun-train [--deepspeed_config FILE] [options]

Trains a GPT-2 style model with a DeepSpeed JSON config. Alone it runs one process; started by the
`zerorun` launcher it is one rank of a data-parallel job.

  --deepspeed_config FILE  DeepSpeed JSON config (default: a built-in bf16 / ZeRO-1 / WarmupCosineLR job)
  --steps N                optimizer steps to run (default 300)
  --seed S                 model init and data shuffle seed (default 1234)
  --data synthetic|PATH    the synthetic Markov corpus (default), or token shards (.bin, llm.c layout),
                           a directory or glob of them, or byte-level text files
  --n_layer L --n_head H --d_model C --seq_len T --vocab_size V
                           model dims (default 4, 4, 128, 64, 64; V is 256 for text data)
  --dropout P              dropout probability (default 0)
  --checkpoint_activations recompute each transformer block's activations in backward instead of
                           keeping them (activation checkpointing; a config's activation_checkpointing
                           section turns it on too, with its options)
  --summary PATH           write a JSON summary per rank ({rank} in PATH is replaced)
  --save_dir DIR           save training checkpoints (docs/checkpoint.md) to DIR: every --save_interval
                           steps and after the last step
  --save_interval N        steps between checkpoints (default: only after the last step)
  --load_dir DIR           resume from a checkpoint in DIR (the one DIR/latest names; none there: start
                           from step 0); --steps stays the total, so a run resumed at step 10 of
                           --steps 20 runs 10 more. A launcher restart (--max_restarts) with
                           --load_dir = --save_dir resumes from the newest checkpoint
  --load_tag TAG           load this tag instead of latest
  --load_one_pass          read the checkpoint once, checking each block's checksum as it is applied
                           (past the page cache where the file system allows); a damaged checkpoint
                           then leaves the run PARTLY loaded, where by default every byte is checked
                           before anything changes (LoadCheckpointOptions::verify_before_apply)
  --spike_threshold Z      loss-spike rollback: a step whose loss or global gradient norm is more than Z
                           standard deviations above the mean of the last --spike_window accepted steps
                           (or is not finite) is undone: the run goes back to the last checkpoint
                           (--save_dir, every --save_interval steps; both needed), never trains on that
                           step's batches again and carries on (default 0: off)
  --spike_window W         accepted steps the statistics cover (default 20; none judged before W)
  --spike_max_rollbacks N  fail after N rollbacks in one run: spikes that skipping batches does not
                           cure are not bad data (default 5)
  --save_16bit_model DIR   after training, save the model's weights (its dtype) to DIR/model.safetensors
                           (every rank takes part; ZeRO stage 3 needs
                           zero_optimization.stage3_gather_16bit_weights_on_model_save: true)
  --log_every N            progress line every N steps on rank 0 (default 10)
  --eval_batches N         after training, the final model's mean loss over N held-out batches (micro
                           batch x seq_len tokens each; split over the ranks) as eval_loss in the summary
                           and the last line: --eval_data, or the synthetic corpus's held-out documents
                           (drawn apart from the training ones). Each rank holds a full copy of the model
                           for it (default 0: none)
  --eval_data PATH         held-out data for --eval_batches (same formats as --data; needed with --data files)
  --trace FILE             write a Chrome trace-event timeline (Perfetto, chrome://tracing) of each rank:
                           steps, module forward/backward/recompute, optimizer sub-groups, collectives with
                           bytes; {rank} in FILE is replaced, else ranks > 0 write FILE's stem + .rank<R>
  --trace_steps N          trace only the first N steps (default 0: all)
  --profile_window A:B     also time steps A..B (1-based, inclusive; the first steps warm up caches and
                           allocators): window_tokens_per_second and window_step_ms in the summary
                           (zerorun-sweep --autotune measures start_profile_step..end_profile_step so)
  --backend ucx|local|nccl communication backend for multi-rank jobs (default: ZERORUN_COMM_BACKEND or ucx)
  --device cpu|cuda        where the model, gradients and optimizer state live (default: the backend's
                           device, cpu for ucx/local). cuda: one GPU per local rank (LOCAL_RANK), NCCL
                           as the backend (CUDA builds; a single process without a launcher forms a
                           one-rank NCCL group)
  --allow_unknown_config   unknown config keys are warnings instead of errors
  --local_rank N           accepted for launcher compatibility
  --help                   this text
)";

struct Args {
  std::string config_path;
  int64_t steps = 300;
  uint64_t seed = 1234;
  std::string data = "synthetic";
  int64_t n_layer = 4, n_head = 4, d_model = 128, seq_len = 64, vocab_size = -1;
  float dropout = 0.0f;
  std::string summary;
  std::string save_16bit_model;
  std::string save_dir, load_dir, load_tag;
  int64_t save_interval = 0;
  double spike_threshold = 0;
  int64_t spike_window = 20, spike_max_rollbacks = 5;
  int64_t log_every = 10;
  int64_t eval_batches = 0;
  std::string eval_data;
  int64_t window_first = 0, window_last = 0;  // --profile_window (0: none)
  std::string backend;
  std::string device;  // "", "cpu" or "cuda"
  bool allow_unknown = false;
  bool checkpoint_activations = false;
  bool load_one_pass = false;
  std::string trace;
  int64_t trace_steps = 0;
};

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "zerorun-train: %s\n\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

int64_t ParseInt(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < min) {
    UsageError(zr::Format("{} expects an integer >= {}, got '{}'", flag, min, v));
  }
  return x;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  std::map<std::string, std::string*> strings = {{"--deepspeed_config", &a.config_path}, {"--data", &a.data},
                                                 {"--summary", &a.summary}, {"--backend", &a.backend}, {"--device", &a.device},
                                                 {"--save_16bit_model", &a.save_16bit_model},
                                                 {"--trace", &a.trace}, {"--save_dir", &a.save_dir},
                                                 {"--load_dir", &a.load_dir}, {"--load_tag", &a.load_tag},
                                                 {"--eval_data", &a.eval_data}};
  std::map<std::string, std::pair<int64_t*, int64_t>> ints = {
      {"--steps", {&a.steps, 1}},     {"--n_layer", {&a.n_layer, 1}}, {"--n_head", {&a.n_head, 1}},
      {"--d_model", {&a.d_model, 1}}, {"--seq_len", {&a.seq_len, 1}}, {"--vocab_size", {&a.vocab_size, 2}},
      {"--log_every", {&a.log_every, 1}}, {"--trace_steps", {&a.trace_steps, 0}},
      {"--save_interval", {&a.save_interval, 1}}, {"--eval_batches", {&a.eval_batches, 0}},
      {"--spike_window", {&a.spike_window, 2}}, {"--spike_max_rollbacks", {&a.spike_max_rollbacks, 1}}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    std::replace(arg.begin() + 2 < arg.end() ? arg.begin() + 2 : arg.end(), arg.end(), '-', '_');
    auto take = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--allow_unknown_config") {
      a.allow_unknown = true;
    } else if (arg == "--checkpoint_activations") {
      a.checkpoint_activations = true;
    } else if (arg == "--load_one_pass") {
      a.load_one_pass = true;
    } else if (arg == "--local_rank") {
      ParseInt(arg, take(), 0);
    } else if (arg == "--profile_window") {
      const std::string v = take();
      const size_t colon = v.find(':');
      if (colon == std::string::npos) UsageError(zr::Format("--profile_window expects A:B, got '{}'", v));
      a.window_first = ParseInt(arg, v.substr(0, colon), 1);
      a.window_last = ParseInt(arg, v.substr(colon + 1), a.window_first);
    } else if (arg == "--seed") {
      a.seed = static_cast<uint64_t>(ParseInt(arg, take(), 0));
    } else if (arg == "--dropout") {
      std::string v = take();
      char* end = nullptr;
      a.dropout = std::strtof(v.c_str(), &end);
      if (v.empty() || *end != '\0' || a.dropout < 0 || a.dropout >= 1) UsageError("--dropout expects 0 <= p < 1");
    } else if (arg == "--spike_threshold") {
      std::string v = take();
      char* end = nullptr;
      a.spike_threshold = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(a.spike_threshold >= 0) || !std::isfinite(a.spike_threshold)) {
        UsageError(zr::Format("--spike_threshold expects a number of standard deviations >= 0, got '{}'", v));
      }
    } else if (strings.count(arg)) {
      *strings[arg] = take();
    } else if (ints.count(arg)) {
      *ints[arg].first = ParseInt(arg, take(), ints[arg].second);
    } else {
      UsageError("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  if (a.spike_threshold > 0 && (a.save_dir.empty() || a.save_interval == 0)) {
    UsageError("--spike_threshold needs --save_dir and --save_interval: the checkpoints a spike rolls back to");
  }
  if (a.window_last > a.steps) {
    UsageError(zr::Format("--profile_window {}:{} ends after the last step ({})", a.window_first, a.window_last, a.steps));
  }
  return a;
}

// The entropy floor formatted with `fmt`, or "" when the data has none.
std::string FloorText(const char* fmt, double floor) {
  if (floor < 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, floor);
  return buf;
}

zr::Tensor ToTensor(const std::vector<int32_t>& v, int64_t B, int64_t T) {
  zr::Tensor t = zr::Tensor::Empty({B, T}, zr::DType::kI32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

// Test hook for the restart tests: ZERORUN_TRAIN_TEST_KILL="<step>:<rank>" makes that rank SIGKILL
// itself right after that step (and its save, if any) in the first generation of a launcher job
// (ZERORUN_RESTART unset or 0), as a crash would.
struct KillHook {
  int64_t step = -1;
  int rank = -1;
};

KillHook KillHookFromEnv() {
  KillHook k;
  const char* spec = std::getenv("ZERORUN_TRAIN_TEST_KILL");
  const char* gen = std::getenv("ZERORUN_RESTART");
  if (!spec || (gen && std::string(gen) != "0")) return k;
  long long step = -1;
  int r = -1;
  if (std::sscanf(spec, "%lld:%d", &step, &r) != 2) {
    UsageError(zr::Format("ZERORUN_TRAIN_TEST_KILL expects <step>:<rank>, got '{}'", spec));
  }
  k.step = step;
  k.rank = r;
  return k;
}

// `windows` windows of seq_len + 1 tokens of the synthetic Markov chain (vocab V, chain seed 4242), in
// documents of 64 windows sampled under `sample_seed` (777: training, 778: held out); the chain's
// entropy rate to *entropy_floor when given.
std::unique_ptr<zr::data::TokenDataset> SyntheticCorpus(int64_t vocab, int64_t windows, int64_t seq_len,
                                                        uint64_t sample_seed, const std::string& name,
                                                        double* entropy_floor) {
  zr::data::MarkovChainOptions mo;
  mo.vocab_size = static_cast<int>(vocab);
  mo.seed = 4242;
  zr::data::MarkovChain chain(mo);
  if (entropy_floor != nullptr) *entropy_floor = chain.EntropyRateNats();
  const int64_t doc_tokens = 64 * seq_len + 1;
  std::vector<std::vector<int32_t>> docs;
  for (int64_t d = 0; d * 64 < windows; ++d) docs.push_back(chain.Sample(doc_tokens, sample_seed, static_cast<uint64_t>(d)));
  return zr::data::MakeInMemoryDataset(std::move(docs), name);
}

// Token shards (.bin, llm.c layout) or byte-level text files: a path, directory or glob. A *vocab < 0
// becomes the format's (50257 for shards, 256 for text).
std::unique_ptr<zr::data::TokenDataset> OpenDataFiles(const std::string& spec, int64_t* vocab) {
  std::vector<std::string> paths = zr::data::ExpandDataPaths(spec);
  const bool shards = paths.front().size() > 4 && paths.front().substr(paths.front().size() - 4) == ".bin";
  if (*vocab < 0) *vocab = shards ? 50257 : 256;
  return shards ? zr::data::OpenTokenShards(paths, *vocab) : zr::data::OpenByteTextFiles(paths, *vocab);
}

// The final model's mean loss over `batches` held-out batches: the parameters gathered into a second
// copy of the model (eval mode: no dropout), rank r taking batches r, r + world, ...; the mean over
// every batch evaluated (the count rounded up to a multiple of the world size), agreed across ranks.
double Evaluate(zr::runtime::Engine& engine, const zr::gpt::GptConfig& gc, zr::data::TokenDataset& data,
                int64_t batches, int64_t micro_batch, zr::comm::Communicator& comm, int64_t* evaluated) {
  std::vector<zr::Tensor> values = engine.GatherParameters();  // a collective at stage 3
  zr::gpt::Gpt model(gc);
  std::vector<zr::nn::Parameter*> params = model.Parameters();
  ZR_CHECK(params.size() == values.size(), "eval model has {} parameters, the engine {}", params.size(), values.size());
  for (size_t i = 0; i < params.size(); ++i) params[i]->BindData(values[i]);  // new CPU tensors of the same shape
  values.clear();
  model.Eval();
  zr::data::SamplerOptions so;
  so.batch_size = micro_batch;
  so.seq_len = gc.seq_len;
  so.rank = comm.rank();
  so.world_size = comm.size();
  so.seed = 97;  // a fixed order: every run evaluates the same batches
  so.drop_last = true;
  zr::data::DistributedSampler sampler(data, so);
  const int64_t per_rank = (batches + comm.size() - 1) / comm.size();
  double sum = 0;
  for (int64_t k = 0; k < per_rank; ++k) {
    zr::data::Batch b = sampler.Next();
    sum += model.ForwardLoss(ToTensor(b.inputs, b.B, b.T), ToTensor(b.targets, b.B, b.T));
  }
  if (comm.size() > 1) comm.AllReduce(&sum, 1, zr::DType::kF64, zr::comm::ReduceOp::kSum).Wait();
  *evaluated = per_rank * comm.size();
  return sum / static_cast<double>(*evaluated);
}

int Run(const Args& args) {
  zr::comm::InitOptions io;
  io.backend = args.backend;
  if (!args.device.empty() && args.device != "cpu" && args.device != "cuda") {
    UsageError(zr::Format("--device expects cpu or cuda, got '{}'", args.device));
  }
  if (args.device == "cuda") {
#ifndef ZERORUN_HAVE_CUDA
    std::fprintf(stderr, "zerorun-train: --device cuda: this zerorun was built without CUDA (reconfigure with "
                 "-DZERORUN_CUDA=ON on a machine with the CUDA toolkit and NCCL)\n");
    return 2;
#endif
    if (!args.backend.empty() && args.backend != "nccl") {
      UsageError(zr::Format("--device cuda trains on device memory, which --backend {} cannot move: use nccl",
                            args.backend));
    }
    io.backend = "nccl";
    const int gpus = zr::HasDeviceBackend(zr::DeviceType::kCUDA) ? zr::GetDeviceBackend(zr::DeviceType::kCUDA).DeviceCount() : 0;
    const char* lr = std::getenv("LOCAL_RANK");
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const int local_rank = lr != nullptr && *lr != '\0' ? std::atoi(lr) : 0;
    if (local_rank >= gpus) {
      std::fprintf(stderr, "zerorun-train: --device cuda: local rank %d needs cuda:%d, but %d CUDA device(s) are "
                   "visible (CUDA_VISIBLE_DEVICES=%s)\n", local_rank, local_rank, gpus, visible ? visible : "unset");
      return 2;
    }
  } else if (args.device == "cpu" && args.backend == "nccl") {
    UsageError("--device cpu with --backend nccl: NCCL moves device memory (use ucx or local)");
  }
  zr::runtime::LoadOptions lo;
  lo.allow_unknown_keys = args.allow_unknown;
  lo.hidden_size = args.d_model;
  lo.source_name = args.config_path.empty() ? "built-in default config" : "";
  zr::runtime::DistributedSetup setup =
      zr::runtime::InitFromEnvironment(args.config_path, kDefaultConfig, lo, io);
  std::shared_ptr<zr::comm::Communicator> comm = setup.comm;
  const Config& cfg = setup.config;
  const int rank = comm->rank(), world = comm->size();
  if (rank == 0) ZR_INFO("device {} (backend {})", comm->device().ToString(), comm->backend_name());
  zr::runtime::ValidateForEngine(cfg, world);  // what the engine refuses, before data and model are built
  if (!args.save_16bit_model.empty() && cfg.zero_optimization.StageNumber() == 3 &&
      !cfg.zero_optimization.gather_16bit_weights_on_model_save) {
    // Refused before training rather than discovering after it that nothing can be saved.
    std::fprintf(stderr, "zerorun-train: --save_16bit_model at ZeRO stage 3 needs \"zero_optimization\": "
                 "{\"stage3_gather_16bit_weights_on_model_save\": true} in the config\n");
    return 2;
  }

  // Data.
  std::unique_ptr<zr::data::TokenDataset> dataset;
  double entropy_floor = -1;
  int64_t vocab = args.vocab_size;
  if (args.data == "synthetic") {
    if (vocab < 0) vocab = 64;
    // Enough windows for every step without repeating on any rank.
    dataset = SyntheticCorpus(vocab, std::max<int64_t>(cfg.train_batch_size() * args.steps, 256), args.seq_len, 777,
                              zr::Format("synthetic Markov corpus (vocab {})", vocab), &entropy_floor);
  } else {
    dataset = OpenDataFiles(args.data, &vocab);
  }
  // Held-out data for --eval_batches: --eval_data, or documents of the same chain under another sample seed.
  std::unique_ptr<zr::data::TokenDataset> eval_set;
  if (args.eval_batches > 0) {
    if (!args.eval_data.empty()) {
      eval_set = OpenDataFiles(args.eval_data, &vocab);
    } else if (args.data == "synthetic") {
      eval_set = SyntheticCorpus(vocab, std::max<int64_t>(args.eval_batches * cfg.micro_batch_per_gpu(), 64), args.seq_len,
                                 778, "held-out synthetic documents", nullptr);
    } else {
      UsageError("--eval_batches with --data files needs --eval_data PATH (held-out files)");
    }
  } else if (!args.eval_data.empty()) {
    UsageError("--eval_data without --eval_batches N");
  }
  zr::data::SamplerOptions so;
  so.batch_size = cfg.micro_batch_per_gpu();
  so.seq_len = args.seq_len;
  so.rank = rank;
  so.world_size = world;
  so.seed = args.seed;
  so.drop_last = cfg.batch.dataloader_drop_last;  // false (DeepSpeed's default): an epoch's last batch is partial
  zr::data::DistributedSampler sampler(*dataset, so);

  // Model.
  zr::gpt::GptConfig gc;
  gc.n_layer = args.n_layer;
  gc.n_head = args.n_head;
  gc.d_model = args.d_model;
  gc.seq_len = args.seq_len;
  gc.vocab_size = vocab;
  gc.dropout = args.dropout;
  gc.dtype = cfg.ModelDType();
  if (gc.d_model % gc.n_head != 0) UsageError("--d_model must be a multiple of --n_head");
  zr::gpt::Gpt model(gc);
  zr::runtime::EngineOptions eo;
  if (args.checkpoint_activations) {  // every block, or as the config's activation_checkpointing section says
    eo.activation_checkpointing =
        zr::runtime::ActivationCheckpointingOptions::FromConfig(cfg).value_or(zr::runtime::ActivationCheckpointingOptions{});
  }
  eo.groups.no_weight_decay_for_1d = true;
  eo.init_seed = args.seed;  // the engine fills parameters (at stage 3 only this rank's shards)
  eo.trace_file = args.trace;
  eo.trace_steps = args.trace_steps;
  zr::runtime::Engine engine(model, cfg, comm, eo);
  if (rank == 0) {
    ZR_INFO("gemm: {}", zr::kernels::GemmDescription());
    if (std::string w = zr::kernels::GemmWarning(); !w.empty()) ZR_WARN("{}", w);
    ZR_INFO("model {} ({} parameters); data {}{}", gc.ToString(), engine.num_parameters(), dataset->description(),
            entropy_floor >= 0 ? zr::Format(" (entropy floor {} nats/token)", entropy_floor) : std::string());
    if (const auto* ac = engine.activation_checkpointer()) {
      ZR_INFO("activation checkpointing: {} checkpoint(s): {}{}{}", ac->num_checkpoints(), ac->Describe(),
              ac->options().cpu_checkpointing ? ", inputs in host memory" : "",
              ac->options().contiguous_memory_optimization ? ", one contiguous buffer" : "");
    }
  }

  // Loss-spike rollback: the statistics, and the last checkpoint a spike can go back to.
  std::optional<zr::runtime::SpikeGuard> guard;
  if (args.spike_threshold > 0) {
    zr::runtime::SpikeGuardOptions go;
    go.threshold = args.spike_threshold;
    go.window = args.spike_window;
    guard.emplace(go);
  }
  std::string good_dir;  // the checkpoint directory itself (<dir>/<tag>)
  int64_t good_step = -1;

  // Resume: the engine state, the sampler's cursor and the dropout RNG from the checkpoint.
  int64_t first_step = 0;
  if (!args.load_dir.empty()) {
    zr::runtime::LoadCheckpointOptions lo;
    lo.tag = args.load_tag;
    lo.sampler = &sampler;
    lo.verify_before_apply = !args.load_one_pass;
    zr::Stopwatch load_watch;
    zr::runtime::LoadCheckpointResult r = engine.LoadCheckpoint(args.load_dir, lo);
    const double load_s = load_watch.ElapsedSeconds();
    if (r.loaded) {
      first_step = engine.global_steps();
      good_dir = r.dir;
      good_step = first_step;
      if (guard) guard->FromClientState(r.client_state_json, r.dir);  // the window as it was at the save
      if (rank == 0) {
        std::printf("resumed from %s at step %lld (loaded in %.3f s)\n", r.dir.c_str(), static_cast<long long>(first_step),
                    load_s);
        std::fflush(stdout);
      }
    }
  }
  const KillHook kill = KillHookFromEnv();
  auto save = [&](int64_t step) {
    zr::runtime::SaveCheckpointOptions so;
    so.sampler = &sampler;
    if (guard) so.client_state_json = guard->ToClientState();
    zr::Stopwatch save_watch;
    zr::runtime::SaveCheckpointResult r = engine.SaveCheckpoint(args.save_dir, so);
    const double save_s = save_watch.ElapsedSeconds();
    good_dir = r.dir;
    good_step = step;
    if (rank == 0) {  // this rank's bytes; the save is a collective, so its time is every rank's
      // The wait for a previous asynchronous save's files is said apart: it is not this save's cost.
      char waited[96] = "";
      if (r.waited_for_previous_s > 0) {
        std::snprintf(waited, sizeof waited, " (of which %.3f s finishing the previous save)", r.waited_for_previous_s);
      }
      if (r.in_background) {
        std::printf("saved checkpoint %s (step %lld): snapshot taken, files writing in the background, %.3f s%s\n",
                    r.dir.c_str(), static_cast<long long>(step), save_s, waited);
      } else {
        std::printf("saved checkpoint %s (step %lld): rank 0 wrote %llu bytes, %.3f s%s\n", r.dir.c_str(),
                    static_cast<long long>(step), static_cast<unsigned long long>(r.bytes_written), save_s, waited);
      }
      std::fflush(stdout);
    }
  };

  zr::runtime::TrainSummary summary;
  const int64_t gas = cfg.gradient_accumulation_steps();
  const int64_t tokens_per_step_rank = cfg.micro_batch_per_gpu() * gas * args.seq_len;
  if (args.window_first > 0 && args.window_first <= first_step) {
    UsageError(zr::Format("--profile_window {}:{} starts at or before step {}, where this run resumed", args.window_first,
                          args.window_last, first_step));
  }
  // Batches a spike rolled back, by (epoch, batch) of this rank's sampler: drawn and dropped.
  std::set<std::pair<int64_t, int64_t>> skip;
  std::vector<std::pair<int64_t, int64_t>> step_batches;  // this step's
  auto next_batch = [&] {
    for (;;) {
      const zr::data::SamplerCursor c = sampler.cursor();
      if (!skip.count({c.epoch, c.batch})) {
        step_batches.emplace_back(c.epoch, c.batch);
        return sampler.Next();
      }
      sampler.Next();
      ZR_INFO("skipping batch {} of epoch {} (a spike rolled it back)", c.batch, c.epoch);
    }
  };
  summary.spike_guard = guard.has_value();
  int64_t steps_run = 0;  // steps executed, rolled-back and replayed ones included (for tokens/s)
  zr::Stopwatch wall;
  double window_start_s = 0, window_end_s = 0;
  for (int64_t step = first_step; step < args.steps; ++step) {
    if (step + 1 == args.window_first) window_start_s = wall.ElapsedSeconds();
    double loss_sum = 0;
    step_batches.clear();
    for (int64_t m = 0; m < gas; ++m) {
      zr::data::Batch b = next_batch();
      zr::Tensor x = ToTensor(b.inputs, b.B, b.T);  // b.B < micro batch: the last batch of an epoch
      zr::Tensor y = ToTensor(b.targets, b.B, b.T);
      loss_sum += engine.Forward(x, y);
      engine.Backward();
      engine.Step();
    }
    ++steps_run;
    double loss = loss_sum / static_cast<double>(gas);
    if (world > 1) comm->AllReduce(&loss, 1, zr::DType::kF64, zr::comm::ReduceOp::kAvg).Wait();
    // Every rank judges the same all-reduced loss and global norm, so all decide alike. A step the
    // engine skipped (fp16 overflow) changed nothing and is the loss scaler's business.
    if (guard && engine.last_step().applied) {
      const zr::runtime::SpikeVerdict v = guard->Judge(loss, engine.GetGlobalGradNorm());
      if (!v.spike) {
        guard->Accept(step + 1, loss, engine.GetGlobalGradNorm());
      } else if (good_step < 0) {
        if (rank == 0) {
          ZR_WARN("step {}: {}; no checkpoint to roll back to yet (the first is saved at step {}): the step stays",
                  step + 1, v.Describe(), args.save_interval);
        }
      } else {
        if (static_cast<int64_t>(summary.rollbacks.size()) >= args.spike_max_rollbacks) {
          ZR_THROW(zr::DataError, "step {}: {}; this run already rolled back {} time(s) (--spike_max_rollbacks): spikes "
                   "that skipping batches does not cure are not one bad batch (lower the learning rate, or raise "
                   "--spike_threshold / --spike_max_rollbacks)",
                   step + 1, v.Describe(), summary.rollbacks.size());
        }
        zr::runtime::SpikeRollback rb;
        rb.step = step + 1;
        rb.restored_step = good_step;
        rb.metric = v.metric;
        rb.value = v.value;
        rb.mean = v.mean;
        rb.zscore = v.zscore;
        rb.skipped_batches = step_batches;
        for (const auto& eb : step_batches) skip.insert(eb);
        zr::runtime::LoadCheckpointOptions lo;  // no tag: good_dir is the checkpoint itself
        lo.sampler = &sampler;
        zr::runtime::LoadCheckpointResult r = engine.LoadCheckpoint(good_dir, lo);
        ZR_CHECK(r.loaded && engine.global_steps() == good_step);
        guard->FromClientState(r.client_state_json, r.dir);
        if (rank == 0) {
          std::printf("loss spike at step %lld: %s; rolled back to step %lld (%s); its %lld batch(es) per rank are skipped\n",
                      static_cast<long long>(step + 1), v.Describe().c_str(), static_cast<long long>(good_step),
                      r.dir.c_str(), static_cast<long long>(step_batches.size()));
          std::fflush(stdout);
        }
        summary.rollbacks.push_back(std::move(rb));
        summary.losses.resize(static_cast<size_t>(good_step - first_step));
        step = good_step - 1;  // the loop's ++step resumes at the checkpoint's next step
        continue;
      }
    }
    summary.losses.push_back(loss);
    if (step + 1 == args.window_last) window_end_s = wall.ElapsedSeconds();
    if (rank == 0 && ((step + 1) % args.log_every == 0 || step == 0 || step + 1 == args.steps)) {
      double tps = static_cast<double>(tokens_per_step_rank * world * steps_run) / wall.ElapsedSeconds();
      std::printf("step %5lld/%lld | loss %.4f%s | lr %.3g | scale %g | grad norm %.3f | %.0f tokens/s%s\n",
                  static_cast<long long>(step + 1), static_cast<long long>(args.steps), loss,
                  FloorText(" (floor %.4f)", entropy_floor).c_str(),
                  engine.GetLr().front(), engine.loss_scale(), engine.GetGlobalGradNorm(), tps,
                  engine.last_step().applied ? "" : " (skipped)");
      std::fflush(stdout);
    }
    const bool last = step + 1 == args.steps;
    if (!args.save_dir.empty() && (last || (args.save_interval > 0 && (step + 1) % args.save_interval == 0))) {
      save(step + 1);
    }
    if (kill.rank == rank && kill.step == step + 1) std::raise(SIGKILL);  // the test hook below
  }
  double seconds = wall.ElapsedSeconds();
  if (eval_set) {
    int64_t evaluated = 0;
    summary.eval_loss = Evaluate(engine, gc, *eval_set, args.eval_batches, cfg.micro_batch_per_gpu(), *comm, &evaluated);
    summary.eval_batches = evaluated;
    if (rank == 0) {
      std::printf("eval: loss %.4f over %lld held-out batches (%s)%s\n", summary.eval_loss,
                  static_cast<long long>(evaluated), eval_set->description().c_str(),
                  FloorText(", entropy floor %.4f", entropy_floor).c_str());
      std::fflush(stdout);
    }
  }
  summary.rank = rank;
  summary.world_size = world;
  summary.zero_stage = engine.zero_stage();
  summary.dtype = zr::DTypeName(engine.model_dtype());
  summary.backend = comm->backend_name();
  summary.gemm = zr::kernels::GemmDescription();
  summary.steps = engine.global_steps();
  summary.skipped_steps = engine.skipped_steps();
  summary.global_samples = engine.global_samples();
  summary.micro_batch = cfg.micro_batch_per_gpu();
  summary.gradient_accumulation_steps = gas;
  summary.seq_len = args.seq_len;
  summary.final_loss = summary.losses.empty() ? 0 : summary.losses.back();
  summary.entropy_floor = entropy_floor;
  summary.loss_scale = engine.loss_scale();
  summary.lr = engine.GetLr().front();
  summary.grad_norm = engine.GetGlobalGradNorm();
  summary.tokens_per_second = static_cast<double>(tokens_per_step_rank * steps_run) / seconds;
  summary.wall_seconds = seconds;
  if (args.window_first > 0) {
    const int64_t n = args.window_last - args.window_first + 1;
    const double window_s = window_end_s - window_start_s;
    summary.window_first_step = args.window_first;
    summary.window_last_step = args.window_last;
    summary.window_tokens_per_second = static_cast<double>(tokens_per_step_rank * n) / window_s;
    summary.window_step_ms = window_s * 1e3 / static_cast<double>(n);
  }
  summary.parameters = engine.num_parameters();
  summary.memory = engine.memory().Snap();
  zr::comm::CommStats stats = comm->Stats();
  for (int op = 0; op < zr::comm::kNumOpTypes; ++op) {
    const auto& s = stats.by_op[static_cast<size_t>(op)];
    if (s.calls == 0) continue;
    summary.comm_bytes[zr::comm::OpTypeName(static_cast<zr::comm::OpType>(op))] = {s.calls, s.bytes_sent,
                                                                                  s.bytes_received, s.total_time_s};
  }
  // The engine's timers (totals; with wall_clock_breakdown rank 0 resets them at each breakdown line).
  for (const char* t : {"forward", "backward", "backward_allreduce", "step", "allgather", "reduce_wait"}) {
    summary.timers_ms[t] = 0;
  }
  for (const auto& [name, e] : engine.timers().All()) summary.timers_ms[name] = e.total_ms;
  if (rank == 0) {
    std::printf("done: %lld steps (%lld skipped) in %.1f s, final loss %.4f%s, %.0f tokens/s per rank\n",
                static_cast<long long>(summary.steps), static_cast<long long>(summary.skipped_steps), seconds,
                summary.final_loss,
                FloorText(" (entropy floor %.4f)", entropy_floor).c_str(),
                summary.tokens_per_second);
    std::printf("memory (rank 0): %s\n", engine.memory().Summary().c_str());
    std::printf("%s\n", zr::runtime::CommReport(summary, static_cast<int>(zr::DTypeSize(cfg.CommDType()))).c_str());
    if (cfg.comms_logger.enabled) std::printf("%s\n", comm->LogSummary().c_str());
  }
  if (!args.save_16bit_model.empty()) {
    const std::string file = "model.safetensors";
    engine.Save16BitModel(args.save_16bit_model, file);  // every rank: a collective at stage 3
    if (rank == 0) {
      std::printf("saved the %s model to %s/%s\n", zr::DTypeName(engine.model_dtype()),
                  args.save_16bit_model.c_str(), file.c_str());
    }
  }
  if (!args.trace.empty()) {
    const std::string path = engine.WriteTrace();
    if (rank == 0) std::printf("trace: %s (one file per rank; docs/monitoring.md)\n", path.c_str());
  }
  if (!args.summary.empty()) zr::runtime::WriteSummaryJson(summary, zr::runtime::ExpandRankPattern(args.summary, rank));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = ParseArgs(argc, argv);
  try {
    return Run(args);
  } catch (const zr::runtime::ConfigLoadError& e) {
    std::fprintf(stderr, "zerorun-train: %s\n", e.what());
    return 2;
  } catch (const zr::Error& e) {
    std::fprintf(stderr, "zerorun-train: error: %s\n", e.what());
    return 1;
  }
}
