/* grad_sync.h — the data-parallel gradient all-reduce: the flat fp32
 * gradient is summed over ranks in buckets of about comm.bucket_mb, last
 * parameters first (the decoder, which backward produces first), with fp32,
 * fp16 or bf16 on the wire. 16-bit buckets are converted into a wire buffer,
 * reduced by the communicator's 16-bit sum (fp32 adds, one rounding per
 * combine) and converted back; while one bucket is on the wire the next is
 * being converted.
 *
 * Why no pre-division by the world size is needed for fp16: each rank's
 * backward already weights its loss by 1 / (tokens in the GLOBAL batch), so
 * what goes on the wire is each rank's share of the global mean gradient and
 * the reduced sum is that mean, never world-size times it.
 *
 * Ownership: grad_sync_init allocates the wire buffer and request list,
 * grad_sync_free releases them. */
#ifndef RNND_GRAD_SYNC_H
#define RNND_GRAD_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/comm.h"

typedef struct {
  const rnnd_comm *comm; /* borrowed */
  rnnd_dtype wire;
  size_t numel;
  size_t bucket_elems;   /* elements per bucket (the last one may be shorter) */
  int n_buckets;
  uint16_t *wire_buffer; /* [numel] for 16-bit wires, else NULL */
  MPI_Request *requests; /* [n_buckets] */
} rnnd_grad_sync;

/* Elements per bucket of about bucket_mb MiB of `wire` words (at least 1,
 * at most numel and INT_MAX); the CUDA step buckets the same way. */
size_t grad_sync_bucket_elems(size_t numel, double bucket_mb, rnnd_dtype wire);
void grad_sync_init(rnnd_grad_sync *g, const rnnd_comm *comm, size_t numel, double bucket_mb, rnnd_dtype wire);
/* grads[i] := sum over ranks of grads[i] (through the wire format). */
void grad_sync_allreduce(rnnd_grad_sync *g, float *grads);
void grad_sync_free(rnnd_grad_sync *g);

#endif
