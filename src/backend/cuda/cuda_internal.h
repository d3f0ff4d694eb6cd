/* cuda_internal.h — the CUDA backend's state, shared by its two files:
 * cuda_backend.c (forward and backward on one batch) and cuda_resident.c
 * (the device-resident optimizer step with the NCCL all-reduce). Not part
 * of the public interface. */
#ifndef RNND_CUDA_INTERNAL_H
#define RNND_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "rnnd/cuda_backend.h"

#define ARENA_ALIGN 256
/* Rows of fp32 logits per decoder block (64 MiB at most), as on the CPU. */
#define DECODER_BLOCK_FLOATS (1 << 24)
#define DECODER_MIN_ROWS 64
#define MAX_SEGMENTS (RNND_MAX_LAYERS * 2 * 8 * 2)

typedef struct {
  cudnnRNNDescriptor_t desc;
  int input_size;
  size_t weight_bytes, reserve_bytes;
  char *weights, *dweights, *reserve; /* in the arena */
} cuda_layer;

/* State of the device-resident step (all device pointers in the arena). */
typedef struct {
  int loaded;               /* the device holds the master weights: ignore params arguments */
  float *m, *v;             /* optimizer state (v: Adam only) */
  void *wire;               /* [numel] 16-bit wire buffer */
  double *partials;         /* [3 * CUDA_NORM_BLOCKS] */
  double *scalars;          /* [4]: grad squares, update squares, param squares, spare */
  unsigned long long *counts; /* [2]: non-zero gradient values, lost to the wire */
  cudaStream_t comm_stream;
  cudaEvent_t ready, reduced, backward_done;
  /* the reduce in flight during one cuda_resident_gradients */
  int reducing;
  rnnd_nccl *nccl;
  cuda_reduce_options options;
  int next_bucket, n_buckets;
  /* pinned host copies of the scalars */
  double *host_scalars;
  unsigned long long *host_counts;
} cuda_resident;

typedef struct {
  rnnd_backend base;
  rnnd_backend_capacity cap;
  int layers, directions, hidden, embed, vocab, top, gates;
  rnnd_dtype storage;
  size_t elem; /* bytes per activation */
  cudnnDataType_t cudnn_type;
  cudaDataType_t blas_type;
  cudaStream_t stream;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  cudnnDropoutDescriptor_t no_dropout; /* cuDNN wants one; one layer never uses it */
  cudnnRNNDataDescriptor_t x_first, x_upper, y_desc;
  cudnnTensorDescriptor_t h_desc;
  cuda_layer layer[RNND_MAX_LAYERS];
  /* device, all in the arena */
  char *arena;
  size_t arena_bytes;
  float *params, *grads;
  void *params16; /* == params with fp32 storage */
  void *x[RNND_MAX_LAYERS + 1]; /* layer inputs; x[layers] feeds the decoder */
  void *y[RNND_MAX_LAYERS];
  void *grad_a, *grad_b;
  float *logits;
  void *dlogits16; /* NULL with fp32 storage (the fp32 logits are used) */
  double *row_nll, *nll_sum;
  float *ones;
  int32_t *inputs, *targets, *positions, *seq_lengths;
  int64_t *row_piece;
  void *workspace;
  size_t cudnn_workspace_bytes;
  /* canonical <-> weight space; the same runs for the weight-space gradient */
  cuda_weight_segment *segments, *grad_segments;
  int n_segments;
  int64_t longest_segment;
  int layer_segments[RNND_MAX_LAYERS][2]; /* first segment and count of each layer */
  int decoder_rows;
  /* pinned host staging: the batch's index arrays, the gradient, the loss */
  char *host;
  int32_t *host_inputs, *host_targets, *host_positions, *host_lengths;
  int64_t *host_row_piece;
  float *host_grads;
  double *host_nll;
  size_t activation_bytes, workspace_bytes;
  cuda_resident resident; /* optimizer_state > 0 only */
} cuda_backend;

/* Weight spaces (and the 16-bit copy) <- the device's canonical fp32 weights. */
void cuda_backend_refresh_weights(cuda_backend *cb);
/* Resident step: every gradient element at offset >= `frontier` of the
 * canonical buffer is final; start the buckets that became complete. */
void cuda_resident_gradient_ready(cuda_backend *cb, size_t frontier);
/* Sizes and carves the resident state out of the arena (see
 * assign_device_buffers) and the pinned host area. */
void cuda_resident_carve(cuda_backend *cb, uintptr_t base, size_t *used);
void cuda_resident_carve_host(cuda_backend *cb, uintptr_t base, size_t *used);
void cuda_resident_create(cuda_backend *cb);
void cuda_resident_destroy(cuda_backend *cb);
/* In-place sum over the job, enqueued on `stream` (nccl_comm.c). */
void nccl_allreduce_sum(rnnd_nccl *nccl, void *data, size_t count, ncclDataType_t type, cudaStream_t stream);
/* Aligned piece of an arena being carved (base 0 only counts). */
void *cuda_carve(uintptr_t base, size_t *used, size_t bytes);
/* Enqueues the loss sum into cb->nll_sum; with weight > 0 the decoder's
 * gradients and dL/dy into dy (the resident step then learns when the
 * decoder's gradient is final). No host synchronisation. */
void cuda_backend_decoder_pass(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy);
void cuda_backend_upload_batch(cuda_backend *cb, const rnnd_batch *b);
void cuda_backend_forward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, int training);
void cuda_backend_backward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr);

#endif
