#include "zerorun/comm/select.h"

#include <cstdio>

#include "zerorun/core/error.h"

namespace zerorun::comm {

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kCopy: return "copy";
    case Algorithm::kOneShot: return "one_shot";
    case Algorithm::kReduceScatterAllGather: return "rs_ag";
    case Algorithm::kReduceScatterDirect: return "rs";
    case Algorithm::kReduceScatterGather: return "rs_gather";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kCounters: return "counters";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kBinomialTree: return "binomial_tree";
    case Algorithm::kP2P: return "p2p";
    case Algorithm::kHierarchical: return "hierarchical";
  }
  return "?";
}
const char* ProtocolName(Protocol p) { return p == Protocol::kEager ? "eager" : "pipelined"; }
const char* TransportName(Transport t) {
  switch (t) {
    case Transport::kSelf: return "self";
    case Transport::kShm: return "shm";
    case Transport::kUcx: return "ucx";
    case Transport::kShmUcx: return "shm+ucx";
  }
  return "?";
}

namespace {
constexpr int kAlgorithms = static_cast<int>(Algorithm::kHierarchical) + 1;
constexpr int kTransports = static_cast<int>(Transport::kShmUcx) + 1;
struct Names {
  std::string s[kAlgorithms][2][kTransports];
  Names() {
    for (int a = 0; a < kAlgorithms; ++a) {
      for (int p = 0; p < 2; ++p) {
        for (int t = 0; t < kTransports; ++t) {
          s[a][p][t] = std::string(AlgorithmName(static_cast<Algorithm>(a))) + "/" + ProtocolName(static_cast<Protocol>(p)) +
                       "/" + TransportName(static_cast<Transport>(t));
        }
      }
    }
  }
};
const Names& AllNames() {
  static const Names names;
  return names;
}
}  // namespace

const char* Selection::Describe() const {
  return AllNames().s[static_cast<int>(algorithm)][static_cast<int>(protocol)][static_cast<int>(transport)].c_str();
}

Selection Select(const SelectInput& in) {
  using A = Algorithm;
  using P = Protocol;
  if (in.op == OpType::kSend || in.op == OpType::kRecv) return {A::kP2P, P::kEager, Transport::kUcx};
  if (in.size <= 1) return {A::kCopy, P::kEager, Transport::kSelf};
  const bool small = in.bytes <= in.small_bytes;
  if (in.shm) {
    const Transport t = Transport::kShm;
    switch (in.op) {
      case OpType::kAllReduce:
        // Same threshold as the UCX path: the same sizes get the same reduction order. With 2 ranks a sum
        // is the same either way (a + b = b + a), and from 16 KiB on reduce-scatter + all-gather, which
        // stages and reduces half as much per rank, was faster (64 KiB: 4.5-4.6 us against 5.3-5.5).
        if (small && in.size == 2 && in.bytes > kShmTwoRankOneShotBytes &&
            (in.reduce == ReduceOp::kSum || in.reduce == ReduceOp::kAvg)) {
          return {A::kReduceScatterAllGather, P::kPipelined, t};
        }
        if (small || in.count < static_cast<size_t>(in.size)) return {A::kOneShot, P::kEager, t};
        return {A::kReduceScatterAllGather, P::kPipelined, t};
      case OpType::kReduceScatter: return {A::kReduceScatterDirect, P::kPipelined, t};
      case OpType::kAllGather:
      case OpType::kBroadcast: return {A::kDirect, P::kPipelined, t};
      case OpType::kReduce: return {A::kReduceScatterGather, P::kPipelined, t};
      case OpType::kBarrier: return {A::kCounters, P::kEager, t};
      default: break;
    }
  } else {
    const Transport t = Transport::kUcx;
    switch (in.op) {
      case OpType::kAllReduce:
        // kAvg stays flat: the leaders' sum would need its own division step.
        if (in.hierarchical && !small && in.count >= static_cast<size_t>(in.size) && in.reduce != ReduceOp::kAvg) {
          return {A::kHierarchical, P::kPipelined, Transport::kShmUcx};
        }
        if (small || in.count < static_cast<size_t>(in.size)) return {A::kRecursiveDoubling, P::kEager, t};
        return {A::kRing, P::kPipelined, t};
      case OpType::kReduceScatter:
      case OpType::kAllGather: return {A::kRing, P::kPipelined, t};
      case OpType::kBroadcast:
      case OpType::kReduce: return {A::kBinomialTree, P::kEager, t};
      case OpType::kBarrier: return {A::kRecursiveDoubling, P::kEager, t};
      default: break;
    }
  }
  ZR_CHECK(false, "Select: unhandled op {}", OpTypeName(in.op));
  return {};
}

namespace {
std::string Row(const char* a, const std::string& b, const char* c, const char* d) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-15s %10s  %-32s %s\n", a, b.c_str(), c, d);
  return buf;
}
}  // namespace

std::string SelectionTable(int size, size_t small_bytes) {
  std::string out = Row("op", "bytes", "ranks on one host", "otherwise");
  const OpType ops[] = {OpType::kAllReduce, OpType::kReduceScatter, OpType::kAllGather, OpType::kBroadcast,
                        OpType::kReduce, OpType::kBarrier};
  for (OpType op : ops) {
    for (size_t bytes : {size_t{4096}, size_t{16} << 20}) {
      if (op == OpType::kBarrier && bytes > 4096) continue;
      SelectInput in;
      in.op = op;
      in.bytes = op == OpType::kBarrier ? 0 : bytes;
      in.count = in.bytes / 4;
      in.size = size;
      in.small_bytes = small_bytes;
      in.shm = true;
      const char* a = Select(in).Describe();
      in.shm = false;
      out += Row(OpTypeName(op), std::to_string(in.bytes), a, Select(in).Describe());
    }
  }
  return out;
}

}  // namespace zerorun::comm
