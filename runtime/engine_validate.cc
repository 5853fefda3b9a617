// ValidateForEngine: the engine's config refusals in one place (see engine_validate.h).
#include "zerorun/runtime/engine_validate.h"

#include "zerorun/runtime/engine_internal.h"

namespace zerorun::runtime {
namespace {

// One parameter group with the optimizer's lr: enough for a schedule to be built and checked.
class ProbeTarget final : public HyperTarget {
 public:
  explicit ProbeTarget(double lr) : lr_(lr) {}
  int NumGroups() const override { return 1; }
  double GetLr(int) const override { return lr_; }
  void SetLr(int, double lr) override { lr_ = lr; }
  bool HasBetas() const override { return true; }
  std::pair<double, double> GetBetas(int) const override { return betas_; }
  void SetBetas(int, double b1, double b2) override { betas_ = {b1, b2}; }

 private:
  double lr_;
  std::pair<double, double> betas_{0.9, 0.999};
};

}  // namespace

std::vector<ConfigIssue> EngineConfigProblems(const Config& config, int world_size) {
  std::vector<ConfigIssue> out;
  if (config.batch.world_size != world_size) {
    out.push_back({"", Format("the config's batch sizes were resolved for a data-parallel world of {} ranks but the "
                              "job has {}: load the config with LoadOptions::world_size = {} (zerorun-config "
                              "--world-size {})",
                              config.batch.world_size, world_size, world_size, world_size)});
  }
  if (config.data_parallel_size && *config.data_parallel_size != world_size) {
    out.push_back({"data_parallel_size",
                   Format("{} but the job has {} ranks, all of them data-parallel (zerorun has no model, pipeline "
                          "or sequence parallelism); remove the key or write {}",
                          *config.data_parallel_size, world_size, world_size)});
  }
  if (config.optimizer.type == OptimizerKind::kNone) {
    out.push_back({"optimizer", "the config has no optimizer section; training needs one (zerorun takes no client "
                                "optimizer), e.g. \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}"});
  }
  for (ConfigIssue& i : UnsupportedKeys(config)) out.push_back(std::move(i));
  if (config.scheduler.type != SchedulerKind::kNone) {
    ProbeTarget probe(config.optimizer.Lr());
    try {
      (void)MakeSchedulerFromConfig(config.scheduler, probe);
    } catch (const ConfigError& e) {
      out.push_back({"scheduler.params", e.what()});
    }
  }
  return out;
}

void ValidateForEngine(const Config& config, int world_size) {
  std::vector<ConfigIssue> problems = EngineConfigProblems(config, world_size);
  if (!problems.empty()) throw ConfigLoadError(config.source(), std::move(problems), config.warnings());
}

}  // namespace zerorun::runtime
