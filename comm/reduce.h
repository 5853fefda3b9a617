// Element-wise reduction kernels the backends share: out = a (op) b over raw buffers, with fp16/bf16
// widened to fp32 for the arithmetic and rounded once on store. kAvg is a sum until the last step,
// where `divisor` (the group size) divides the result (integers truncate toward zero).
#pragma once

#include <cstddef>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/dtype.h"

namespace zerorun::comm {

// The type partial results travel in when a backend wants a single rounding: fp32 for fp16/bf16,
// the dtype itself otherwise.
DType AccumType(DType t);

// out[i] = a[i] (op) b[i] for i < n, all three of type `dtype`. kAvg adds; if divisor > 0 the result is
// then divided by divisor (so the last step of an average passes the group size). `out` may alias a or b.
void ReduceBuffers(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op, int divisor = 0);

// Same, with `a` and `out` of type `acc` (AccumType(dtype)) and `b` of type `dtype`: accumulates a
// 16-bit input into an fp32 partial.
void ReduceIntoAccum(void* out_acc, const void* a_acc, const void* b, size_t n, DType dtype, ReduceOp op);

// out (dtype) = in (AccumType(dtype)), dividing by divisor first when op is kAvg and divisor > 0.
void FinishFromAccum(void* out, const void* in_acc, size_t n, DType dtype, ReduceOp op, int divisor);
// out (AccumType(dtype)) = in (dtype).
void ToAccum(void* out_acc, const void* in, size_t n, DType dtype);

// memmove that does not use `rep movsb` for large copies. glibc on AMD uses rep movsb for copies from
// 2 KiB up to the L2 size. On this project's AMD VMs that ran 3-4x slower than vector moves into and out
// of the shared-memory segment: an all-gather of 256 KiB over 2 ranks got 2.2 GB/s busbw against 6.5 with
// vector moves (zerorun-bench, GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold raised). Copies below
// 4 KiB, and overlapping ones, go to std::memmove.
void CopyBytes(void* dst, const void* src, size_t bytes);

}  // namespace zerorun::comm
