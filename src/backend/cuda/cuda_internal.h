/* cuda_internal.h — the CUDA backend's state, shared by its files:
 * cuda_backend.c (the backend ops, creation and the device arena),
 * cuda_segments.c (the driver of one batch: carried stream state and
 * segmented backpropagation), cuda_layers.c (the cuDNN layers: descriptors,
 * weight and temp spaces, a batch's upload, forward and backward),
 * cuda_heads.c (the head and input tables), and for the step above them
 * cuda_step.c (the device-resident optimizer step) and nccl_comm.c (its
 * all-reduce). Calls go down only:
 *   cuda_step -> cuda_segments -> cuda_layers -> kernels
 *   cuda_backend -> cuda_segments, cuda_layers; heads and inputs through
 *   their tables; the layer code reports finished gradient through
 *   cuda_gradient_listener, set by the step.
 * Not part of the public interface. */
#ifndef RNND_CUDA_INTERNAL_H
#define RNND_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "rnnd/cuda_backend.h"
#include "rnnd/step.h"

#define ARENA_ALIGN 256
/* Rows of fp32 logits per decoder block (64 MiB at most), as on the CPU. */
#define DECODER_BLOCK_FLOATS (1 << 24)
#define DECODER_MIN_ROWS 64
#define MAX_SEGMENTS (RNND_MAX_LAYERS * 2 * 8 * 2)
#define MAX_HH_BLOCKS (RNND_MAX_LAYERS * 2 * 4) /* layers x directions x gates */

typedef struct {
  cudnnRNNDescriptor_t desc;
  int input_size;
  size_t weight_bytes, reserve_bytes;
  char *weights, *dweights; /* in the arena */
  char *reserve;            /* in the temp allocation (cuda_temp) */
} cuda_layer;

/* cuDNN's workspace and the layers' reserve spaces: one device allocation
 * of their own, outside the arena, because cudnnGetRNNTempSpaceSizes is not
 * monotonic in the batch shape. Sized for the capacity rectangle at
 * creation, then queried for every batch shape and regrown (with headroom)
 * when a shape needs more; `growths` counts the regrowths for the memory
 * report. */
typedef struct {
  char *base;
  size_t bytes;
  int64_t growths;
} cuda_temp;

/* One set of pinned staging rows for a batch's index arrays (and a
 * forecaster's series rows). upload_batch fills a set and enqueues its
 * copies, then records `copied`; the set is written again only after that
 * event has passed. Two sets alternate, so the host packs the next batch
 * or segment while the previous copies are still queued. */
typedef struct {
  int32_t *inputs, *targets, *positions, *lengths;
  int64_t *row_piece;
  int64_t *prev_row, *next_row; /* the row of the same piece one step before and after (-1: none), for TAR */
  float *series;   /* regress: [tokens, F] in, [tokens, F] target, [F] std */
  uint8_t *scored; /* regress: [tokens] */
  cudaEvent_t copied;
} cuda_staging;

/* Who hears when backward has made a stretch of the gradient final: the
 * CUDA step sets it while it overlaps the all-reduce with backward, so the
 * layer code tells, never calls up. fn(context, frontier): every canonical
 * gradient element at offset >= frontier is final. */
typedef struct {
  void (*fn)(void *context, size_t frontier);
  void *context;
} cuda_gradient_listener;

/* Per layer, in D, [pieces, hidden] each (device; NULL: zeros in, not
 * wanted out): the state the next forward starts from, where its final
 * state goes, and for backward the incoming state gradient and where the
 * gradient of the starting state goes. c is the LSTM's cell (NULL: GRU). */
typedef struct {
  void *hx[RNND_MAX_LAYERS], *cx[RNND_MAX_LAYERS];
  void *hy[RNND_MAX_LAYERS], *cy[RNND_MAX_LAYERS];
  void *dhy[RNND_MAX_LAYERS], *dcy[RNND_MAX_LAYERS];
  void *dhx[RNND_MAX_LAYERS], *dcx[RNND_MAX_LAYERS];
} cuda_state_link;

/* The classifier's and the forecaster's buffers (device ones in the arena,
 * host ones in the pinned area; NULL for the other heads). */
typedef struct {
  int n_classes, n_features;
  /* classify: the final hidden state of each piece (cuda_gather_final) */
  void *features, *d_features;    /* [max_pieces, top] in D */
  float *class_logits;            /* [max_pieces, n_classes], then the gradient */
  void *class_grad16;             /* the gradient in D (16-bit storage only) */
  int32_t *final_fwd, *final_bwd, *labels, *correct; /* [max_pieces] */
  int32_t *host_final, *host_correct; /* pinned: fwd rows, bwd rows, labels; correct flags */
  /* regress */
  float *series_in, *series_target, *std; /* [tokens, F] x 2, [F] */
  void *series16;                 /* series_in in D (== series_in with fp32) */
  uint8_t *scored;                /* [tokens] */
  double *row_sq, *row_abs;       /* [tokens] */
  double *error_sums;             /* [4]: this batch's squared and absolute errors, and one part of each */
  double *host_errors;            /* pinned [2] */
  int pieces_scored;              /* classify: rows of host_correct to add up */
  rnnd_head_stats stats;          /* of the last batch */
} cuda_heads;

/* Carried stream state (data.mode = stream) and segmented backpropagation
 * (capacity.bptt_segment). */
typedef struct {
  const float *stream_in;         /* host rows of carry_state, for the next batch only */
  float *stream_out;
  float *state;                   /* device [max_pieces, state width] fp32 */
  float *host_state;              /* pinned, the same */
  void *start_h[RNND_MAX_LAYERS], *start_c[RNND_MAX_LAYERS]; /* the carried state in D */
  void *end_h[RNND_MAX_LAYERS], *end_c[RNND_MAX_LAYERS];     /* the batch's final state in D */
  int segment;                    /* K (0: whole batches) */
  int boundaries;                 /* states kept between segments: ceil(max_steps / K) - 1 */
  void *boundary_h, *boundary_c;  /* [boundaries][layers][max_pieces * hidden] in D */
  void *carry_dh[2][RNND_MAX_LAYERS], *carry_dc[2][RNND_MAX_LAYERS]; /* ping-pong state gradients */
  int64_t *view_offsets;          /* host [K + 1] for batch_step_view */
  cuda_gradient_listener listener; /* the step's, during one run */
} cuda_segments;

typedef struct cuda_backend cuda_backend;

/* What sits on the top layer (model.task): the language-model decoder, the
 * classifier or the forecaster (cuda_heads.c); chosen once, at creation. */
typedef struct {
  const char *name;
  /* Required: sets cb->vocab (the width of the row-blocked logits) and
   * cb->decoder_rows (rows per block) before the arena is carved. */
  void (*size)(cuda_backend *cb);
  /* Optional (NULL: none): the head's buffers in the arena, in the pinned
   * area, and per staging set (carve: base 0 only counts). */
  void (*carve)(cuda_backend *cb, uintptr_t base, size_t *used);
  void (*carve_host)(cuda_backend *cb, uintptr_t base, size_t *used);
  void (*carve_staging)(cuda_backend *cb, uintptr_t base, size_t *used, cuda_staging *set);
  /* Optional: the batch's rows the head reads besides the targets, through
   * the staging set upload_batch is filling. */
  void (*upload)(cuda_backend *cb, const rnnd_batch *b, cuda_staging *set);
  /* Optional: clears the measurements before a batch. */
  void (*begin)(cuda_backend *cb);
  /* Required: the loss of a batch (or segment view) added into nll_sum;
   * with weight > 0 the head's gradients and dL/d(top layer output) into
   * dy, and the gradient listener told the head's gradient is final. */
  void (*pass)(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy);
  /* Optional: the measurements, once the stream has run (the caller
   * synchronises only when this is set). */
  void (*finish)(cuda_backend *cb);
  /* 1: the head reads the top layer before the dropout above it. */
  int reads_before_dropout;
} cuda_head_ops;

/* What feeds the first layer: x[0] from the embedding or the input
 * projection, and the backward of that from dL/dx0. */
typedef struct {
  const char *name;
  /* dr: the batch's regularisers (NULL: none); the embedding applies its embedding dropout */
  void (*forward)(cuda_backend *cb, int64_t rows, const rnnd_dropout *dr);
  void (*backward)(cuda_backend *cb, const void *dx0, int64_t rows, const rnnd_dropout *dr);
} cuda_input_ops;

struct cuda_backend {
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
  int64_t ones_count; /* all of them set to 1 (the decoder and the classifier read different lengths) */
  int32_t *inputs, *targets, *positions, *seq_lengths;
  int64_t *row_piece;
  int64_t *prev_row, *next_row; /* [tokens] as in cuda_staging */
  const rnnd_dropout *regularise; /* cuda_backend_run: the batch's regularisers (AR in the head, TAR in backward) */
  float loss_weight;              /* ... and the loss weight they scale by */
  void *workspace;    /* in the temp allocation */
  size_t cudnn_workspace_bytes;
  cuda_temp temp;
  /* canonical <-> weight space; the same runs for the weight-space gradient */
  cuda_weight_segment *segments, *grad_segments;
  int n_segments;
  int64_t longest_segment;
  int layer_segments[RNND_MAX_LAYERS][2]; /* first segment and count of each layer */
  /* weight dropout: every gate block of every W_hh in the weight spaces
   * (device table), the first block and count of each layer, and whether
   * the spaces now hold the dropped weights of a training batch */
  cuda_hh_block *hh_blocks;
  int n_hh_blocks;
  int layer_hh_blocks[RNND_MAX_LAYERS][2];
  int hh_dropped;
  int decoder_rows;
  /* pinned host staging: the batch's index arrays (two alternating sets),
   * the gradient, the loss */
  char *host;
  cuda_staging staging[2];
  int next_staging;
  float *host_grads;
  double *host_nll;
  size_t activation_bytes, workspace_bytes;
  int params_resident;    /* the CUDA step keeps the master weights in params: ignore params arguments */
  cuda_gradient_listener gradient_ready; /* fn NULL: nobody listens */
  /* steps and rows the activation buffers hold: the capacity's, or one
   * segment's with capacity.bptt_segment */
  int held_steps;
  int64_t held_tokens;
  double *nll_part;       /* the loss of one decoder pass, added into nll_sum */
  cuda_state_link link;   /* cleared after every batch */
  const cuda_head_ops *head;
  const cuda_input_ops *input;
  cuda_heads heads;
  cuda_segments seg;
};

/* --- small helpers -------------------------------------------------------- */

/* Hands out aligned pieces of [base, base + *used); with base 0 it only counts. */
static inline void *cuda_carve(uintptr_t base, size_t *used, size_t bytes) {
  size_t at = (*used + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  *used = at + bytes;
  return (void *)(base + at);
}
static inline const void *cuda_at_row(const void *base, int64_t row, int width, size_t elem) {
  return (const char *)base + (size_t)row * (size_t)width * elem;
}
static inline int cuda_input_width(const cuda_backend *cb, int layer) { return layer == 0 ? cb->embed : cb->top; }
/* Tells the listener, if any, that the gradient at offsets >= frontier is final. */
static inline void cuda_gradient_final(const cuda_backend *cb, size_t frontier) {
  if (cb->gradient_ready.fn) cb->gradient_ready.fn(cb->gradient_ready.context, frontier);
}

/* --- cuda_layers.c --------------------------------------------------------- */

/* At creation: a cuDNN RNN descriptor per layer (and its weight-space
 * size), the temp spaces for the capacity's rectangle, and (after the
 * arena) the table between canonical parameters and weight spaces. */
void cuda_layers_create_descriptors(cuda_backend *cb);
void cuda_layers_size_temp(cuda_backend *cb);
void cuda_layers_build_segment_table(cuda_backend *cb);
/* Weight spaces (and the 16-bit copy) <- the device's canonical fp32 weights. */
void cuda_layers_refresh_weights(cuda_backend *cb);
/* Weight dropout (dr->p_weight > 0) for one training batch: the dropped
 * W_hh into the weight spaces before it, the undropped ones back after it
 * (layer_gradient scales the W_hh gradient in between). */
void cuda_layers_drop_recurrent(cuda_backend *cb, const rnnd_dropout *dr);
void cuda_layers_restore_recurrent(cuda_backend *cb);
/* Device parameters <- the host's (unless the CUDA step holds them), then refresh. */
void cuda_layers_upload_params(cuda_backend *cb, const float *params);
/* Stops the run on a batch beyond the capacity. */
void cuda_layers_check_batch(const cuda_backend *cb, const rnnd_batch *b);
/* The batch's (or segment view's) index arrays to the device, the
 * descriptors set to its shape, the temp spaces grown to fit it. */
void cuda_layers_upload(cuda_backend *cb, const rnnd_batch *b);
/* Forward and backward through the layers, starting from and leaving the
 * states cb->link names; backward from dL/d(decoder input) in grad_a. */
void cuda_layers_forward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, int training);
void cuda_layers_backward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr);

/* --- cuda_heads.c ------------------------------------------------------------ */

const cuda_head_ops *cuda_head_for(const rnnd_model_shape *s);
const cuda_input_ops *cuda_input_for(const rnnd_model_shape *s);

/* --- cuda_segments.c --------------------------------------------------------- */

void cuda_segments_carve(cuda_backend *cb, uintptr_t base, size_t *used);
void cuda_segments_carve_host(cuda_backend *cb, uintptr_t base, size_t *used);
/* Forward, head and (weight > 0) backward of a whole batch: by segments
 * when it is longer than capacity.bptt_segment, from the carried stream
 * state when carry_state armed one (whose end state it then writes). The
 * batch's loss lands in cb->nll_sum; no host synchronisation except what
 * the carried state and the head's measurements need. */
void cuda_backend_run(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, float weight);

/* --- nccl_comm.c ------------------------------------------------------------- */

/* In-place sum over the job, enqueued on `stream`. */
void nccl_allreduce_sum(rnnd_nccl *nccl, void *data, size_t count, ncclDataType_t type, cudaStream_t stream);
/* Waits until `stream` has run, polling the communicator's asynchronous
 * error (nccl may be NULL: one rank, a plain synchronisation). A NCCL error,
 * or a wait longer than the job's comm.timeout_s, aborts the communicator
 * and ends the process with one line naming the rank. */
void nccl_wait_stream(rnnd_nccl *nccl, cudaStream_t stream, const char *what);

#endif
