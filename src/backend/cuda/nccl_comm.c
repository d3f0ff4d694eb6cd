/* nccl_comm.c — the job's NCCL communicator (cuda_backend.h): one rank per
 * GPU, bootstrapped over MPI.
 *
 * No wait is unbounded. The communicator is created non-blocking
 * (ncclConfig_t.blocking = 0): its creation and every call return at once,
 * possibly with ncclInProgress, and are then polled through
 * ncclCommGetAsyncError. The host waits for a stream that depends on a
 * collective the same way (nccl_wait_stream). A NCCL error, or a wait past
 * comm.timeout_s (a peer died or hangs), aborts the communicator, prints one
 * line naming this rank and what it waited for, and ends the process with
 * RNND_EXIT_INTERNAL; mpirun (or srun) then stops the other ranks, as the
 * MPI watchdog does for host collectives. */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_check.h"
#include "cuda_internal.h"

struct rnnd_nccl {
  ncclComm_t comm;
  int rank;
  double timeout_s; /* <= 0: no bound (errors are still polled) */
};

/* Between two polls: short against a step, long enough not to spin a core. */
#define POLL_INTERVAL_NS 50000L

static void pause_briefly(void) {
  struct timespec ts = {0, POLL_INTERVAL_NS};
  nanosleep(&ts, NULL);
}

static RNND_NORETURN void give_up(rnnd_nccl *nccl, const char *what, const char *why) {
  fprintf(stderr, "%s: error: rank %d: NCCL %s: %s; aborting the communicator (a peer rank died, hangs or lost "
          "its network?)\n", rnnd_program_name(), nccl->rank, what, why);
  fflush(stderr);
  ncclCommAbort(nccl->comm); /* its own result does not matter any more */
  exit(RNND_EXIT_INTERNAL);
}

static int past_deadline(const rnnd_nccl *nccl, double start) {
  return nccl->timeout_s > 0 && rnnd_now() - start > nccl->timeout_s;
}

static void give_up_on_error(rnnd_nccl *nccl, ncclResult_t state, const char *what) {
  if (state == ncclSuccess || state == ncclInProgress) return;
  char why[256];
  snprintf(why, sizeof why, "%s (%s)", ncclGetErrorString(state), ncclGetLastError(nccl->comm));
  give_up(nccl, what, why);
}

/* After a call on the non-blocking communicator: wait until it has left
 * ncclInProgress (or fail). */
static void settle(rnnd_nccl *nccl, ncclResult_t result, const char *what) {
  double start = rnnd_now();
  while (result == ncclInProgress) {
    if (past_deadline(nccl, start)) {
      char why[64];
      snprintf(why, sizeof why, "no progress in %.0f s (comm.timeout_s)", nccl->timeout_s);
      give_up(nccl, what, why);
    }
    pause_briefly();
    if (ncclCommGetAsyncError(nccl->comm, &result) != ncclSuccess) give_up(nccl, what, "cannot query its state");
  }
  give_up_on_error(nccl, result, what);
}

rnnd_nccl *nccl_create(const rnnd_comm *comm, double timeout_s) {
  ncclUniqueId id;
  if (comm->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  comm_broadcast(comm, &id, sizeof id, 0);
  rnnd_nccl *nccl = RNND_ALLOC(rnnd_nccl, 1, "NCCL communicator");
  nccl->rank = comm->rank;
  nccl->timeout_s = timeout_s;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t result = ncclCommInitRankConfig(&nccl->comm, comm->size, id, comm->rank, &config);
  if (result != ncclSuccess && result != ncclInProgress)
    RNND_FAIL("ncclCommInitRankConfig on rank %d: %s", comm->rank, ncclGetErrorString(result));
  settle(nccl, result, "communicator creation");
  return nccl;
}

void nccl_destroy(rnnd_nccl *nccl) {
  if (!nccl) return;
  settle(nccl, ncclCommFinalize(nccl->comm), "communicator finalisation");
  NCCL_CHECK(ncclCommDestroy(nccl->comm));
  free(nccl);
}

void nccl_allreduce_sum(rnnd_nccl *nccl, void *data, size_t count, ncclDataType_t type, cudaStream_t stream) {
  settle(nccl, ncclAllReduce(data, data, count, type, ncclSum, nccl->comm, stream), "all-reduce enqueue");
}

void nccl_wait_stream(rnnd_nccl *nccl, cudaStream_t stream, const char *what) {
  if (!nccl) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  double start = rnnd_now();
  for (;;) {
    cudaError_t done = cudaStreamQuery(stream);
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) CUDA_CHECK(done);
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(nccl->comm, &state) != ncclSuccess) give_up(nccl, what, "cannot query its state");
    give_up_on_error(nccl, state, what);
    if (past_deadline(nccl, start)) {
      char why[96];
      snprintf(why, sizeof why, "not finished after %.0f s (comm.timeout_s)", nccl->timeout_s);
      give_up(nccl, what, why);
    }
    pause_briefly();
  }
}
