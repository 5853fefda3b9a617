// Collective algorithms of the UCX backend, written against the request engine (PostSend/PostRecv
// with completion handlers, RunUntilDone).
//
// Pipelined ring (all-reduce, reduce-scatter, all-gather). The buffer is cut into n chunks, one per
// rank; each chunk into segments of ZERORUN_UCX_SEGMENT_BYTES. Ranks form a ring (left = r-1,
// right = r+1).
//   reduce-scatter phase, steps s = 0..n-2: rank r sends chunk (r-s-1) to the right and receives
//     chunk (r-s-2) from the left, adds its own contribution and, at step s+1, forwards the sum.
//     After n-1 steps rank r holds the full reduction of chunk r.
//   all-gather phase, steps s = 0..n-2: rank r sends chunk (r-s) and receives chunk (r-s-1),
//     forwarding it at the next step; after n-1 steps every rank has every chunk.
// The pipeline is per segment: as soon as segment j of step s arrives it is reduced and sent on as
// segment j of step s+1, while later segments are still in flight, so reduction overlaps transfer.
// Reduce-scatter receives go to two scratch slots per segment (step parity): the receive for step
// s+2 is posted once step s's data in that slot has been reduced. All-gather receives land directly
// in the output, so they are all posted up front. 16-bit partial sums travel as 16-bit (each hop
// adds in fp32 and rounds once); the final value is identical on every rank because the all-gather
// phase copies the owner's result.
//
// Recursive doubling (small all-reduce, barrier): ranks beyond the largest power of two p first fold
// their data into rank r-p; the p ranks then exchange and combine with partner r^mask for
// mask = 1, 2, 4, ...; the folded ranks get the result back. Partials travel in the accumulation type
// (fp32 for 16-bit data) and are rounded once at the end. Combination order is symmetric, so every
// rank ends with the same bits.
//
// Binomial trees (broadcast; reduce, which accumulates like recursive doubling) rooted at `root`.
#include <algorithm>
#include <cstring>

#include "zerorun/comm/reduce.h"
#include "zerorun/comm/ucx/ucx_comm_impl.h"
#include "zerorun/core/error.h"

namespace zerorun::comm::ucx {

namespace {
inline int Mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

void UcxCommunicator::CopyLocal(OpDesc& op) {
  const size_t bytes = op.count * DTypeSize(op.dtype);
  switch (op.op) {
    case OpType::kAllReduce:
    case OpType::kReduce:
    case OpType::kReduceScatter:
      if (op.recv && op.count) {
        std::vector<char> acc(op.count * DTypeSize(AccumType(op.dtype)));
        ToAccum(acc.data(), op.send, op.count, op.dtype);
        FinishFromAccum(op.recv, acc.data(), op.count, op.dtype, op.reduce, 1);
      }
      return;
    case OpType::kAllGather:
      if (bytes && op.send != op.recv) CopyBytes(op.recv, op.send, bytes);
      return;
    default:
      return;
  }
}

void UcxCommunicator::Ring(OpDesc& op, RingMode mode) {
  const int n = size(), r = rank();
  const int left = Mod(r - 1, n), right = Mod(r + 1, n);
  const DType dt = op.dtype;
  const size_t es = DTypeSize(dt);
  const size_t count = op.count;

  // Chunk c covers elements [Off(c), Off(c) + Len(c)) of the full buffer.
  const size_t base = mode == RingMode::kAllReduce ? count / static_cast<size_t>(n) : count;
  const size_t rem = mode == RingMode::kAllReduce ? count % static_cast<size_t>(n) : 0;
  auto Off = [&](int c) { return static_cast<size_t>(c) * base + std::min(static_cast<size_t>(c), rem); };
  auto Len = [&](int c) { return base + (static_cast<size_t>(c) < rem ? 1 : 0); };
  const size_t max_len = base + (rem ? 1 : 0);
  size_t seg = std::max<size_t>(1, ucx_.segment_bytes / es);
  // Sub-step tags are step·S + j < 2^20: grow the segment when a huge buffer would need more.
  const size_t max_segs = kMaxSub / (2 * static_cast<size_t>(n));
  if ((max_len + seg - 1) / seg > max_segs) seg = (max_len + max_segs - 1) / max_segs;
  const uint32_t S = static_cast<uint32_t>((max_len + seg - 1) / seg);
  auto Exists = [&](int c, uint32_t j) { return j * seg < Len(c); };
  auto SegLen = [&](int c, uint32_t j) { return std::min(seg, Len(c) - j * seg); };
  auto SegOff = [&](int c, uint32_t j) { return (Off(c) + j * seg) * es; };  // bytes into the full buffer
  auto Tag = [&](int phase_step, uint32_t j) { return CollTag(op.seq, 0, static_cast<uint32_t>(phase_step) * S + j); };
  // The source rank is implied (always the left neighbour), so tags need not carry it.

  const char* src = static_cast<const char*>(op.send);
  char* work = static_cast<char*>(op.recv);
  if (mode == RingMode::kReduceScatter) work = work_.Get(count * static_cast<size_t>(n) * es);
  if (mode == RingMode::kAllGather && count) {
    char* mine = work + SegOff(r, 0);
    if (mine != src) CopyBytes(mine, src, count * es);
  }

  // ---- all-gather phase ----
  const bool gather = mode != RingMode::kReduceScatter;
  auto AgSendChunk = [&](int s) { return Mod(r - s, n); };
  auto AgRecvChunk = [&](int s) { return Mod(r - s - 1, n); };
  std::function<void(int, uint32_t)> OnAgRecv = [&](int s, uint32_t j) {
    if (s < n - 2) {
      int c = AgRecvChunk(s);  // == AgSendChunk(s + 1)
      PostSend(right, work + SegOff(c, j), SegLen(c, j) * es, Tag(n - 1 + s + 1, j));
    }
  };
  auto StartAg = [&](uint32_t j) {
    if (Exists(r, j)) PostSend(right, work + SegOff(r, j), SegLen(r, j) * es, Tag(n - 1, j));
  };
  if (gather) {
    for (int s = 0; s <= n - 2; ++s) {
      int c = AgRecvChunk(s);
      for (uint32_t j = 0; j < S; ++j) {
        if (Exists(c, j)) PostRecv(left, work + SegOff(c, j), SegLen(c, j) * es, Tag(n - 1 + s, j), [&, s, j] { OnAgRecv(s, j); });
      }
    }
    (void)AgSendChunk;
  }
  if (mode == RingMode::kAllGather) {
    for (uint32_t j = 0; j < S; ++j) StartAg(j);
    RunUntilDone(op);
    return;
  }

  // ---- reduce-scatter phase ----
  auto RsSendChunk = [&](int s) { return Mod(r - s - 1, n); };
  auto RsRecvChunk = [&](int s) { return Mod(r - s - 2, n); };
  char* slots = tmp_.Get(2 * static_cast<size_t>(S) * seg * es);
  auto Slot = [&](int s, uint32_t j) { return slots + ((static_cast<size_t>(s % 2) * S + j) * seg) * es; };
  auto NextRsStep = [&](int from, uint32_t j) {
    for (int s = from; s <= n - 2; s += 2) {
      if (Exists(RsRecvChunk(s), j)) return s;
    }
    return -1;
  };
  std::function<void(int, uint32_t)> PostRsRecv;
  auto OnRsRecv = [&](int s, uint32_t j) {
    const int c = RsRecvChunk(s);
    const size_t elems = SegLen(c, j);
    const char* own = src + SegOff(c, j);
    if (s == n - 2) {  // c == r: the final value of this segment
      char* out = mode == RingMode::kAllReduce ? work + SegOff(c, j) : static_cast<char*>(op.recv) + j * seg * es;
      ReduceBuffers(out, own, Slot(s, j), elems, dt, op.reduce, n);
      if (gather) StartAg(j);
    } else {
      char* out = work + SegOff(c, j);
      ReduceBuffers(out, own, Slot(s, j), elems, dt, op.reduce, 0);
      PostSend(right, out, elems * es, Tag(s + 1, j));  // c == RsSendChunk(s + 1)
    }
    int next = NextRsStep(s + 2, j);
    if (next >= 0) PostRsRecv(next, j);
  };
  PostRsRecv = [&](int s, uint32_t j) {
    int c = RsRecvChunk(s);
    PostRecv(left, Slot(s, j), SegLen(c, j) * es, Tag(s, j), [&, s, j] { OnRsRecv(s, j); });
  };
  for (uint32_t j = 0; j < S; ++j) {
    for (int p = 0; p < 2; ++p) {
      int s = NextRsStep(p, j);
      if (s >= 0) PostRsRecv(s, j);
    }
    int c0 = RsSendChunk(0);
    if (Exists(c0, j)) PostSend(right, src + SegOff(c0, j), SegLen(c0, j) * es, Tag(0, j));
  }
  RunUntilDone(op);
}

void UcxCommunicator::RecursiveDoubling(const OpDesc& op, const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp reduce) {
  const int n = size(), r = rank();
  const DType at = AccumType(dtype);
  const size_t bytes = count * DTypeSize(at);
  char* acc = acc_.Get(std::max<size_t>(bytes, 1));
  char* tmp = tmp_.Get(std::max<size_t>(bytes, 1));
  ToAccum(acc, send, count, dtype);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  const uint32_t kFinal = kMaxSub - 1;
  if (r >= p2) {  // folded rank: hand the data over, get the result back
    PostSend(r - p2, acc, bytes, CollTag(op.seq, r, 0));
    PostRecv(r - p2, acc, bytes, CollTag(op.seq, r - p2, kFinal));
    RunUntilDone(op);
  } else {
    if (r < extra) {
      PostRecv(r + p2, tmp, bytes, CollTag(op.seq, r + p2, 0));
      RunUntilDone(op);
      ReduceBuffers(acc, acc, tmp, count, at, reduce, 0);
    }
    uint32_t step = 1;
    for (int mask = 1; mask < p2; mask <<= 1, ++step) {
      const int partner = r ^ mask;
      PostRecv(partner, tmp, bytes, CollTag(op.seq, partner, step));
      PostSend(partner, acc, bytes, CollTag(op.seq, r, step));
      RunUntilDone(op);
      // Symmetric order (lower rank's data first) so both partners compute identical bits.
      if (r < partner) {
        ReduceBuffers(acc, acc, tmp, count, at, reduce, 0);
      } else {
        ReduceBuffers(acc, tmp, acc, count, at, reduce, 0);
      }
    }
    if (r < extra) {
      PostSend(r + p2, acc, bytes, CollTag(op.seq, r, kFinal));
      RunUntilDone(op);
    }
  }
  FinishFromAccum(recv, acc, count, dtype, reduce, n);
}

void UcxCommunicator::TreeBroadcast(OpDesc& op) {
  const int n = size();
  const int vr = Mod(rank() - op.root, n);
  const size_t bytes = op.count * DTypeSize(op.dtype);
  auto Real = [&](int v) { return Mod(v + op.root, n); };
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      PostRecv(Real(vr - mask), op.recv, bytes, CollTag(op.seq, Real(vr - mask), 0));
      RunUntilDone(op);
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  while (mask > 0) {
    if (vr + mask < n) PostSend(Real(vr + mask), op.recv, bytes, CollTag(op.seq, rank(), 0));
    mask >>= 1;
  }
  RunUntilDone(op);
}

void UcxCommunicator::TreeReduce(OpDesc& op) {
  // Binomial tree toward the root: each rank accumulates its children's partials in the accumulation
  // type and sends its partial once, in the op's own dtype, so a 16-bit reduce moves 16-bit elements
  // (each non-root rank sends `count` elements: the reduce-scatter volume ZeRO's accounting expects).
  const int n = size();
  const int vr = Mod(rank() - op.root, n);
  const DType at = AccumType(op.dtype);
  const size_t acc_bytes = op.count * DTypeSize(at);
  const size_t wire_bytes = op.count * DTypeSize(op.dtype);
  auto Real = [&](int v) { return Mod(v + op.root, n); };
  char* acc = acc_.Get(acc_bytes);
  char* wire = tmp_.Get(wire_bytes);
  ToAccum(acc, op.send, op.count, op.dtype);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      FinishFromAccum(wire, acc, op.count, op.dtype, ReduceOp::kSum, 0);  // round the partial once
      PostSend(Real(vr - mask), wire, wire_bytes, CollTag(op.seq, rank(), 0));
      RunUntilDone(op);
      return;
    }
    if (vr + mask < n) {
      const int child = Real(vr + mask);
      PostRecv(child, wire, wire_bytes, CollTag(op.seq, child, 0));
      RunUntilDone(op);
      ReduceIntoAccum(acc, acc, wire, op.count, op.dtype, op.reduce);
    }
  }
  FinishFromAccum(op.recv, acc, op.count, op.dtype, op.reduce, n);
}

}  // namespace zerorun::comm::ucx
