// The per-thread forward MAC counter (flops.h).
#include "zerorun/runtime/nn/flops.h"

namespace zerorun::nn {

namespace {
thread_local int64_t t_macs = 0;
}  // namespace

void CountForwardMacs(int64_t macs) { t_macs += macs; }
int64_t ForwardMacsCounter() { return t_macs; }

}  // namespace zerorun::nn
