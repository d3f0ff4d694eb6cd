/* nccl_comm.c — the job's NCCL communicator (cuda_backend.h): one rank per
 * GPU, bootstrapped over MPI. */
#include <nccl.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "cuda_internal.h"

struct rnnd_nccl {
  ncclComm_t comm;
};

rnnd_nccl *nccl_create(const rnnd_comm *comm) {
  ncclUniqueId id;
  if (comm->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  comm_broadcast(comm, &id, sizeof id, 0);
  rnnd_nccl *nccl = RNND_ALLOC(rnnd_nccl, 1, "NCCL communicator");
  NCCL_CHECK(ncclCommInitRank(&nccl->comm, comm->size, id, comm->rank));
  return nccl;
}

void nccl_destroy(rnnd_nccl *nccl) {
  if (!nccl) return;
  NCCL_CHECK(ncclCommDestroy(nccl->comm));
  free(nccl);
}

void nccl_allreduce_sum(rnnd_nccl *nccl, void *data, size_t count, ncclDataType_t type, cudaStream_t stream) {
  NCCL_CHECK(ncclAllReduce(data, data, count, type, ncclSum, nccl->comm, stream));
}
