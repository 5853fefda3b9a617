// Loading a saved model file (Engine::Save16BitModel's safetensors) into a model's parameters.
#pragma once

#include <string>

#include "zerorun/runtime/nn/module.h"

namespace zerorun::runtime {

// Sets every parameter of `model` (model.Parameters(), tied ones once, by their dotted names) from the
// safetensors file at `path`. A file dtype that differs from the parameter's is converted exactly
// (core/dtype.h: fp16/bf16 → fp32 exact, fp32 → 16-bit round to nearest even). Parameters without a
// value yet get one allocated.
//
// strict (DeepSpeed/PyTorch load_state_dict semantics): every parameter must be in the file and every
// tensor of the file must be a parameter; otherwise CheckpointError lists the missing and unexpected
// names. Not strict: those are skipped. A shape mismatch is an error either way (naming the tensor and
// both shapes). The file is validated as SafetensorsReader does before any parameter is written.
//
// Applies to a model before an engine is created (then the engine takes these values: the usual way
// to resume from a 16-bit save), or to the model of a stage 0–2 engine for evaluation: there the
// values are visible to the next Forward, but with bf16/fp16 training the engine's fp32 master
// weights are not changed and its next applied step writes over them. A ZeRO-3 engine's released
// parameters are refused with InvalidArgument naming the parameter.
void LoadSafetensorsIntoModel(nn::Module& model, const std::string& path, bool strict = true);

}  // namespace zerorun::runtime
