/* comm.h — the communicator the trainer talks to: rank, world size and
 * local rank from MPI, and the few collectives training needs. Every MPI call
 * is checked; a failure aborts all ranks naming the call, rank and MPI's
 * error string. The CUDA/NCCL path of a later issue implements the same
 * calls for device buffers.
 *
 * comm_init/comm_finalize bracket the program; the struct owns the
 * communicators it created. */
#ifndef RNND_COMM_H
#define RNND_COMM_H

#include <mpi.h>
#include <stddef.h>

typedef struct {
  MPI_Comm world;
  MPI_Comm node;   /* ranks on this node (MPI_COMM_TYPE_SHARED) */
  int rank, size;
  int local_rank, local_size;
} rnnd_comm;

void comm_init(rnnd_comm *c, int *argc, char ***argv);
void comm_finalize(rnnd_comm *c);
/* In-place sums over all ranks. */
void comm_allreduce_sum_f32(const rnnd_comm *c, float *data, size_t count);
void comm_allreduce_sum_f64(const rnnd_comm *c, double *data, size_t count);
void comm_broadcast(const rnnd_comm *c, void *data, size_t bytes, int root);
void comm_barrier(const rnnd_comm *c);

#endif
