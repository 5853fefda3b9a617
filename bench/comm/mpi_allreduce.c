/* The OpenMPI baseline for bench/comm/run.sh: MPI_Allreduce (float, sum) per message size, timed like
 * zerorun-bench (warm-up, barrier, mean over iterations, the slowest rank's time) and printed as the
 * same JSON lines: op, backend, ranks, dtype, size_bytes, iters, time_us, algbw_gbps, busbw_gbps. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int a = 1; a < argc; ++a) {
    size_t bytes = (size_t)strtoull(argv[a], NULL, 10);
    size_t count = bytes / sizeof(float);
    float* send = malloc(count * sizeof(float));
    float* recv = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; ++i) send[i] = (float)(rank + 1);
    double guess = 2e9 / ((double)bytes * 20 + 2e6);
    int iters = guess < 5 ? 5 : guess > 1000 ? 1000 : (int)guess;
    int warmup = iters / 10 < 2 ? 2 : iters / 10;
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters, tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)bytes / tmax / 1e9;
      printf("{\"op\": \"all_reduce\", \"backend\": \"openmpi\", \"ranks\": %d, \"dtype\": \"fp32\", \"size_bytes\": %zu, "
             "\"iters\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f}\n",
             n, bytes, iters, tmax * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
      fflush(stdout);
    }
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return 0;
}
