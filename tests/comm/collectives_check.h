// Closed-form collective checks shared by the local (threads) and ucx (processes) tests: every rank
// fills its inputs from a formula of (rank, index) and checks the result against the formula's
// reduction, computed locally. Values are small integers so fp16/bf16 sums are exact; averages are
// computed as the backends promise: exact fp32 sum, one fp32 division, one rounding.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <cstring>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/dtype.h"

namespace zerorun::comm::testing {

// Input of `rank` at index i: an integer in [-8, 8].
inline int InputValue(int rank, size_t i) { return static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3 + 1) % 17) - 8; }

inline void Store(DType t, void* buf, size_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DType::kF64: static_cast<double*>(buf)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(buf)[i] = FloatToHalfBits(static_cast<float>(v)); break;
    case DType::kBF16: static_cast<uint16_t*>(buf)[i] = FloatToBF16Bits(static_cast<float>(v)); break;
    case DType::kI32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DType::kI64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    default: break;
  }
}

inline double Load(DType t, const void* buf, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(buf)[i];
    case DType::kF64: return static_cast<const double*>(buf)[i];
    case DType::kF16: return HalfBitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DType::kBF16: return BF16BitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DType::kI32: return static_cast<const int32_t*>(buf)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    default: return 0;
  }
}

// The expected reduction of InputValue over `n` ranks at index i, as stored in dtype t.
inline double Expected(DType t, ReduceOp op, int n, size_t i) {
  int64_t sum = 0, mx = -100, mn = 100;
  for (int r = 0; r < n; ++r) {
    int v = InputValue(r, i);
    sum += v;
    mx = std::max<int64_t>(mx, v);
    mn = std::min<int64_t>(mn, v);
  }
  switch (op) {
    case ReduceOp::kSum: return static_cast<double>(sum);
    case ReduceOp::kMax: return static_cast<double>(mx);
    case ReduceOp::kMin: return static_cast<double>(mn);
    case ReduceOp::kAvg:
      if (t == DType::kI32 || t == DType::kI64) return static_cast<double>(sum / n);
      if (t == DType::kF64) return static_cast<double>(sum) / n;
      {
        float f = static_cast<float>(sum) / static_cast<float>(n);
        if (t == DType::kF16) return HalfBitsToFloat(FloatToHalfBits(f));
        if (t == DType::kBF16) return BF16BitsToFloat(FloatToBF16Bits(f));
        return f;
      }
  }
  return 0;
}

inline std::vector<char> Filled(DType t, int rank, size_t count, size_t offset = 0) {
  std::vector<char> b(count * DTypeSize(t) + 1);
  for (size_t i = 0; i < count; ++i) Store(t, b.data(), i, InputValue(rank, offset + i));
  return b;
}

// Counts mismatches (reported once with the first index) to keep doctest output small.
inline void CheckRange(const char* what, DType t, const void* buf, size_t count, const std::function<double(size_t)>& want) {
  size_t bad = 0, first = 0;
  double got_first = 0, want_first = 0;
  for (size_t i = 0; i < count; ++i) {
    double g = Load(t, buf, i), w = want(i);
    if (g != w) {
      if (bad++ == 0) {
        first = i;
        got_first = g;
        want_first = w;
      }
    }
  }
  INFO(what << " dtype " << DTypeName(t) << " count " << count << ": first mismatch at " << first << " got "
            << got_first << " want " << want_first);
  CHECK(bad == 0);
}

const std::vector<DType> kAllDTypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64};
const std::vector<ReduceOp> kAllOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// Runs every collective with every dtype and op for each count on `comm`; returns the number of
// collectives issued (for stats checks).
inline void CheckAllCollectives(Communicator& comm, const std::vector<size_t>& counts,
                                const std::vector<DType>& dtypes = kAllDTypes, const std::vector<ReduceOp>& ops = kAllOps) {
  const int n = comm.size(), r = comm.rank();
  for (size_t count : counts) {
    for (DType t : dtypes) {
      const size_t es = DTypeSize(t);
      for (ReduceOp op : ops) {
        INFO("all_reduce " << ReduceOpName(op) << " n=" << n << " rank " << r);
        auto in = Filled(t, r, count);
        std::vector<char> out(count * es + 1);
        comm.AllReduce(in.data(), out.data(), count, t, op).Wait();
        CheckRange("all_reduce", t, out.data(), count, [&](size_t i) { return Expected(t, op, n, i); });
        comm.AllReduce(in.data(), count, t, op).Wait();  // in place
        CheckRange("all_reduce in place", t, in.data(), count, [&](size_t i) { return Expected(t, op, n, i); });

        // reduce_scatter: rank q's input is the formula over the full range n·count.
        auto rs_in = Filled(t, r, count * static_cast<size_t>(n));
        std::vector<char> rs_out(count * es + 1);
        comm.ReduceScatter(rs_in.data(), rs_out.data(), count, t, op).Wait();
        CheckRange("reduce_scatter", t, rs_out.data(), count,
                   [&](size_t i) { return Expected(t, op, n, static_cast<size_t>(r) * count + i); });
        comm.ReduceScatter(rs_in.data(), rs_in.data() + static_cast<size_t>(r) * count * es, count, t, op).Wait();
        CheckRange("reduce_scatter in place", t, rs_in.data() + static_cast<size_t>(r) * count * es, count,
                   [&](size_t i) { return Expected(t, op, n, static_cast<size_t>(r) * count + i); });

        int root = static_cast<int>((count + static_cast<size_t>(op == ReduceOp::kMax)) % static_cast<size_t>(n));
        auto red_in = Filled(t, r, count);
        std::vector<char> red_out(count * es + 1);
        comm.Reduce(red_in.data(), red_out.data(), count, t, op, root).Wait();
        if (r == root) CheckRange("reduce", t, red_out.data(), count, [&](size_t i) { return Expected(t, op, n, i); });
      }
      // all_gather: out[q·count + i] = InputValue(q, i)
      auto ag_in = Filled(t, r, count);
      std::vector<char> ag_out(count * es * static_cast<size_t>(n) + 1);
      comm.AllGather(ag_in.data(), ag_out.data(), count, t).Wait();
      CheckRange("all_gather", t, ag_out.data(), count * static_cast<size_t>(n),
                 [&](size_t j) { return InputValue(static_cast<int>(j / std::max<size_t>(count, 1)), j % std::max<size_t>(count, 1)); });
      std::vector<char> ag_inplace(count * es * static_cast<size_t>(n) + 1);
      if (count) std::memcpy(ag_inplace.data() + static_cast<size_t>(r) * count * es, ag_in.data(), count * es);
      comm.AllGather(ag_inplace.data() + static_cast<size_t>(r) * count * es, ag_inplace.data(), count, t).Wait();
      CheckRange("all_gather in place", t, ag_inplace.data(), count * static_cast<size_t>(n),
                 [&](size_t j) { return InputValue(static_cast<int>(j / std::max<size_t>(count, 1)), j % std::max<size_t>(count, 1)); });
      // broadcast from the last rank
      int root = n - 1;
      auto bc = Filled(t, r, count);
      comm.Broadcast(bc.data(), count, t, root).Wait();
      CheckRange("broadcast", t, bc.data(), count, [&](size_t i) { return InputValue(root, i); });
    }
  }
  comm.Barrier().Wait();
}

// Ring of sends: rank r sends to r+1 and receives from r-1, with two tags in flight at once.
inline void CheckSendRecv(Communicator& comm, size_t count) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  auto a = Filled(DType::kF32, r, count), b = Filled(DType::kF32, r + 100, count);
  std::vector<char> ra(count * 4 + 1), rb(count * 4 + 1);
  Work w1 = comm.Recv(rb.data(), count, DType::kF32, left, 2);
  Work w2 = comm.Recv(ra.data(), count, DType::kF32, left, 1);
  Work w3 = comm.Send(a.data(), count, DType::kF32, right, 1);
  Work w4 = comm.Send(b.data(), count, DType::kF32, right, 2);
  w1.Wait();
  w2.Wait();
  w3.Wait();
  w4.Wait();
  CheckRange("recv tag 1", DType::kF32, ra.data(), count, [&](size_t i) { return InputValue(left, i); });
  CheckRange("recv tag 2", DType::kF32, rb.data(), count, [&](size_t i) { return InputValue(left + 100, i); });
}

}  // namespace zerorun::comm::testing
