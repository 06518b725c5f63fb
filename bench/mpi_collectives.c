/* What OpenMPI's collectives cost on this machine for a gradient arena, outside llamatrain: the
 * blocking and non-blocking all-reduce (in pieces of BUCKET floats), reduce-scatter and all-gather
 * of N floats (default 15M = 60 MB, stories15m's gradients). Best of 5 rounds, rank 0 prints.
 * Build and run (docs/performance.md, "Data parallelism"):
 *   mpicc -O2 -o /tmp/mpi_collectives bench/mpi_collectives.c
 *   mpirun -np 2 /tmp/mpi_collectives [N] [BUCKET]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double best[4] = {1e30, 1e30, 1e30, 1e30};

static void keep(int i, double t) {
  if (t < best[i]) best[i] = t;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const long n0 = argc > 1 ? atol(argv[1]) : 15000000L, bucket = argc > 2 ? atol(argv[2]) : 4194304L;
  const long block = (n0 + ranks - 1) / ranks, n = block * ranks;
  float* x = malloc((size_t)n * sizeof *x);
  float* y = malloc((size_t)block * sizeof *y);
  for (long i = 0; i < n; i++) x[i] = 1.0f;
  for (int round = 0; round < 5; round++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (long o = 0; o < n; o += bucket)
      MPI_Allreduce(MPI_IN_PLACE, x + o, (int)(o + bucket < n ? bucket : n - o), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    keep(0, MPI_Wtime() - t);
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    for (long o = 0; o < n; o += bucket) {
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, x + o, (int)(o + bucket < n ? bucket : n - o), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                     &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    keep(1, MPI_Wtime() - t);
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    MPI_Reduce_scatter_block(x, y, (int)block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    keep(2, MPI_Wtime() - t);
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    MPI_Allgather(y, (int)block, MPI_FLOAT, x, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
    keep(3, MPI_Wtime() - t);
  }
  if (rank == 0)
    printf("%d ranks, %ld floats (%.0f MB), buckets of %ld: MPI_Allreduce %.1f ms, MPI_Iallreduce + wait %.1f ms, "
           "MPI_Reduce_scatter_block %.1f ms, MPI_Allgather %.1f ms\n",
           ranks, n, n * 4e-6, bucket, 1e3 * best[0], 1e3 * best[1], 1e3 * best[2], 1e3 * best[3]);
  free(x);
  free(y);
  MPI_Finalize();
  return 0;
}
