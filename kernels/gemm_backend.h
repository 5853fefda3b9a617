// Which library the CPU backend's GEMMs (and attention's products) run on, and what it runs here.
//
// oneDNN (matmul primitives cached by shape; A and B of one 16-bit dtype multiplied as they are, with
// fp32 accumulation, where the CPU has AVX512-BF16 or AMX) when zerorun was built with it, else
// OpenBLAS (fp32 sgemm on widened copies). ZERORUN_GEMM=onednn|openblas chooses; anything else, or
// onednn in a build without it, throws ConfigError on first use. Either way the core pool threads the
// GEMM, one thread per library call. Results follow ops.h's Gemm contract on both (fp32 accumulation,
// one rounding of C); they differ from each other by accumulation order only.
#pragma once

#include <cstdint>
#include <string>

namespace zerorun::kernels {

enum class GemmBackend : uint8_t { kOpenblas, kOnednn };
GemmBackend ActiveGemmBackend();
// Process-wide switch (tests, benchmarks); kOnednn in a build without oneDNN throws InvalidArgument.
void SetGemmBackend(GemmBackend backend);
const char* GemmBackendName(GemmBackend backend);
// One line for start-up logs and summaries, e.g. "onednn avx512_core_bf16 (bf16 native), 2 threads"
// or "openblas Haswell (OPENBLAS_CORETYPE=Haswell), 2 threads".
std::string GemmDescription();
// Non-empty when the GEMMs run on OpenBLAS with kernels below what this CPU can run (it did not
// recognise the CPU, or OPENBLAS_CORETYPE lowers it): says which environment variable fixes it.
std::string GemmWarning();

}  // namespace zerorun::kernels
