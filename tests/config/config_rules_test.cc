// Sections and rules: deprecated keys and aliases translated as DeepSpeed does (§1.8, §1.9, §10.1 items
// 7-20), stage-dependent defaults, and every cross-field rule of the loader.
#include "config_test_util.h"

using namespace zr_config_test;
using Kind = rt::Provenance::Kind;

namespace {
std::string Z(const std::string& zero_body, const std::string& rest = "") {
  return R"({"train_batch_size": 8, )" + rest + (rest.empty() ? "" : ", ") + R"("zero_optimization": {)" + zero_body + "}}";
}
}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("deprecated: cpu_offload / cpu_offload_param / stage3_gather_fp16 translate (test_zero_config)") {
    rt::Config c = Load(Z(R"("stage": 3, "cpu_offload_param": true)"));
    REQUIRE(c.zero_optimization.offload_param.has_value());
    CHECK(c.zero_optimization.offload_param->device == rt::OffloadDevice::kCpu);
    CHECK(c.zero_optimization.offload_param->buffer_count == 5);  // defaults of the new section
    CHECK(c.ProvenanceOf("zero_optimization.offload_param.device")->kind == Kind::kDeprecated);
    CHECK(c.ProvenanceOf("zero_optimization.offload_param.buffer_size")->detail == "cpu_offload_param");
    c = Load(Z(R"("stage": 2, "cpu_offload": true)"));
    REQUIRE(c.zero_optimization.offload_optimizer.has_value());
    CHECK(c.zero_optimization.offload_optimizer->device == rt::OffloadDevice::kCpu);
    CHECK(c.zero_optimization.offload_optimizer->pin_memory == true);
    REQUIRE(c.warnings().size() == 1);
    CHECK(c.warnings()[0].message == "Config parameter cpu_offload is deprecated use offload_optimizer instead");
    c = Load(Z(R"("stage": 2, "cpu_offload": false)"));
    CHECK(!c.zero_optimization.offload_optimizer.has_value());
    c = Load(Z(R"("stage": 3, "stage3_gather_fp16_weights_on_model_save": true)"));
    CHECK(c.zero_optimization.gather_16bit_weights_on_model_save);
    CHECK(c.ProvenanceOf("zero_optimization.gather_16bit_weights_on_model_save")->kind == Kind::kDeprecated);
    c = Load(Z(R"("stage": 2, "cpu_offload_use_pin_memory": true)"));
    CHECK(c.warnings().size() == 1);
    CHECK(!c.zero_optimization.offload_optimizer.has_value());
  }

  TEST_CASE("deprecated + replacement together is an error (test_config_base_deprecatedfail)") {
    CHECK(Has(Errors(Z(R"("stage": 2, "cpu_offload": true, "offload_optimizer": {"device": "cpu"})")),
              "zero_optimization.cpu_offload", "Cannot provide deprecated parameter 'cpu_offload' and replacing parameter 'offload_optimizer' together"));
    CHECK(Has(Errors(Z(R"("stage": 3, "cpu_offload_param": false, "offload_param": {})")),
              "zero_optimization.cpu_offload_param", "together"));
    CHECK(Has(Errors(Z(R"("stage": 3, "stage3_gather_fp16_weights_on_model_save": true, "gather_16bit_weights_on_model_save": true)")),
              "zero_optimization.stage3_gather_fp16_weights_on_model_save", "together"));
    CHECK(Has(Errors(Z(R"("stage": 3, "stage3_gather_fp16_weights_on_model_save": true, "stage3_gather_16bit_weights_on_model_save": true)")),
              "zero_optimization.stage3_gather_fp16_weights_on_model_save", "together"));
  }

  TEST_CASE("aliases: stage3_* and the plain names both work; both at once is an error") {
    rt::Config c = Load(Z(R"("stage": 3, "stage3_prefetch_bucket_size": 12345, "stage3_param_persistence_threshold": 12345,
        "stage3_max_reuse_distance": 12345, "stage3_max_live_parameters": 777, "stage3_model_persistence_threshold": 5)"));
    CHECK(c.zero_optimization.prefetch_bucket_size == 12345);
    CHECK(c.zero_optimization.param_persistence_threshold == 12345);
    CHECK(c.zero_optimization.max_reuse_distance == 12345);
    CHECK(c.zero_optimization.max_live_parameters == 777);
    CHECK(c.zero_optimization.model_persistence_threshold == 5);
    const rt::Provenance* p = c.ProvenanceOf("zero_optimization.prefetch_bucket_size");
    CHECK(p->kind == Kind::kAlias);
    CHECK(p->ToString() == "file (alias stage3_prefetch_bucket_size)");
    c = Load(Z(R"("stage": 3, "prefetch_bucket_size": 12345)"));
    CHECK(c.zero_optimization.prefetch_bucket_size == 12345);
    CHECK(Has(Errors(Z(R"("stage": 3, "prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2)")),
              "zero_optimization.stage3_prefetch_bucket_size", "given twice"));
  }

  TEST_CASE("bf16 and its alias bfloat16 (test_get_bfloat16_enabled)") {
    CHECK(Load(R"({"train_batch_size": 8, "bf16": {"enabled": true}})").bf16.enabled);
    const rt::Config c = Load(R"({"train_batch_size": 8, "bfloat16": {"enabled": true}})");
    CHECK(c.bf16.enabled);
    CHECK(c.ModelDType() == zerorun::DType::kBF16);
    CHECK(c.ProvenanceOf("bf16.enabled")->ToString() == "file (alias bfloat16)");
    CHECK(Has(Errors(R"({"train_batch_size": 8, "bf16": {}, "bfloat16": {}})"), "bfloat16", "given twice"));
  }

  TEST_CASE("legacy boolean zero_optimization: stage 1/0, bucket from allgather_size") {
    rt::Config c = Load(R"({"train_batch_size": 8, "zero_optimization": true, "allgather_size": 1000})");
    CHECK(c.zero_optimization.stage == rt::ZeroStage::kOptimizerStates);
    CHECK(c.zero_optimization.allgather_bucket_size == 1000);
    CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
    CHECK(c.ProvenanceOf("zero_optimization.stage")->kind == Kind::kDeprecated);
    c = Load(R"({"train_batch_size": 8, "zero_optimization": false})");
    CHECK(c.zero_optimization.stage == rt::ZeroStage::kDisabled);
    c = Load(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}, "allgather_size": 1000})");
    CHECK(c.zero_optimization.allgather_bucket_size == 500000000);
    CHECK(Has(c.warnings(), "allgather_size", "ignored"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "zero_optimization": 2})"), "zero_optimization", "expected an object"));
  }

  TEST_CASE("overlap_comm defaults by stage (test_zero_config_overlapcomm)") {
    for (int s = 0; s <= 3; ++s) {
      const rt::Config c = Load(Z("\"stage\": " + std::to_string(s)));
      CHECK(c.zero_optimization.overlap_comm == (s == 3));
      CHECK(c.ProvenanceOf("zero_optimization.overlap_comm")->kind == Kind::kDerived);
    }
    CHECK(Load(Z(R"("stage": 3, "overlap_comm": false)")).zero_optimization.overlap_comm == false);
    CHECK(Load(Z(R"("stage": 1, "overlap_comm": null)")).zero_optimization.overlap_comm == false);
  }

  TEST_CASE("offload sections: absent/null → none, {} → defaults (test_zero_config_offload_configs)") {
    CHECK(!Load(Z(R"("stage": 3)")).zero_optimization.offload_param);
    CHECK(!Load(Z(R"("stage": 3, "offload_param": null, "offload_optimizer": null)")).zero_optimization.offload_optimizer);
    const rt::Config c = Load(Z(R"("stage": 3, "offload_param": {}, "offload_optimizer": {"pipeline_read": true})"));
    REQUIRE(c.zero_optimization.offload_param);
    CHECK(c.zero_optimization.offload_param->device == rt::OffloadDevice::kNone);
    CHECK(c.zero_optimization.offload_param->max_in_cpu == 1000000000);
    REQUIRE(c.zero_optimization.offload_optimizer);
    CHECK(c.zero_optimization.offload_optimizer->Pipeline());
    CHECK(c.zero_optimization.offload_optimizer->buffer_count == 4);
    CHECK(!Load(Z(R"("stage": 3, "offload_optimizer": {})")).zero_optimization.offload_optimizer->Pipeline());
  }

  TEST_CASE("gradient_allreduce_op (test_gradient_allreduce_op)") {
    CHECK(Load(R"({"train_batch_size": 8})").gradient_allreduce_op == rt::AllReduceOp::kMean);
    CHECK(Load(R"({"train_batch_size": 8, "gradient_allreduce_op": "SUM"})").gradient_allreduce_op == rt::AllReduceOp::kSum);
    CHECK(Has(Errors(R"({"train_batch_size": 8, "gradient_allreduce_op": "max"})"), "gradient_allreduce_op",
              "expected one of \"mean\", \"sum\"; found \"max\""));
    CHECK(Has(Errors(Z(R"("stage": 3)", R"("gradient_allreduce_op": "sum")")), "gradient_allreduce_op",
              "not supported with ZeRO stage 3"));
  }

  TEST_CASE("communication_data_type: case-insensitive fp16/bf16/fp32, null → model dtype") {
    CHECK(Load(R"({"train_batch_size": 8, "communication_data_type": "BF16"})").CommDType() == zerorun::DType::kBF16);
    CHECK(Load(R"({"train_batch_size": 8, "fp16": {"enabled": true}})").CommDType() == zerorun::DType::kF16);
    CHECK(Load(R"({"train_batch_size": 8})").CommDType() == zerorun::DType::kF32);
    CHECK(Has(Errors(R"({"train_batch_size": 8, "communication_data_type": "int8"})"), "communication_data_type",
              "expected one of \"fp16\", \"bf16\", \"fp32\" or null"));
  }

  TEST_CASE("checkpoint.tag_validation (test_tag_validation)") {
    CHECK(Load(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "fail"}})").checkpoint.tag_validation ==
          rt::TagValidation::kFail);
    CHECK(Has(Errors(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "foo"}})"), "checkpoint.tag_validation",
              "found \"foo\""));
  }

  TEST_CASE("precision: fp16 and bf16 together, dtype mixes, master-weight options") {
    CHECK(Has(Errors(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})"), "bf16.enabled",
              "bfloat16 and fp16 modes cannot be simultaneously enabled"));
    // Stage 0 accepts only matching grad-accumulation dtypes; ZeRO accepts all (test_ds_initialize).
    CHECK(Has(Errors(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}})"),
              "data_types.grad_accum_dtype", "unsupported mix of model_dtype=bf16 and grad_accum_dtype=fp32"));
    CHECK(Errors(Z(R"("stage": 1)", R"("bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"})")).empty());
    CHECK(Errors(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "torch.bfloat16"}})").empty());
    CHECK(Has(Errors(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "data_types": {"param_dtype": "bf16"}})"),
              "data_types.param_dtype", "must equal the training dtype fp16"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})"),
              "fp16.fp16_master_weights_and_grads", "stage 1, 2 or 3"));
    CHECK(Has(Errors(Z(R"("stage": 2)", R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})")),
              "fp16.fp16_master_weights_and_grads", "offload_optimizer.device \"cpu\""));
    CHECK(Errors(Z(R"("stage": 2, "offload_optimizer": {"device": "cpu"})",
                   R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})")).empty());
    CHECK(Has(Errors(Z(R"("stage": 3)", R"("bf16": {"enabled": true, "bf16_optimizer_states": true})")),
              "bf16.bf16_optimizer_states", "requires bf16.bf16_master_weights_and_grads"));
    CHECK(Errors(Z(R"("stage": 3)", R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})")).empty());
    CHECK(Has(Errors(R"({"train_batch_size": 8, "amp": {"enabled": true, "opt_level": "O1"}})"), "amp.enabled", "not supported"));
    CHECK(Errors(R"({"train_batch_size": 8, "amp": {"enabled": false, "opt_level": "O1"}})").empty());
  }

  TEST_CASE("offload rules: nvme_path, stages, ratio") {
    CHECK(Has(Errors(Z(R"("stage": 3, "offload_optimizer": {"device": "nvme"})")),
              "zero_optimization.offload_optimizer.nvme_path", "required when device is \"nvme\""));
    CHECK(Has(Errors(Z(R"("stage": 2, "offload_param": {"device": "cpu"})")), "zero_optimization.offload_param.device",
              "requires ZeRO stage 3; found stage 2"));
    CHECK(Errors(Z(R"("stage": 2, "offload_param": {"device": "none"})")).empty());
    {  // pin_memory false cannot unpin NVMe swap buffers: said, not silently ignored
      const rt::Config w = Load(Z(R"("stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x", "pin_memory": false})"));
      REQUIRE(w.warnings().size() == 1);
      CHECK(w.warnings()[0].path == "zero_optimization.offload_param.pin_memory");
      CHECK(w.warnings()[0].message.find("has no effect with device \"nvme\"") != std::string::npos);
      CHECK(Load(Z(R"("stage": 3, "offload_param": {"device": "cpu", "pin_memory": false})")).warnings().empty());
    }
    CHECK(Has(Errors(Z(R"("stage": 0, "offload_optimizer": {"device": "cpu"})")),
              "zero_optimization.offload_optimizer.device", "stage 1, 2 or 3; found stage 0"));
    // DeepSpeed refuses NVMe optimizer offload below stage 3; zerorun accepts it (with a warning).
    CHECK(Errors(Z(R"("stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"})")).empty());
    CHECK(Has(Errors(Z(R"("stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5})")),
              "zero_optimization.offload_optimizer.ratio", "Partial offloading only supported for ZeRO Stage 3"));
    CHECK(Errors(Z(R"("stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5})")).empty());
    CHECK(Has(Errors(Z(R"("stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5})")),
              "zero_optimization.offload_optimizer.ratio", "expected a number in [0, 1]; found 1.5"));
    const rt::Config c = Load(Z(R"("stage": 2, "contiguous_gradients": false, "offload_optimizer": {"device": "cpu"})"));
    CHECK(c.zero_optimization.contiguous_gradients);  // forced by offload at stage 1/2
    CHECK(c.ProvenanceOf("zero_optimization.contiguous_gradients")->kind == Kind::kDerived);
  }

  TEST_CASE("aio: thread_count read as intra_op_parallelism with a note, use_gds refused, O_DIRECT block size") {
    const std::string nvme = R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}})";
    rt::Config c = Load(R"({"train_batch_size": 8, )" + nvme + R"(, "aio": {"thread_count": 4, "queue_depth": 16}})");
    CHECK(c.aio.intra_op_parallelism == 4);
    CHECK(c.aio.queue_depth == 16);
    CHECK(c.ProvenanceOf("aio.intra_op_parallelism")->kind == Kind::kAlias);
    CHECK(Has(c.warnings(), "aio.thread_count", "read as aio.intra_op_parallelism = 4"));
    CHECK(Has(c.warnings(), "aio.thread_count", "DeepSpeed's own code ignores thread_count"));
    CHECK_FALSE(Has(c.warnings(), "aio"));  // used by the NVMe offload
    c = Load(R"({"train_batch_size": 8, )" + nvme + R"(, "aio": {"intra_op_parallelism": 2}})");
    CHECK(c.aio.intra_op_parallelism == 2);
    CHECK_FALSE(Has(c.warnings(), "aio.thread_count"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "aio": {"thread_count": 2, "intra_op_parallelism": 2}})"),
              "aio.thread_count", "given twice"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "aio": {"use_gds": true}})"), "aio.use_gds",
              "GPUDirect Storage is not supported by zerorun"));
    CHECK(Errors(R"({"train_batch_size": 8, )" + nvme + R"(, "aio": {"use_gds": false}})").empty());
    CHECK(Has(Errors(R"({"train_batch_size": 8, "aio": {"block_size": 1000}})"), "aio.block_size",
              "must be a multiple of 4096"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "aio": {"block_size": 2147483648}})"), "aio.block_size",
              "at most 1 GiB"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "aio": {"queue_depth": 0}})"), "aio.queue_depth", "in [1, 4096]"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "aio": {"intra_op_parallelism": 1000}})"), "aio.intra_op_parallelism",
              "in [1, 256]"));
    // Without NVMe offload the section does nothing, and says so.
    c = Load(R"({"train_batch_size": 8, "aio": {"block_size": 262144}})");
    CHECK(Has(c.warnings(), "aio", "offloads nothing to NVMe, so the section has no effect"));
    CHECK_FALSE(Has(Load(R"({"train_batch_size": 8})").warnings(), "aio"));
    CHECK_FALSE(Has(Load(R"({"train_batch_size": 8, "aio": {"queue_depth": 8}})").warnings(), "aio"));  // defaults
  }

  TEST_CASE("zero rules: allgather bucket parity (TestIncorectAllgatherBucketSize), legacy_stage1, sequential") {
    CHECK(Has(Errors(Z(R"("stage": 2, "allgather_bucket_size": 1001)")), "zero_optimization.allgather_bucket_size",
              "allgather_bucket_size must be a multiple of nccl_start_alignment_factor"));
    CHECK(Errors(Z(R"("stage": 2, "allgather_bucket_size": 1000)")).empty());
    CHECK(Errors(Z(R"("stage": 3, "allgather_bucket_size": 1001)")).empty());
    CHECK(Has(Errors(Z(R"("legacy_stage1": true)")), "zero_optimization.legacy_stage1", "removed"));
    const rt::Config c = Load(Z(R"("stage": 3, "stage3_allgather_sequential": true)"));
    CHECK(c.zero_optimization.prefetch_bucket_size == 1);
    // stage 1 defaults overlap_comm to false: unmanaged accumulation is fine
    CHECK(Errors(Z(R"("stage": 1)", R"("managed_gradient_accumulation": false)")).empty());
    CHECK(Has(Errors(Z(R"("stage": 1, "overlap_comm": true)", R"("managed_gradient_accumulation": false)")),
              "managed_gradient_accumulation", "incompatible with zero_optimization.overlap_comm at stage 1"));
    CHECK(Errors(Z(R"("stage": 2, "overlap_comm": true)", R"("managed_gradient_accumulation": false)")).empty());
  }

  TEST_CASE("optimizer: types, AdamW mode, Lamb needs dynamic scaling, refused params") {
    rt::Config c = Load(R"({"train_batch_size": 8, "optimizer": {"type": "adam", "params": {"lr": 0.01}}})");
    CHECK(c.optimizer.type == rt::OptimizerKind::kAdam);
    CHECK(c.optimizer.AdamWMode());  // "Adam" is AdamW unless adam_w_mode false
    CHECK(c.optimizer.Lr() == 0.01);
    c = Load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
    CHECK(!c.optimizer.AdamWMode());
    c = Load(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad"}})");
    CHECK(c.optimizer.Lr() == 0.01);
    CHECK(Load(R"({"train_batch_size": 8})").optimizer.type == rt::OptimizerKind::kNone);
    auto e = Errors(R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 10}}})");
    REQUIRE(e.size() == 1);  // the params of an unsupported type are not reported again
    CHECK(Has(e, "optimizer.type", "\"OneBitAdam\" is not supported by zerorun"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "Adamm"}})"), "optimizer.type", "did you mean \"Adam\""));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})"),
              "optimizer.params.max_grad_norm", "please switch to using the deepspeed parameter 'gradient_clipping'"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})"),
              "optimizer.params.amsgrad", "AMSGrad"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 1}}})"), "optimizer.params",
              "without optimizer.type"));
    // Lamb requires dynamic loss scaling even with fp16 disabled.
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}, "fp16": {"loss_scale": 128}})"),
              "fp16.loss_scale", "DeepSpeed lamb optimizer requires dynamic loss scaling"));
    CHECK(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}, "fp16": {"enabled": true}})").empty());
    CHECK(Has(Errors(Z(R"("stage": 2)", R"("optimizer": {"type": "SGD"})")), "optimizer.type", "untested ZeRO Optimizer"));
    CHECK(Errors(Z(R"("stage": 2)", R"("optimizer": {"type": "SGD"}, "zero_allow_untested_optimizer": true)")).empty());
    CHECK(Has(Errors(Z(R"("stage": 2, "offload_optimizer": {"device": "cpu"})",
                       R"("optimizer": {"type": "Lamb"}, "zero_allow_untested_optimizer": true)")),
              "zero_optimization.offload_optimizer.device", "optimizer offload supports Adam"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "SGD", "params": {"nesterov": true}}})"),
              "optimizer.params.nesterov", "Nesterov momentum requires a momentum and zero dampening"));
    c = Load(R"({"train_batch_size": 8, "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})");
    CHECK(c.optimizer.sgd.momentum == 0.9);
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "Lion", "params": {"eps": 1e-8}}})"),
              "optimizer.params.eps", "unknown key"));  // Lion has no eps
  }

  TEST_CASE("scheduler: required params and validation (test_lr_schedulers)") {
    CHECK(Has(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR", "params": {}}})"),
              "scheduler.params.total_num_steps", "required by WarmupDecayLR"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR"}})"),
              "scheduler.params.total_num_steps", "required by WarmupCosineLR"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1}}})"),
              "scheduler.params.cycle_max_lr", "required by OneCycle"));
    for (const char* n : {"null", "-5", "0"}) {
      const std::string j = std::string(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": )") + n + "}}}";
      CHECK_MESSAGE(Has(Errors(j), "scheduler.params.warmup_num_steps", "expected an integer > 0"), j);
    }
    CHECK(Has(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "LRRangeTest", "params": {"lr_range_test_step_size": 0}}})"),
              "scheduler.params.lr_range_test_step_size", "> 0"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_first_step_size": 0}}})"),
              "scheduler.params.cycle_first_step_size", "> 0"));
    CHECK(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_second_step_size": 0}}})").empty());
    CHECK(Has(Errors(R"({"train_batch_size": 8, "scheduler": {"type": "StepLR"}})"), "scheduler.type",
              "\"StepLR\" is not supported by zerorun"));
    const rt::Config c = Load(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linear"}}})");
    CHECK(c.scheduler.warmup_lr.warmup_type == rt::WarmupType::kLinear);
    CHECK(!c.scheduler.warmup_lr.warmup_max_lr.has_value());
    CHECK(c.scheduler.warmup_lr.warmup_num_steps == 1000);
    const rt::Config s = Load(R"({"train_batch_size": 8, "optimizer": {"type": "SGD"}, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0, "cycle_max_lr": 1}}})");
    CHECK(!s.scheduler.one_cycle.cycle_momentum);  // SGD has no betas
    CHECK(Has(s.warnings(), "scheduler.params.cycle_momentum", "disabled"));
  }

  TEST_CASE("misc sections: defaults, flops profiler forces wall clock, elasticity refused, log level") {
    rt::Config c = Load(R"({"train_batch_size": 8})");
    CHECK(c.gradient_clipping == 1.0);
    CHECK(!c.steps_per_print.has_value());
    CHECK(c.aio.block_size == 1048576);
    CHECK(c.aio.queue_depth == 8);
    CHECK(c.zero_optimization.sub_group_size == 1000000000);
    CHECK(c.zero_optimization.prefetch_bucket_size == 50000000);
    CHECK(c.bf16.check_grad_overflow);
    CHECK(c.checkpoint.tag_validation == rt::TagValidation::kWarn);
    CHECK(c.tensorboard.job_name == "DeepSpeedJobName");
    CHECK(c.fp16.initial_scale_power == 16);
    c = Load(R"({"train_batch_size": 8, "flops_profiler": {"enabled": true}})");
    CHECK(c.wall_clock_breakdown);
    CHECK(c.ProvenanceOf("wall_clock_breakdown")->kind == Kind::kDerived);
    CHECK(Has(Errors(R"({"train_batch_size": 8, "elasticity": {"enabled": true, "max_train_batch_size": 100, "micro_batch_sizes": [2, 4]}})"),
              "elasticity.enabled", "not supported"));
    CHECK(Errors(R"({"train_batch_size": 8, "elasticity": {"enabled": false, "micro_batch_sizes": [2, 4]}})").empty());
    CHECK(Has(Errors(R"({"train_batch_size": 8, "elasticity": {"micro_batch_sizes": [2, 0]}})"),
              "elasticity.micro_batch_sizes[1]", "expected an integer > 0; found 0"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "log_level": "loud"})"), "log_level", "found \"loud\""));
    CHECK(Load(R"({"train_batch_size": 8, "log_level": "INFO"})").log_level == "INFO");
    CHECK(Has(Errors(R"({"train_batch_size": 8, "activation_checkpointing": {"contiguous_memory_optimization": true}})"),
              "activation_checkpointing.number_checkpoints", "required"));
    CHECK(Has(Load(R"({"train_batch_size": 8, "vocabulary_size": 50257})").warnings(), "vocabulary_size", "multiple of 8"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "comms_logger": {"prof_ops": "all_reduce"}})"), "comms_logger.prof_ops",
              "expected a list of strings"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "tensorboard": {"enabled": true, "output_path": 3}})"),
              "tensorboard.output_path", "expected a string; found 3"));
  }

  TEST_CASE("effective JSON round-trips to the same config") {
    const std::string j = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "bfloat16": {"enabled": true},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}},
        "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100}},
        "zero_optimization": {"stage": 3, "cpu_offload_param": true, "stage3_prefetch_bucket_size": 1e6},
        "checkpoint": {"load_universal": true}, "comms_logger": {"prof_ops": ["all_reduce"]}})";
    const rt::Config a = Load(j, 4);
    const std::string eff = rt::EffectiveConfigJson(a);
    const rt::Config b = Load(eff, 4);
    CHECK(rt::EffectiveConfigJson(b) == eff);
    // The deprecated key's warning is gone (it is written translated); the no-effect one stays.
    REQUIRE(a.warnings().size() == 2);
    REQUIRE(b.warnings().size() == 1);
    CHECK(b.warnings()[0].ToString() == a.warnings()[1].ToString());
    CHECK(Has(b.warnings(), "checkpoint.load_universal", "has no effect in zerorun because zerorun checkpoints load"));
    CHECK(b.train_batch_size() == 24);
    CHECK(b.zero_optimization.offload_param->device == rt::OffloadDevice::kCpu);
    CHECK(b.optimizer.adam.betas == std::vector<double>{0.9, 0.95});
    CHECK(b.comms_logger.prof_ops == std::vector<std::string>{"all_reduce"});
    CHECK(eff.find("\"bf16\"") != std::string::npos);
    CHECK(eff.find("cpu_offload_param") == std::string::npos);  // deprecated keys are not written
    // activation_checkpointing is written only when given: writing it turns checkpointing on.
    CHECK(eff.find("activation_checkpointing") == std::string::npos);
    const rt::Config ac = Load(R"({"train_batch_size": 8, "activation_checkpointing": {}})");
    const std::string ac_eff = rt::EffectiveConfigJson(ac);
    CHECK(ac_eff.find("\"activation_checkpointing\": {") != std::string::npos);
    CHECK(rt::EffectiveConfigJson(Load(ac_eff)) == ac_eff);
    // The effective JSON loads at another world size only if consistent: it pins all three keys.
    CHECK(Has(Errors(eff, 2), "train_batch_size", "24 != 2 * 3 * 2"));
  }
}
