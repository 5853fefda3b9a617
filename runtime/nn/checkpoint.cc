// Checkpoint segments: keep the input, drop activations, replay before backward (see checkpoint.h).
#include "zerorun/runtime/nn/checkpoint.h"

#include "zerorun/core/format.h"
#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

CheckpointSegment::CheckpointSegment(std::vector<Module*> modules, int index, CheckpointHooks* hooks)
    : modules_(std::move(modules)), index_(index), hooks_(hooks) {
  if (modules_.empty()) ZR_THROW(InvalidArgument, "checkpoint segment {}: no modules", index);
  for (size_t i = 0; i < modules_.size(); ++i) {
    Module* m = modules_[i];
    ZR_CHECK(m != nullptr, "checkpoint segment {}: null module", index);
    if (m->parent() != modules_[0]->parent()) {
      ZR_THROW(InvalidArgument, "checkpoint segment {}: {} and {} are not siblings", index, modules_[0]->Describe(),
               m->Describe());
    }
    for (Module* a = m->parent(); a != nullptr; a = a->parent()) {
      if (a->checkpoint_ != nullptr) {
        ZR_THROW(InvalidArgument, "checkpoint segment {}: {} is inside {}, which is checkpointed already", index,
                 m->Describe(), a->Describe());
      }
    }
    for (Module* d : m->Modules()) subtree_.push_back(d);
  }
}

CheckpointSegment::~CheckpointSegment() = default;

void CheckpointSegment::Attach(const std::shared_ptr<CheckpointSegment>& segment) {
  for (size_t i = 0; i < segment->modules_.size(); ++i) {
    Module* m = segment->modules_[i];
    for (Module* d : m->Modules()) {
      if (d != m && d->checkpoint_ != nullptr) {
        ZR_THROW(InvalidArgument, "checkpoint segment {}: {} contains {}, which is checkpointed already",
                 segment->index_, m->Describe(), d->Describe());
      }
    }
    m->checkpoint_ = segment;
    m->checkpoint_pos_ = static_cast<int>(i);
  }
}

void CheckpointSegment::Detach() {
  std::shared_ptr<CheckpointSegment> self;  // the modules may hold the last references
  for (Module* m : modules_) {
    if (m->checkpoint_.get() != this) continue;
    if (!self) self = m->checkpoint_;
    m->checkpoint_.reset();
    m->checkpoint_pos_ = -1;
  }
}

std::string CheckpointSegment::Describe() const {
  const std::string first = modules_.front()->path().empty() ? "<root>" : modules_.front()->path();
  return modules_.size() == 1 ? first : first + ".." + modules_.back()->path();
}

Tensor CheckpointSegment::Forward(int pos, const Tensor& x) {
  if (pos == 0) {
    rng_.resize(subtree_.size());
    for (size_t i = 0; i < subtree_.size(); ++i) rng_[i] = subtree_[i]->rng_calls();
    replayed_ = false;
    kept_ = Tensor();  // an abandoned pass's input
    kept_ = hooks_ ? hooks_->Keep(index_, x) : x;
    if (hooks_) hooks_->At(index_, CheckpointHooks::Phase::kForwardBegin);
  }
  Module& m = *modules_[static_cast<size_t>(pos)];
  Tensor y;
  {
    Module::ForwardScope scope(m);
    y = m.OnForward(x);
    if (m.observer() != nullptr) m.observer()->ForwardOutput(m, y);
  }
  for (Module* d : m.Modules()) d->OnReleaseActivations();  // all of it is recomputed
  if (pos + 1 == static_cast<int>(modules_.size()) && hooks_) {
    hooks_->At(index_, CheckpointHooks::Phase::kForwardEnd);
  }
  return y;
}

void CheckpointSegment::Replay() {
  if (hooks_) hooks_->At(index_, CheckpointHooks::Phase::kRecomputeBegin);
  Tensor x = hooks_ ? hooks_->Restore(index_, kept_) : kept_;
  kept_ = Tensor();
  ZR_CHECK(rng_.size() == subtree_.size(), "checkpoint {}: replay without its forward", Describe());
  std::vector<uint64_t> rng_after(subtree_.size());
  for (size_t i = 0; i < subtree_.size(); ++i) {
    rng_after[i] = subtree_[i]->rng_calls();
    subtree_[i]->set_rng_calls(rng_[i]);
  }
  {
    Module::RecomputeScope replay;
    for (Module* m : modules_) {
      Module::ForwardScope scope(*m);
      x = m->OnForward(x);  // the last output is not needed: backward has its gradient already
    }
  }
  for (size_t i = 0; i < subtree_.size(); ++i) subtree_[i]->set_rng_calls(rng_after[i]);
  replayed_ = true;
  if (hooks_) hooks_->At(index_, CheckpointHooks::Phase::kRecomputeEnd);
}

Tensor CheckpointSegment::Backward(int pos, const Tensor& dy) {
  if (kept_.defined() && !replayed_) Replay();
  Module& m = *modules_[static_cast<size_t>(pos)];
  Tensor dx;
  {
    Module::BackwardScope scope(m);
    dx = m.OnBackward(dy);
  }
  if (pos == 0 && replayed_) {
    replayed_ = false;
    if (hooks_) hooks_->At(index_, CheckpointHooks::Phase::kBackwardEnd);
  }
  return dx;
}

}  // namespace zerorun::nn
