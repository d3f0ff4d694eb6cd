/* comm.h — the communicator the trainer talks to: rank, world size and
 * local rank from MPI, and the few collectives training needs. Every MPI call
 * is checked; a failure aborts all ranks naming the call, rank and MPI's
 * error string. On GPUs the gradient itself goes through NCCL instead
 * (cuda_backend.h, nccl_create), bootstrapped over this communicator.
 *
 * 16-bit sums (fp16, bf16) use user-defined MPI_Ops on 16-bit words: each
 * combine adds in fp32 and rounds once to the 16-bit format.
 *
 * comm_init/comm_finalize bracket the program; the struct owns the
 * communicators and MPI ops it created. comm_init asks Open MPI for the ring
 * algorithm in its non-blocking all-reduce unless the environment chooses
 * (comm_mpi.c says why). */
#ifndef RNND_COMM_H
#define RNND_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "rnnd/common.h"
#include "rnnd/half.h"

typedef struct {
  MPI_Comm world;
  MPI_Comm node;   /* ranks on this node (MPI_COMM_TYPE_SHARED) */
  int rank, size;
  int local_rank, local_size;
  MPI_Op sum_f16, sum_bf16;
  struct rnnd_watchdog *watchdog; /* NULL: no bound on waits (comm_set_timeout) */
} rnnd_comm;

void comm_init(rnnd_comm *c, int *argc, char ***argv);
void comm_finalize(rnnd_comm *c);
/* Bounds every blocking collective to timeout_s seconds (0: no bound; one
 * rank: nothing to wait for): past it the rank exits with code 1 and the
 * launcher stops the job (watchdog.h). */
void comm_set_timeout(rnnd_comm *c, double timeout_s);
/* In-place sums over all ranks. */
void comm_allreduce_sum_f32(const rnnd_comm *c, float *data, size_t count);
void comm_allreduce_sum_f64(const rnnd_comm *c, double *data, size_t count);
/* In-place sum of `count` elements of type t (fp32 as floats, fp16/bf16 as
 * uint16_t words). */
void comm_allreduce_sum(const rnnd_comm *c, void *data, size_t count, rnnd_dtype t);
/* Non-blocking form of comm_allreduce_sum for count <= INT_MAX; finish with
 * comm_wait. Buckets of the gradient all-reduce are started this way. */
MPI_Request comm_allreduce_sum_start(const rnnd_comm *c, void *data, size_t count, rnnd_dtype t);
void comm_wait(const rnnd_comm *c, MPI_Request *request);
/* Largest of one value over all ranks. */
double comm_allreduce_max_f64(const rnnd_comm *c, double value);
/* out[r] = rank r's value (out has c->size entries). */
void comm_allgather_u64(const rnnd_comm *c, uint64_t value, uint64_t *out);
void comm_broadcast(const rnnd_comm *c, void *data, size_t bytes, int root);
/* Where a rank runs: its host (MPI_Get_processor_name) and its place among
 * the ranks of that host (local rank and size: what binds a rank to a GPU). */
typedef struct {
  char host[64];
  int32_t local_rank, local_size;
} rnnd_rank_place;
/* out[r] = rank r's place, on every rank (out has c->size entries). */
void comm_gather_places(const rnnd_comm *c, rnnd_rank_place *out);
void comm_barrier(const rnnd_comm *c);
/* Ends every rank of the job with exit code `code` (after the caller has
 * printed why). Never returns. */
RNND_NORETURN void comm_abort(const rnnd_comm *c, int code);

#endif
