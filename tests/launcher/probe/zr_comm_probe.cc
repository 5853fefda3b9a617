// zr_comm_probe: the smallest real distributed job for the launcher's end-to-end tests. Each rank
// joins the world through comm::InitFromEnv (the environment the launcher sets: rendezvous at
// MASTER_ADDR:MASTER_PORT with ZERORUN_JOB_TOKEN), all-reduces closed-form data and checks the
// result, then writes DIR/comm<rank>.gen<ZERORUN_RESTART>.txt ("ok <world> <sum>" or "bad ...") and
// exits 0 / 1. --die_rank R --die_generation G: rank R of generation G dies (_exit(7)) right after the
// first all-reduce, leaving its peers in the next collective (restart tests).
//   zr_comm_probe [--local_rank=N] --out DIR [--die_rank R --die_generation G]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "zerorun/comm/init.h"
#include "zerorun/core/error.h"

int main(int argc, char** argv) {
  std::string out_dir = ".";
  int die_rank = -1;
  int die_generation = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0) out_dir = argv[i + 1];
    if (std::strcmp(argv[i], "--die_rank") == 0) die_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--die_generation") == 0) die_generation = std::atoi(argv[i + 1]);
  }
  const char* gen_env = std::getenv("ZERORUN_RESTART");
  const int generation = gen_env ? std::atoi(gen_env) : 0;
  try {
    auto comm = zerorun::comm::InitFromEnv();
    const int rank = comm->rank();
    const int world = comm->size();
    int64_t v = rank + 1;
    comm->AllReduce(&v, 1, zerorun::DType::kI64, zerorun::comm::ReduceOp::kSum).Wait();
    if (rank == die_rank && generation == die_generation) {
      std::fprintf(stderr, "comm probe rank %d dying on purpose in generation %d\n", rank, generation);
      _exit(7);
    }
    std::vector<float> f(4099);
    for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(rank) + static_cast<float>(i % 7);
    comm->AllReduce(f.data(), f.size(), zerorun::DType::kF32, zerorun::comm::ReduceOp::kSum).Wait();
    bool ok = v == static_cast<int64_t>(world) * (world + 1) / 2;
    for (size_t i = 0; i < f.size(); ++i) {
      float want = static_cast<float>(world * (world - 1) / 2) + static_cast<float>(world) * static_cast<float>(i % 7);
      ok = ok && f[i] == want;
    }
    std::string path = out_dir + "/comm" + std::to_string(rank) + ".gen" + std::to_string(generation) + ".txt";
    if (FILE* file = std::fopen(path.c_str(), "w")) {
      std::fprintf(file, "%s %d %lld\n", ok ? "ok" : "bad", world, static_cast<long long>(v));
      std::fclose(file);
    }
    std::printf("comm probe rank %d of %d: all_reduce %s\n", rank, world, ok ? "ok" : "WRONG");
    comm.reset();  // clean check-out through the store
    return ok ? 0 : 1;
  } catch (const zerorun::Error& e) {
    std::fprintf(stderr, "comm probe: %s\n", e.what());
    return 3;
  }
}
