// Engine::SaveCheckpoint / LoadCheckpoint: the engine's state as a training checkpoint
// (docs/checkpoint.md) through the collective writer (checkpoint_writer.h) and the resharding reader
// (checkpoint_reader.h), reading and writing the ZeRO state store by range (zero/state_store.h).
//
// What each rank writes: for every tensor (a parameter, model order) the slots `param` (model dtype),
// and for trainable ones `fp32` (master) and the optimizer's state slots. A rank writes the element
// ranges it owns: its StateExtents (the partition of stages 1-3) for trainable parameters, its
// stage-3 shard for frozen ones; where every rank holds everything (stage 0, one rank, frozen
// parameters at stages 0-2) each rank writes an even 1/W slice, so the save is spread over all ranks.
// Loading reads, at any world size and stage, the ranges this rank holds: its local parameter copy
// (the whole parameter at stages 0-2, its shard at stage 3) and its extents of master and state.
// Every byte to apply is read and its checksum verified before any live state changes, and the ranks
// agree on errors first, so a bad checkpoint throws on every rank and leaves the engine as it was;
// the verified bytes are then read again (page cache) into the engine, chunk by chunk.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/runtime/checkpoint_agree.h"
#include "zerorun/runtime/checkpoint_reader.h"
#include "zerorun/runtime/checkpoint_state.h"
#include "zerorun/runtime/checkpoint_writer.h"
#include "zerorun/runtime/data/sampler.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"

namespace zerorun::runtime {

namespace {

// Elements [r·ceil(n/W), (r+1)·ceil(n/W)) ∩ [0, n): rank r's share of something every rank holds.
zero::Range EvenShare(int64_t n, int world, int rank) {
  const int64_t per = (n + world - 1) / world;
  return {std::min(n, per * rank), std::min(n, per * (rank + 1))};
}

// One contiguous piece of one parameter this rank saves or loads.
struct Piece {
  int64_t param_offset = 0;
  int64_t numel = 0;
  int group = -1;               // trainable: the state store's group
  int64_t partition_offset = 0;  // trainable: where in that group's partition
};

// What a load's read request fills: parameter `id`'s local copy (slot < 0), or the piece of a state slot.
struct Apply {
  int id = -1;
  int slot = -1;
  Piece piece{};
};

// Reads every state request (applies[i].slot >= 0) of a store whose buffers are host memory straight
// into them: sub-group by sub-group, acquired for kReadWrite (a partial load keeps the rest), all the
// sub-group's pieces in one read (`verified`: the blocks Verify already checked; false: hashed as they are read, the
// one-pass load). The caller flushes the store.
void ReadStateDirect(CheckpointReader& reader, zero::StateStore& store,
                     const std::vector<CheckpointReadRequest>& requests, const std::vector<Apply>& applies,
                     bool verified) {
  const zero::StateStoreLayout& l = store.layout();
  for (int i = 0; i < l.num_sub_groups(); ++i) {
    const zero::StateSubGroup& sg = l.sub_groups[static_cast<size_t>(i)];
    std::vector<CheckpointReadRequest> parts;
    std::vector<std::pair<int, int64_t>> at;  // (slot, element offset in the sub-group) of each part
    for (size_t r = 0; r < requests.size(); ++r) {
      const Apply& ap = applies[r];
      if (ap.slot < 0 || ap.piece.group != sg.group) continue;
      const zero::Range want{ap.piece.partition_offset, ap.piece.partition_offset + requests[r].numel};
      const zero::Range piece = zero::Intersect(sg.range, want);
      if (piece.empty()) continue;
      CheckpointReadRequest part = requests[r];
      part.offset += piece.begin - want.begin;
      part.numel = piece.size();
      parts.push_back(std::move(part));
      at.emplace_back(ap.slot, piece.begin - sg.range.begin);
    }
    if (parts.empty()) continue;
    zero::SubGroupState st = store.Acquire(i, zero::StateAccess::kReadWrite);
    struct ReleaseOnThrow {  // a failed read is the error reported; the sub-group is not left acquired
      zero::StateStore& store;
      int i;
      bool armed = true;
      ~ReleaseOnThrow() {
        if (!armed) return;
        try {
          store.Release(i);
        } catch (const Error& e) {
          ZR_WARN("releasing state sub-group {} after a failed checkpoint read: {}", i, e.what());
        }
      }
    } guard{store, i};
    for (size_t k = 0; k < parts.size(); ++k) {
      parts[k].dst = st.slots[static_cast<size_t>(at[k].first)] + at[k].second;
      parts[k].dst_dtype = DType::kF32;
    }
    reader.Read(parts, verified);
    guard.armed = false;
    store.Release(i);
  }
}

// Reads every parameter request (applies[i].slot < 0) whose local copy the strategy exposes in host
// memory (Strategy::DirectLocalParameter) straight into it, all in one read (`verified` as above; the reader
// spreads a large call over threads). Returns which requests it read.
std::vector<char> ReadParametersDirect(CheckpointReader& reader, zero::Strategy& strategy,
                                       const std::vector<CheckpointReadRequest>& requests,
                                       const std::vector<Apply>& applies, bool verified) {
  std::vector<char> done(requests.size(), 0);
  std::vector<CheckpointReadRequest> direct;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (applies[i].slot >= 0) continue;
    const Tensor t = strategy.DirectLocalParameter(applies[i].id);
    if (!t.defined() || !t.device().is_cpu() || t.dtype() != requests[i].dst_dtype || t.numel() != requests[i].numel) {
      continue;
    }
    direct.push_back(requests[i]);
    direct.back().dst = t.data();
    done[i] = 1;
  }
  if (!direct.empty()) reader.Read(direct, verified);
  return done;
}

// The slot names of the store's layout as the checkpoint names them ("master" -> "fp32").
std::vector<std::string> CheckpointSlotNames(const zero::StateStore& store) {
  std::vector<std::string> names;
  for (const zero::StateSlot& s : store.layout().slots) names.push_back(s.name == "master" ? kSlotFp32 : s.name);
  return names;
}

// The same error on every rank: rank r's error (if any), or another's naming it. `what` is the
// operation ("cannot load checkpoint <dir>").
[[noreturn]] void ThrowAgreed(const std::vector<std::string>& errors, const std::string& what) {
  std::string first;
  bool same = true;
  for (const std::string& e : errors) {
    if (e.empty()) continue;
    if (first.empty()) first = e;
    same = same && e == first;
  }
  size_t failed = 0;
  for (const std::string& e : errors) failed += e.empty() ? 0 : 1;
  if (same && failed == errors.size()) ZR_THROW(CheckpointError, "{}: {}", what, first);
  ZR_THROW(CheckpointError, "{}: {}", what, JoinRankErrors(errors));
}

}  // namespace

// ---- save ------------------------------------------------------------------------------------------

namespace {

// What fetch(i) hands out: chunk i is slot `slot` (-1: the param slot) of piece `piece` of id `id`.
struct ChunkSource {
  int id;
  int slot;
  Piece piece;
};

// A chunk's room in the save arena (64-byte aligned).
uint64_t ArenaBytes(int64_t numel, DType dtype) {
  return (static_cast<uint64_t>(numel) * DTypeSize(dtype) + 63) / 64 * 64;
}

}  // namespace

struct Engine::SavePlan {
  CheckpointManifest manifest;  // the tensors and the engine's fields; the state is filled in by the save
  std::vector<CheckpointChunkSpec> chunks;
  std::vector<ChunkSource> sources;  // chunks[i]'s data
  uint64_t bytes = 0;                // the chunks' room in the save arena
};

Engine::SavePlan Engine::PlanSave(bool exclude_frozen_parameters) {
  zero::Strategy& strategy = *impl_->strategy;
  zero::StateStore& store = strategy.state_store();
  const std::vector<std::string> slot_names = CheckpointSlotNames(store);
  const size_t num_ids = impl_->host ? impl_->param_id.size() : 0;
  const int world = world_size(), me = rank();
  const bool replicated = zero_stage() == 0 || world == 1;

  // Which pieces of which parameter (by zero/ id) this rank writes.
  std::vector<std::vector<Piece>> pieces(num_ids);
  std::vector<zero::Range> local(num_ids);
  std::vector<bool> trainable(num_ids, false);
  for (const zero::StateExtent& e : strategy.StateExtents()) {
    trainable[static_cast<size_t>(e.param)] = true;
    Piece p{e.param_offset, e.numel, e.group, e.partition_offset};
    if (replicated) {
      // Every rank holds the whole state: keep the part inside this rank's even share.
      const int64_t n = impl_->host->P(e.param).numel();
      const zero::Range share = zero::Intersect(EvenShare(n, world, me), {e.param_offset, e.param_offset + e.numel});
      if (share.empty()) continue;
      p.partition_offset += share.begin - e.param_offset;
      p.param_offset = share.begin;
      p.numel = share.size();
    }
    pieces[static_cast<size_t>(e.param)].push_back(p);
  }
  for (size_t id = 0; id < num_ids; ++id) {
    local[id] = strategy.LocalRange(static_cast<int>(id));
    if (trainable[id] || impl_->host->P(static_cast<int>(id)).requires_grad()) continue;
    zero::Range r = local[id];
    if (!strategy.ShardsParameters()) r = EvenShare(local[id].size(), world, me);
    if (!r.empty()) pieces[id].push_back({r.begin, r.size(), -1, 0});
  }

  // The manifest: every tensor, in the model's order, with its slots.
  SavePlan plan;
  CheckpointManifest& m = plan.manifest;
  m.zero_stage = zero_stage();
  m.model_dtype = model_dtype_;
  m.optimizer = OptimizerTypeName(impl_->optimizer->type());
  for (nn::Parameter* p : model_.Parameters()) {
    const bool is_trainable = p->requires_grad();
    if (exclude_frozen_parameters && !is_trainable) continue;
    const int id = impl_->param_id.at(p);
    CheckpointTensor t;
    t.name = p->name();
    t.shape = p->shape();
    t.slots.push_back({kSlotParam, model_dtype_});
    if (is_trainable) {
      for (const std::string& s : slot_names) t.slots.push_back({s, DType::kF32});
    }
    m.tensors.push_back(std::move(t));
    const int nslots = is_trainable ? static_cast<int>(slot_names.size()) : 0;
    for (int slot = -1; slot < nslots; ++slot) {
      for (const Piece& pc : pieces[static_cast<size_t>(id)]) {
        if (pc.numel <= 0) continue;
        plan.chunks.push_back({p->name(), slot < 0 ? kSlotParam : slot_names[static_cast<size_t>(slot)],
                               pc.param_offset, pc.numel});
        plan.sources.push_back({id, slot, pc});
        plan.bytes += ArenaBytes(pc.numel, slot < 0 ? model_dtype_ : DType::kF32);
      }
    }
  }
  return plan;
}

void Engine::ReserveSaveArena() {
  const SavePlan plan = PlanSave(false);  // the most a save writes (frozen parameters included)
  ScopedMemoryAccount scope(account_.get());
  impl_->save_arena = Storage::Allocate(std::max<uint64_t>(plan.bytes, 64), Device::CPU(), MemCategory::kOther);
  std::memset(impl_->save_arena->data(), 0, impl_->save_arena->bytes());  // touched now, not at the first save
}

// Finishes (collectively) an asynchronous save; the handle is released even when it throws.
CheckpointWriteResult FinishPendingSave(comm::Communicator& comm, std::shared_ptr<PendingCheckpointWrite>& pending) {
  std::shared_ptr<PendingCheckpointWrite> p = std::move(pending);
  return FinishCheckpointWrite(comm, *p);
}

SaveCheckpointResult Engine::SaveCheckpoint(const std::string& save_dir, const SaveCheckpointOptions& options) {
  ScopedMemoryAccount scope(account_.get());
  ScopedTimer timer(timers_, "save_checkpoint");
  if (forward_pending_ || micro_steps_ % std::max<int64_t>(1, config_.gradient_accumulation_steps()) != 0) {
    ZR_THROW(InvalidArgument, "SaveCheckpoint({}): called inside a gradient accumulation window (micro step {} of "
             "{}): save after the Step() that ends a window", save_dir, micro_steps_,
             config_.gradient_accumulation_steps());
  }
  double waited_s = 0;
  if (impl_->pending_save) {
    Stopwatch wait_watch;
    FinishPendingSave(*comm_, impl_->pending_save);
    waited_s = wait_watch.ElapsedSeconds();
  }
  zero::Strategy& strategy = *impl_->strategy;
  zero::StateStore& store = strategy.state_store();
  SavePlan plan = PlanSave(options.exclude_frozen_parameters);
  CheckpointContents contents;
  contents.manifest = std::move(plan.manifest);
  contents.chunks = plan.chunks;
  CheckpointManifest& m = contents.manifest;
  const std::vector<ChunkSource>& sources = plan.sources;
  const int world = world_size(), me = rank();
  TrainingState state;
  state.global_steps = global_steps_;
  state.global_samples = global_samples_;
  state.micro_steps = micro_steps_;
  state.skipped_steps = skipped_steps_;
  state.loss_scaler = CaptureLossScaler(impl_->scaler);
  if (impl_->scheduler) state.lr_scheduler = CaptureLrScheduler(*impl_->scheduler);
  if (options.sampler) state.sampler = CaptureSampler(*options.sampler);
  state.rng = CaptureRng(model_);
  state.optimizer_scalars = impl_->optimizer->SaveScalars();
  m.state_json = TrainingStateToJson(state);
  m.client_state_json = options.client_state_json.empty() ? "{}" : options.client_state_json;
  m.config_json = EffectiveConfigJson(config_, false);

  // DeepSpeed's checkpoint.writer.decoupled (training goes on while the files are written) is this
  // asynchronous save for every SaveCheckpoint call.
  const bool async = options.async || (config_.checkpoint.writer && config_.checkpoint.writer->decoupled);
  // An asynchronous save copies every chunk into the save arena, one host buffer that it keeps until
  // its files are written and that the next save reuses once this one is finished (reserved and
  // touched at construction with checkpoint.writer.decoupled; else allocated, or grown, here).
  if (async && (!impl_->save_arena || impl_->save_arena->bytes() < plan.bytes)) {
    impl_->save_arena.reset();
    impl_->save_arena = Storage::Allocate(std::max<uint64_t>(plan.bytes, 64), Device::CPU(), MemCategory::kOther);
  }
  // Chunk data: parameter pieces straight from this rank's copy (to the host if it lives elsewhere),
  // state pieces read out of the store sub-group by sub-group; asynchronous: into the arena.
  uint64_t arena_at = 0;
  contents.fetch = [&](size_t i) -> Tensor {
    const ChunkSource& s = sources[i];
    Tensor out;
    if (async) {
      const DType dtype = s.slot < 0 ? model_dtype_ : DType::kF32;
      out = Tensor::FromStorage(impl_->save_arena, arena_at, {s.piece.numel}, dtype);
      arena_at += ArenaBytes(s.piece.numel, dtype);
    }
    if (s.slot < 0) {
      zero::Range el;
      Tensor v = strategy.LocalParameter(s.id, &el).View(s.piece.param_offset - el.begin, {s.piece.numel});
      if (!async) return v.device().is_cpu() ? v : v.Clone(MemCategory::kOther);
      out.CopyFrom(v);
      return out;
    }
    if (!async) out = Tensor::Empty({s.piece.numel}, DType::kF32, Device::CPU(), MemCategory::kOther);
    zero::ReadState(store, s.slot, s.piece.group, {s.piece.partition_offset, s.piece.partition_offset + s.piece.numel},
                    out.data_as<float>());
    return out;
  };
  // Asynchronous: every chunk is a copy in the arena, which nothing changes before the save is
  // finished, so the save keeps it as it is.
  contents.fetch_is_copy = [&](size_t) { return async; };

  CheckpointWriteOptions wo;
  wo.save_dir = save_dir;
  wo.tag = options.tag.empty() ? Format("global_step{}", global_steps_) : options.tag;
  wo.save_latest = options.save_latest;
  wo.tag_validation = config_.checkpoint.tag_validation;
  wo.env = options.env;
  if (async) {
    impl_->pending_save = StartCheckpointWrite(*comm_, wo, contents);
    const std::string tag = options.tag.empty() ? Format("global_step{}", global_steps_) : options.tag;
    return {JoinPath(save_dir, tag), tag, 0, true, waited_s};
  }
  CheckpointWriteResult w = WriteCheckpoint(*comm_, wo, contents);
  if (me == 0) {
    ZR_INFO("saved checkpoint {} (global step {}, ZeRO stage {}, {} rank(s))", w.dir, global_steps_, zero_stage(),
            world);
  }
  return {w.dir, w.tag, w.bytes_written, false, waited_s};
}

std::optional<SaveCheckpointResult> Engine::WaitForCheckpoint() {
  if (!impl_->pending_save) return std::nullopt;
  ScopedTimer timer(timers_, "save_checkpoint");
  CheckpointWriteResult w = FinishPendingSave(*comm_, impl_->pending_save);
  return SaveCheckpointResult{w.dir, w.tag, w.bytes_written};
}

// ---- load ------------------------------------------------------------------------------------------

LoadCheckpointResult Engine::LoadCheckpoint(const std::string& load_dir, const LoadCheckpointOptions& options) {
  if (impl_->pending_save) FinishPendingSave(*comm_, impl_->pending_save);
  ScopedMemoryAccount scope(account_.get());
  ScopedTimer timer(timers_, "load_checkpoint");
  if (forward_pending_ || micro_steps_ % std::max<int64_t>(1, config_.gradient_accumulation_steps()) != 0) {
    ZR_THROW(InvalidArgument, "LoadCheckpoint({}): called inside a gradient accumulation window (micro step {} of "
             "{}): load before the first Forward or after the Step() that ends a window", load_dir, micro_steps_,
             config_.gradient_accumulation_steps());
  }
  zero::Strategy& strategy = *impl_->strategy;
  zero::StateStore& store = strategy.state_store();
  const std::vector<std::string> slot_names = CheckpointSlotNames(store);
  const int me = rank();
  const bool module_only = options.load_module_only;
  const bool want_optimizer = options.load_optimizer_states && !module_only;

  // Phase 1, local: find, open and check everything, and read and verify (checksums) every byte this
  // rank will apply, through one reused block buffer: nothing is staged, so a load needs no memory
  // the size of the checkpoint (fresh memory costs its page faults: on this project's VMs they were
  // most of a load's time). A one-pass load checks all but the checksums here.
  std::optional<std::string> dir;
  std::unique_ptr<CheckpointReader> reader;
  TrainingState saved;
  std::vector<CheckpointReadRequest> requests;
  std::vector<Apply> applies;
  std::string error;
  try {
    CheckpointEnv& env = options.env ? *options.env : CheckpointEnv::Posix();
    // DeepSpeed: no <load_dir>/latest (the directory itself missing too) = nothing to load.
    const bool absent = options.tag.empty() && !load_dir.empty() && env.Stat(load_dir).kind == FileKind::kMissing;
    if (!absent) dir = ResolveCheckpointDir(load_dir, options.tag, options.env);
    if (dir) {
      reader = std::make_unique<CheckpointReader>(*dir, options.env);
      reader->set_direct_reads(!options.verify_before_apply);  // one pass: nothing to re-read from the cache
      const CheckpointManifest& m = reader->manifest();
      std::vector<CheckpointModelTensor> model_tensors;
      for (nn::Parameter* p : model_.Parameters()) model_tensors.push_back({p->name(), p->shape()});
      CheckCheckpointMatchesModel(m, *dir, model_tensors, options.load_module_strict);
      saved = TrainingStateFromJson(m.state_json, *dir + "/manifest.json");
      if (want_optimizer && m.optimizer != OptimizerTypeName(impl_->optimizer->type())) {
        ZR_THROW(CheckpointError, "checkpoint {} holds {} optimizer state and this engine's optimizer is {}: load it "
                 "with load_optimizer_states false (or load_module_only)", *dir,
                 m.optimizer.empty() ? "no" : m.optimizer, OptimizerTypeName(impl_->optimizer->type()));
      }
      if (options.sampler && !module_only && !saved.sampler) {
        ZR_THROW(CheckpointError, "checkpoint {} holds no data sampler state (it was saved without a sampler), but a "
                 "sampler was given to restore", *dir);
      }
      // Per id: the extents of this rank's master and state.
      std::vector<std::vector<Piece>> extents(impl_->param_id.size());
      for (const zero::StateExtent& e : strategy.StateExtents()) {
        extents[static_cast<size_t>(e.param)].push_back({e.param_offset, e.numel, e.group, e.partition_offset});
      }
      for (nn::Parameter* p : model_.Parameters()) {
        const CheckpointTensor* t = m.FindTensor(p->name());
        if (!t) continue;  // not strict: left as it is
        const int id = impl_->param_id.at(p);
        const zero::Range el = strategy.LocalRange(id);
        if (!t->FindSlot(kSlotParam)) {
          ZR_THROW(CheckpointError, "checkpoint {}: tensor '{}' has no '{}' slot", *dir, p->name(), kSlotParam);
        }
        if (!el.empty()) {
          applies.push_back({id, -1, {}});
          requests.push_back({p->name(), kSlotParam, el.begin, el.size(), nullptr, model_dtype_});
        }
        for (const Piece& pc : extents[static_cast<size_t>(id)]) {
          for (size_t k = 0; k < slot_names.size(); ++k) {
            std::string source = slot_names[k];
            if (store.layout().slots[k].name == "master") {
              // Masters: the saved fp32 copy (zero_optimization.load_from_fp32_weights), else the weights.
              const bool fp32 = !module_only && config_.zero_optimization.load_from_fp32_weights && t->FindSlot(kSlotFp32);
              source = fp32 ? kSlotFp32 : kSlotParam;
            } else if (!want_optimizer) {
              continue;
            } else if (!t->FindSlot(source)) {
              ZR_THROW(CheckpointError, "checkpoint {}: tensor '{}' has no optimizer slot '{}' (saved frozen, or by "
                       "another optimizer)", *dir, p->name(), source);
            }
            applies.push_back({id, static_cast<int>(k), pc});
            requests.push_back({p->name(), source, pc.param_offset, pc.numel, nullptr, DType::kF32});
          }
        }
      }
      if (options.verify_before_apply) {
        reader->Verify(requests);
      } else {
        reader->Check(requests);
      }
      if (!module_only) {
        // Fit checks of the step state that need no change yet.
        if (saved.loss_scaler) {
          LossScaler probe = impl_->scaler;
          RestoreLossScaler(probe, *saved.loss_scaler);
        }
        if (options.load_lr_scheduler_states && impl_->scheduler && saved.lr_scheduler &&
            CaptureLrScheduler(*impl_->scheduler).type != saved.lr_scheduler->type) {
          ZR_THROW(CheckpointError, "checkpoint {} has a {} LR scheduler and this engine a {}: load it with "
                   "load_lr_scheduler_states false", *dir, saved.lr_scheduler->type,
                   CaptureLrScheduler(*impl_->scheduler).type);
        }
      }
    }
  } catch (const Error& e) {
    error = e.what();
  }
  const std::vector<std::string> errors = AgreeOnErrors(*comm_, error);
  const std::string what = Format("cannot load a checkpoint from {}", load_dir);
  for (const std::string& e : errors) {
    if (!e.empty()) ThrowAgreed(errors, what);
  }
  // Every rank found the same thing (a save racing the load could make them differ).
  const std::string found = BroadcastString(*comm_, dir.value_or(""));
  if (found != dir.value_or("")) {
    ZR_THROW(CheckpointError, "{}: rank 0 found '{}' and rank {} '{}' (was a checkpoint saved meanwhile?)", what,
             found, me, dir.value_or(""));
  }
  LoadCheckpointResult result;
  if (!dir) {
    if (me == 0) {
      ZR_WARN("no checkpoint loaded: {} has no '{}' file (nothing saved there yet)", load_dir, kCheckpointLatestFile);
    }
    return result;
  }

  // Phase 2: apply. Everything was checked above; the bytes verified there are read again through the
  // same open files (from the page cache when they fit) in chunks of one reused buffer. A one-pass
  // load (verify_before_apply false) reads them here for the first time, checking each block as it
  // lands.
  if (!module_only) {
    // The two that may still refuse (another data set or seed, another module tree) go first, while
    // nothing of the engine has changed; they refuse alike on every rank.
    if (options.sampler && saved.sampler) RestoreSampler(*options.sampler, *saved.sampler);
    if (saved.rng && options.load_module_strict) {
      RestoreRng(model_, *saved.rng);
    } else if (saved.rng) {
      try {
        RestoreRng(model_, *saved.rng);
      } catch (const CheckpointError& e) {  // another module tree, loaded non-strictly
        if (me == 0) ZR_WARN("dropout RNG state not restored (load_module_strict is false): {}", e.what());
      }
    }
  }
  // Only an I/O error can stop it now (a read failing between the two phases, or the state store's
  // own write-back); every rank then says the engine is partly loaded.
  try {
    // State held in host memory is read straight into the store's buffers, a sub-group at a time and
    // all of a sub-group's pieces in one call (the reader spreads a large call over threads).
    const bool direct_state = store.device().is_cpu();
    const bool verified = options.verify_before_apply;
    if (direct_state) ReadStateDirect(*reader, store, requests, applies, verified);
    // So are parameters whose local copy is in host memory: all of them in one call, into the copy.
    const std::vector<char> direct_param = ReadParametersDirect(*reader, strategy, requests, applies, verified);
    constexpr int64_t kChunkBytes = int64_t{8} << 20;
    Tensor buffer;
    for (size_t i = 0; i < requests.size(); ++i) {
      const CheckpointReadRequest& rq = requests[i];
      const Apply& ap = applies[i];
      if ((direct_state && ap.slot >= 0) || direct_param[i]) continue;
      const int64_t chunk = kChunkBytes / static_cast<int64_t>(DTypeSize(rq.dst_dtype));
      if (!buffer.defined() || buffer.dtype() != rq.dst_dtype) {
        buffer = Tensor::Empty({chunk}, rq.dst_dtype, Device::CPU(), MemCategory::kOther);
      }
      for (int64_t off = 0; off < rq.numel; off += chunk) {
        const int64_t n = std::min(chunk, rq.numel - off);
        CheckpointReadRequest part = rq;
        part.offset += off;
        part.numel = n;
        part.dst = buffer.data();
        reader->Read({part}, verified);
        if (ap.slot < 0) {
          strategy.WriteLocalParameter(ap.id, off, buffer.View(0, {n}));
        } else {
          const int64_t at = ap.piece.partition_offset + off;
          zero::WriteState(store, ap.slot, ap.piece.group, {at, at + n}, buffer.data_as<float>());
        }
      }
    }
    store.Flush();
  } catch (const Error& e) {
    error = e.what();
  }
  const std::vector<std::string> apply_errors = AgreeOnErrors(*comm_, error);
  for (const std::string& e : apply_errors) {
    if (!e.empty()) {
      ThrowAgreed(apply_errors,
                  Format("{}: applying it failed {} (a read of the checkpoint{} or a write into the state store); "
                         "this engine's weights and optimizer state are now PARTLY loaded: load a checkpoint again "
                         "before training",
                         what, options.verify_before_apply ? "after it was verified" : "in the one-pass load",
                         options.verify_before_apply ? "" : ", a checksum mismatch"));
    }
  }
  strategy.ParametersChanged();  // collective (stage 3 re-gathers its persistent parameters)
  if (!module_only) {
    if (want_optimizer) impl_->optimizer->LoadScalars(saved.optimizer_scalars);
    if (options.load_lr_scheduler_states && impl_->scheduler && saved.lr_scheduler) {
      RestoreLrScheduler(*impl_->scheduler, *saved.lr_scheduler);
    }
    if (saved.loss_scaler) RestoreLossScaler(impl_->scaler, *saved.loss_scaler);
    global_steps_ = saved.global_steps;
    global_samples_ = saved.global_samples;
    micro_steps_ = saved.micro_steps;
    skipped_steps_ = saved.skipped_steps;
  }
  result.loaded = true;
  result.dir = *dir;
  result.tag = reader->manifest().tag;
  result.client_state_json = reader->manifest().client_state_json;
  result.global_steps = global_steps_;
  if (me == 0) {
    ZR_INFO("loaded checkpoint {} (saved at global step {} on {} rank(s), ZeRO stage {}){}", *dir,
            saved.global_steps, reader->manifest().world_size, reader->manifest().zero_stage,
            module_only ? " (module only)" : "");
  }
  return result;
}

}  // namespace zerorun::runtime
