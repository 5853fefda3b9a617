/* The OpenMPI baseline for bench/comm/run.sh: MPI_Allreduce, MPI_Reduce_scatter_block or MPI_Allgather
 * (float, sum) per message size, timed like zerorun-bench (warm-up, barrier, mean over iterations, the
 * slowest rank's time) and printed as the same JSON lines: op, backend, ranks, dtype, size_bytes, iters,
 * time_us, algbw_gbps, busbw_gbps. size_bytes is the full buffer (all-reduce: the buffer; reduce-scatter:
 * the input; all-gather: the output), rounded to whole elements per rank as zerorun-bench rounds it.
 * all_gather_inplace: MPI_Allgather with MPI_IN_PLACE (each rank's block already in the output, as
 * zerorun-bench all_gather --in-place and as ZeRO gathers its parameters).
 *   mpi_collectives [--op all_reduce|reduce_scatter|all_gather|all_gather_inplace] [--label NAME] BYTES... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* op = "all_reduce";
  const char* label = "openmpi";
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--op") == 0 && a + 1 < argc) {
      op = argv[++a];
      continue;
    }
    if (strcmp(argv[a], "--label") == 0 && a + 1 < argc) {
      label = argv[++a];
      continue;
    }
    const int ar = strcmp(op, "all_reduce") == 0, rs = strcmp(op, "reduce_scatter") == 0;
    const int inplace = strcmp(op, "all_gather_inplace") == 0;
    size_t count = (size_t)strtoull(argv[a], NULL, 10) / sizeof(float);
    if (!ar) count = (count / (size_t)n < 1 ? 1 : count / (size_t)n) * (size_t)n;
    if (count == 0) count = 1;
    const size_t bytes = count * sizeof(float), per = ar ? count : count / (size_t)n;
    float* send = malloc((rs || ar ? count : per) * sizeof(float));
    float* recv = malloc((rs ? per : count) * sizeof(float));
    for (size_t i = 0; i < (rs || ar ? count : per); ++i) send[i] = (float)(rank + 1);
    double guess = 2e9 / ((double)bytes * 20 + 2e6);
    int iters = guess < 5 ? 5 : guess > 1000 ? 1000 : (int)guess;
    int warmup = iters / 10 < 2 ? 2 : iters / 10;
    for (int i = -warmup; i < iters; ++i) {
      if (i == 0) MPI_Barrier(MPI_COMM_WORLD);
      if (ar) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (rs) MPI_Reduce_scatter_block(send, recv, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (inplace) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Allgather(send, (int)per, MPI_FLOAT, recv, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      if (ar) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (rs) MPI_Reduce_scatter_block(send, recv, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (inplace) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Allgather(send, (int)per, MPI_FLOAT, recv, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
    }
    double t = (MPI_Wtime() - t0) / iters, tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)bytes / tmax / 1e9;
      double factor = ar ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
      printf("{\"op\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"dtype\": \"fp32\", \"size_bytes\": %zu, "
             "\"iters\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f}\n",
             op, label, n, bytes, iters, tmax * 1e6, algbw, algbw * factor);
      fflush(stdout);
    }
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return 0;
}
