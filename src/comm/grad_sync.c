/* grad_sync.c — bucketed gradient all-reduce (grad_sync.h). */
#include "rnnd/grad_sync.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

size_t grad_sync_bucket_elems(size_t numel, double bucket_mb, rnnd_dtype wire) {
  size_t elem = wire == RNND_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
  double elems = bucket_mb * 1048576.0 / (double)elem;
  size_t count = elems < 1.0 ? 1 : elems > (double)INT_MAX ? (size_t)INT_MAX : (size_t)elems;
  return count > numel && numel > 0 ? numel : count;
}

void grad_sync_init(rnnd_grad_sync *g, const rnnd_comm *comm, size_t numel, double bucket_mb, rnnd_dtype wire) {
  memset(g, 0, sizeof *g);
  g->comm = comm;
  g->wire = wire;
  g->numel = numel;
  g->bucket_elems = grad_sync_bucket_elems(numel, bucket_mb, wire);
  g->n_buckets = numel ? (int)((numel + g->bucket_elems - 1) / g->bucket_elems) : 0;
  g->requests = RNND_ALLOC(MPI_Request, g->n_buckets ? (size_t)g->n_buckets : 1, "all-reduce requests");
  if (wire != RNND_DTYPE_F32 && comm->size > 1) g->wire_buffer = RNND_ALLOC(uint16_t, numel, "gradient wire buffer");
}

/* Bucket k covers [begin, end), counted from the end of the buffer. */
static void bucket_range(const rnnd_grad_sync *g, int k, size_t *begin, size_t *end) {
  size_t from_end = (size_t)k * g->bucket_elems;
  *end = g->numel - from_end;
  *begin = *end > g->bucket_elems ? *end - g->bucket_elems : 0;
}

void grad_sync_allreduce(rnnd_grad_sync *g, float *grads) {
  if (g->comm->size == 1) return;
  for (int k = 0; k < g->n_buckets; k++) {
    size_t begin, end;
    bucket_range(g, k, &begin, &end);
    if (g->wire == RNND_DTYPE_F32) {
      g->requests[k] = comm_allreduce_sum_start(g->comm, grads + begin, end - begin, RNND_DTYPE_F32);
    } else {
      rnnd_f32_to_half_array(g->wire, g->wire_buffer + begin, grads + begin, end - begin);
      g->requests[k] = comm_allreduce_sum_start(g->comm, g->wire_buffer + begin, end - begin, g->wire);
    }
  }
  for (int k = 0; k < g->n_buckets; k++) {
    comm_wait(g->comm, &g->requests[k]);
    if (g->wire == RNND_DTYPE_F32) continue;
    size_t begin, end;
    bucket_range(g, k, &begin, &end);
    rnnd_half_to_f32_array(g->wire, grads + begin, g->wire_buffer + begin, end - begin);
  }
}

void grad_sync_free(rnnd_grad_sync *g) {
  free(g->wire_buffer);
  free(g->requests);
  memset(g, 0, sizeof *g);
}
