// The two dtype facts the config loader needs, for fuzz builds only: core/dtype.cc pulls in
// core/cpu_features.cc, whose __builtin_cpu_supports("f16c") clang 14 does not accept.
#include "zerorun/core/dtype.h"

namespace zerorun {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "fp64";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

}  // namespace zerorun
