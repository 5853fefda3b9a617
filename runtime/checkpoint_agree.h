// Small collectives the checkpoint protocol agrees through: every rank learns every rank's error (so
// all ranks throw the same error naming the ranks that failed, instead of some waiting forever), and
// a root's string reaches everyone. Built on comm::Communicator, so they inherit its timeouts and
// dead-peer detection, and run on the `local` backend in tests.
#pragma once

#include <string>
#include <vector>

#include "zerorun/comm/communicator.h"

namespace zerorun::runtime {

// Collective. Element r is rank r's `mine` ("" = no error), truncated to 4096 bytes. Costs one
// 8-byte all-reduce when no rank failed, two all-gathers more when one did.
std::vector<std::string> AgreeOnErrors(comm::Communicator& comm, const std::string& mine);

// "rank 1: <text>; rank 3: <text>" over the non-empty entries ("" when none).
std::string JoinRankErrors(const std::vector<std::string>& errors);

// Collective: root's `value` on every rank (two broadcasts; one when it is empty).
std::string BroadcastString(comm::Communicator& comm, const std::string& value, int root = 0);

}  // namespace zerorun::runtime
