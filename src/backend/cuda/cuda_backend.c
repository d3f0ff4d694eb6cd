/* cuda_backend.c — the CUDA backend (cuda_backend.h): its ops table,
 * creation and destruction, and the device arena and pinned area every
 * buffer is carved from. A batch is driven by cuda_segments.c through the
 * layers (cuda_layers.c: one cuDNN RNN per layer) and the head and input
 * tables (cuda_heads.c: a cuBLAS decoder with fused softmax cross-entropy
 * a block of rows at a time, the classifier, the forecaster, the embedding
 * or input projection).
 *
 * Precision. capacity.storage = fp16/bf16 gives cuDNN 16-bit data with fp32
 * math on tensor cores, and 16-bit decoder GEMMs with fp32 accumulation;
 * logits, the softmax and every gradient sum are fp32.
 *
 * Ownership: cuda_backend_create takes one device allocation (the arena),
 * the temp allocation (cuda_layers.c, regrown there), one pinned host
 * allocation, a stream and the library handles; destroy releases them all. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "cuda_kernels.h"

/* --- arena -------------------------------------------------------------- */

/* Points every device buffer into the arena at `base` and returns its size;
 * called once with base 0 to size the arena, then with the allocation. */
static size_t assign_device_buffers(cuda_backend *cb, uintptr_t base) {
  const int64_t T = cb->held_tokens, B = cb->cap.max_pieces, rows = cb->decoder_rows;
  const size_t e = cb->elem, numel = cb->base.layout->numel;
  size_t used = 0, activations = 0;
  cb->params = cuda_carve(base, &used, numel * sizeof(float));
  cb->grads = cuda_carve(base, &used, numel * sizeof(float));
  cb->params16 = cb->storage == RNND_DTYPE_F32 ? (void *)cb->params : cuda_carve(base, &used, numel * e);
  for (int l = 0; l < cb->layers; l++) {
    cuda_layer *L = &cb->layer[l];
    L->weights = cuda_carve(base, &used, L->weight_bytes);
    L->dweights = cuda_carve(base, &used, L->weight_bytes);
  }
  for (int l = 0; l <= cb->layers; l++) {
    cb->x[l] = cuda_carve(base, &used, (size_t)T * cuda_input_width(cb, l) * e);
    activations += (size_t)T * cuda_input_width(cb, l) * e;
  }
  for (int l = 0; l < cb->layers; l++) {
    cb->y[l] = cuda_carve(base, &used, (size_t)T * cb->top * e);
    activations += (size_t)T * cb->top * e;
  }
  int widest = cb->embed > cb->top ? cb->embed : cb->top;
  cb->grad_a = cuda_carve(base, &used, (size_t)T * widest * e);
  cb->grad_b = cuda_carve(base, &used, (size_t)T * widest * e);
  cb->logits = cuda_carve(base, &used, (size_t)rows * cb->vocab * sizeof(float));
  cb->dlogits16 = cb->storage == RNND_DTYPE_F32 ? NULL : cuda_carve(base, &used, (size_t)rows * cb->vocab * e);
  cb->row_nll = cuda_carve(base, &used, (size_t)(T > B ? T : B) * sizeof(double));
  cb->nll_sum = cuda_carve(base, &used, sizeof(double));
  cb->nll_part = cuda_carve(base, &used, sizeof(double));
  cb->ones_count = rows > B ? rows : B;
  cb->ones = cuda_carve(base, &used, (size_t)cb->ones_count * sizeof(float));
  cb->inputs = cuda_carve(base, &used, (size_t)T * sizeof(int32_t));
  cb->targets = cuda_carve(base, &used, (size_t)T * sizeof(int32_t));
  cb->positions = cuda_carve(base, &used, (size_t)T * sizeof(int32_t));
  cb->row_piece = cuda_carve(base, &used, (size_t)T * sizeof(int64_t));
  cb->prev_row = cuda_carve(base, &used, (size_t)T * sizeof(int64_t));
  cb->next_row = cuda_carve(base, &used, (size_t)T * sizeof(int64_t));
  cb->seq_lengths = cuda_carve(base, &used, (size_t)B * sizeof(int32_t));
  cb->segments = cuda_carve(base, &used, MAX_SEGMENTS * sizeof(cuda_weight_segment));
  cb->grad_segments = cuda_carve(base, &used, MAX_SEGMENTS * sizeof(cuda_weight_segment));
  cb->hh_blocks = cuda_carve(base, &used, MAX_HH_BLOCKS * sizeof(cuda_hh_block));
  if (cb->head->carve) cb->head->carve(cb, base, &used);
  size_t before_segments = used;
  cuda_segments_carve(cb, base, &used);
  activations += used - before_segments; /* the kept boundary states and their gradients */
  cb->activation_bytes = activations;
  cb->workspace_bytes = used - activations;
  return used;
}

/* The pinned host staging area, carved the same way. */
static size_t assign_host_buffers(cuda_backend *cb, uintptr_t base) {
  const int64_t T = cb->held_tokens;
  size_t used = 0;
  for (int k = 0; k < 2; k++) {
    cuda_staging *set = &cb->staging[k];
    set->inputs = cuda_carve(base, &used, (size_t)T * sizeof(int32_t));
    set->targets = cuda_carve(base, &used, (size_t)T * sizeof(int32_t));
    set->positions = cuda_carve(base, &used, (size_t)T * sizeof(int32_t));
    set->row_piece = cuda_carve(base, &used, (size_t)T * sizeof(int64_t));
    set->prev_row = cuda_carve(base, &used, (size_t)T * sizeof(int64_t));
    set->next_row = cuda_carve(base, &used, (size_t)T * sizeof(int64_t));
    set->lengths = cuda_carve(base, &used, (size_t)cb->cap.max_pieces * sizeof(int32_t));
    if (cb->head->carve_staging) cb->head->carve_staging(cb, base, &used, set);
  }
  cb->host_grads = cuda_carve(base, &used, cb->base.layout->numel * sizeof(float));
  cb->host_nll = cuda_carve(base, &used, sizeof(double));
  if (cb->head->carve_host) cb->head->carve_host(cb, base, &used);
  cuda_segments_carve_host(cb, base, &used);
  return used;
}

static double read_nll(cuda_backend *cb) {
  CUDA_CHECK(cudaMemcpyAsync(cb->host_nll, cb->nll_sum, sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  return *cb->host_nll;
}


/* --- ops ---------------------------------------------------------------- */

static double cuda_train_batch(rnnd_backend *be, const float *params, float *grads, const rnnd_batch *b,
                               const rnnd_dropout *dr, float loss_weight) {
  cuda_backend *cb = (cuda_backend *)be;
  cuda_layers_check_batch(cb, b);
  if (b->n_tokens == 0) return 0.0;
  const size_t numel = be->layout->numel;
  cuda_layers_upload_params(cb, params);
  CUDA_CHECK(cudaMemsetAsync(cb->grads, 0, numel * sizeof(float), cb->stream));
  cuda_backend_run(cb, b, dr, loss_weight);
  CUDA_CHECK(cudaMemcpyAsync(cb->host_grads, cb->grads, numel * sizeof(float), cudaMemcpyDeviceToHost, cb->stream));
  double nll = read_nll(cb); /* synchronises the stream, so host_grads is there too */
  for (size_t i = 0; i < numel; i++) grads[i] += cb->host_grads[i];
  return nll;
}

static double cuda_eval_batch(rnnd_backend *be, const float *params, const rnnd_batch *b) {
  cuda_backend *cb = (cuda_backend *)be;
  cuda_layers_check_batch(cb, b);
  if (b->n_tokens == 0) return 0.0;
  cuda_layers_upload_params(cb, params);
  cuda_backend_run(cb, b, NULL, 0.0f);
  return read_nll(cb);
}

static void cuda_last_stats(const rnnd_backend *be, rnnd_head_stats *out) {
  *out = ((const cuda_backend *)be)->heads.stats;
}

/* Arms the next batch: state_in rows start its pieces, state_out receives
 * the end state (cuda_segments.c moves them). */
static void cuda_carry_state(rnnd_backend *be, const float *state_in, float *state_out) {
  cuda_backend *cb = (cuda_backend *)be;
  RNND_ASSERT(cb->directions == 1);
  cb->seg.stream_in = state_in;
  cb->seg.stream_out = state_out;
}

/* The reserves (kept for backward) count as activations, cuDNN's
 * workspace as workspace; both as now sized. */
static size_t cuda_activation_bytes(const rnnd_backend *be) {
  const cuda_backend *cb = (const cuda_backend *)be;
  size_t bytes = cb->activation_bytes;
  for (int l = 0; l < cb->layers; l++) bytes += cb->layer[l].reserve_bytes;
  return bytes;
}
static size_t cuda_workspace_bytes(const rnnd_backend *be) {
  const cuda_backend *cb = (const cuda_backend *)be;
  return cb->workspace_bytes + cb->cudnn_workspace_bytes;
}
static int64_t cuda_workspace_growths(const rnnd_backend *be) { return ((const cuda_backend *)be)->temp.growths; }

static void cuda_destroy(rnnd_backend *be) {
  cuda_backend *cb = (cuda_backend *)be;
  if (!cb) return;
  for (int l = 0; l < cb->layers; l++)
    if (cb->layer[l].desc) CUDNN_CHECK(cudnnDestroyRNNDescriptor(cb->layer[l].desc));
  CUDNN_CHECK(cudnnDestroyRNNDataDescriptor(cb->x_first));
  CUDNN_CHECK(cudnnDestroyRNNDataDescriptor(cb->x_upper));
  CUDNN_CHECK(cudnnDestroyRNNDataDescriptor(cb->y_desc));
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(cb->h_desc));
  CUDNN_CHECK(cudnnDestroyDropoutDescriptor(cb->no_dropout));
  CUDNN_CHECK(cudnnDestroy(cb->cudnn));
  CUBLAS_CHECK(cublasDestroy(cb->cublas));
  for (int k = 0; k < 2; k++) CUDA_CHECK(cudaEventDestroy(cb->staging[k].copied));
  CUDA_CHECK(cudaFree(cb->temp.base));
  CUDA_CHECK(cudaFree(cb->arena));
  CUDA_CHECK(cudaFreeHost(cb->host));
  CUDA_CHECK(cudaStreamDestroy(cb->stream));
  free(cb);
}

/* cuDNN's RNN records no per-gate values we could read back (its reserve
 * space is opaque), so the CUDA backend offers no gate histograms. */
static const rnnd_backend_ops cuda_ops = {
    .name = "cuda",
    .train_batch = cuda_train_batch,
    .eval_batch = cuda_eval_batch,
    .activation_bytes = cuda_activation_bytes,
    .workspace_bytes = cuda_workspace_bytes,
    .gate_histogram = NULL,
    .destroy = cuda_destroy,
    .carry_state = cuda_carry_state,
    .last_stats = cuda_last_stats,
    .workspace_growths = cuda_workspace_growths,
    .describe = NULL, /* cuDNN and cuBLAS: the device line names the GPU */
    .predict_batch = NULL, /* inference (one sequence at a time) runs on the CPU backend */
};

/* --- creation ------------------------------------------------------------- */

static void set_types(cuda_backend *cb) {
  switch (cb->storage) {
  case RNND_DTYPE_F16:
    cb->cudnn_type = CUDNN_DATA_HALF;
    cb->blas_type = CUDA_R_16F;
    cb->elem = 2;
    break;
  case RNND_DTYPE_BF16:
    cb->cudnn_type = CUDNN_DATA_BFLOAT16;
    cb->blas_type = CUDA_R_16BF;
    cb->elem = 2;
    break;
  default:
    cb->cudnn_type = CUDNN_DATA_FLOAT;
    cb->blas_type = CUDA_R_32F;
    cb->elem = 4;
  }
}

static void create_handles(cuda_backend *cb) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
  CUDNN_CHECK(cudnnCreate(&cb->cudnn));
  CUDNN_CHECK(cudnnSetStream(cb->cudnn, cb->stream));
  CUBLAS_CHECK(cublasCreate(&cb->cublas));
  CUBLAS_CHECK(cublasSetStream(cb->cublas, cb->stream));
  /* fp32 stays IEEE fp32 (no TF32), so it matches the CPU reference; with
   * 16-bit data, split-K partial sums stay fp32 too (the default allows
   * reducing them in the 16-bit output type, e.g. dx with K = vocab). */
  CUBLAS_CHECK(cublasSetMathMode(cb->cublas, cb->storage == RNND_DTYPE_F32
                                                 ? CUBLAS_PEDANTIC_MATH
                                                 : (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                                  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&cb->x_first));
  CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&cb->x_upper));
  CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&cb->y_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&cb->h_desc));
  /* With dropout 0 cuDNN draws nothing, so it needs no RNG state (as
   * PyTorch's set_no_dropout does). */
  CUDNN_CHECK(cudnnCreateDropoutDescriptor(&cb->no_dropout));
  CUDNN_CHECK(cudnnSetDropoutDescriptor(cb->no_dropout, cb->cudnn, 0.0f, NULL, 0, 0));
}

static void allocate(cuda_backend *cb) {
  cb->arena_bytes = assign_device_buffers(cb, 0);
  CUDA_CHECK(cudaMalloc((void **)&cb->arena, cb->arena_bytes));
  assign_device_buffers(cb, (uintptr_t)cb->arena);
  size_t host_bytes = assign_host_buffers(cb, 0);
  CUDA_CHECK(cudaMallocHost((void **)&cb->host, host_bytes));
  assign_host_buffers(cb, (uintptr_t)cb->host);
  for (int k = 0; k < 2; k++) CUDA_CHECK(cudaEventCreateWithFlags(&cb->staging[k].copied, cudaEventDisableTiming));
  /* every one of them: the decoder reads decoder_rows, the classifier one per piece */
  cuda_fill_f32(cb->ones, 1.0f, cb->ones_count, cb->stream);
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

/* With segmented backpropagation the activation buffers hold one segment;
 * the whole batch's states only at the segment boundaries. */
static void choose_held_shape(cuda_backend *cb) {
  const int K = cb->cap.bptt_segment;
  cb->seg.segment = K > 0 && K < cb->cap.max_steps ? K : 0;
  cb->held_steps = cb->seg.segment ? K : cb->cap.max_steps;
  cb->held_tokens = cb->cap.max_tokens;
  if (cb->seg.segment && (int64_t)K * cb->cap.max_pieces < cb->held_tokens)
    cb->held_tokens = (int64_t)K * cb->cap.max_pieces;
  cb->seg.boundaries = cb->seg.segment ? (cb->cap.max_steps + K - 1) / K - 1 : 0;
}

const char *cuda_backend_supports(const rnnd_model_shape *shape) {
  if (shape->decoder != RNND_DECODER_SOFTMAX) return "model.decoder = adaptive is not implemented";
  return NULL;
}

rnnd_backend *cuda_backend_create(const rnnd_layout *layout, const rnnd_backend_capacity *cap) {
  const char *missing = cuda_backend_supports(&layout->shape);
  if (missing) rnnd_input_error("%s on the CUDA backend (use the CPU)", missing);
  cuda_backend *cb = RNND_ALLOC(cuda_backend, 1, "CUDA backend");
  const rnnd_model_shape *s = &layout->shape;
  cb->base.ops = &cuda_ops;
  cb->base.layout = layout;
  cb->cap = *cap;
  if (cb->cap.max_pieces < 1) cb->cap.max_pieces = 1;
  if (cb->cap.max_steps < 1) cb->cap.max_steps = 1;
  if (cb->cap.max_tokens < 1) cb->cap.max_tokens = 1;
  cb->layers = s->layers;
  cb->directions = s->directions;
  cb->hidden = s->hidden;
  cb->embed = s->embed;
  cb->top = s->hidden * s->directions;
  cb->gates = layout->gates;
  cb->head = cuda_head_for(s);
  cb->input = cuda_input_for(s);
  cb->heads.n_classes = s->n_classes;
  cb->heads.n_features = s->n_features;
  cb->storage = cap->storage;
  set_types(cb);
  choose_held_shape(cb);
  cb->head->size(cb); /* the logits' width and rows per block */
  create_handles(cb);
  cuda_layers_create_descriptors(cb);
  cuda_layers_size_temp(cb);
  allocate(cb);
  cuda_layers_build_segment_table(cb);
  return &cb->base;
}
