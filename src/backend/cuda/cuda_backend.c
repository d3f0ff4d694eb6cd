/* cuda_backend.c — the CUDA backend: embedding gather, one cuDNN RNN per
 * layer (so dropout between layers is ours, with the CPU backend's masks),
 * a cuBLAS decoder with fused softmax cross-entropy a block of rows at a
 * time, and the backward of all of it.
 *
 * Layout. Activations are packed time-major exactly as rnnd_batch lays them
 * out, which is cuDNN's CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED (pieces sorted
 * longest first): no padding is stored or computed. A bidirectional layer's
 * output row is [forward | reverse], as in the CPU backend and PyTorch.
 *
 * Parameters. The canonical flat buffer (PyTorch names and layout) is
 * uploaded, cast to the activation type, and scattered into each layer's
 * cuDNN weight space through a segment table built from
 * cudnnGetRNNWeightParams (cuDNN's gate order is PyTorch's: r,z,n and
 * i,f,g,o; each gate matrix is row-major [hidden x input]). Weight-space
 * gradients go back through the same table into a canonical fp32 gradient.
 *
 * Precision. capacity.storage = fp16/bf16 gives cuDNN 16-bit data with fp32
 * math on tensor cores, and 16-bit decoder GEMMs with fp32 accumulation;
 * logits, the softmax and every gradient sum are fp32.
 *
 * Tasks and state. The classify and regress heads and the input projection
 * live in cuda_heads.c; carried stream state and segmented backpropagation
 * (both through cuDNN's hx/hy/dhy/dhx, named by cb->link) in
 * cuda_segments.c, which also drives a whole batch (cuda_backend_run).
 *
 * Ownership: cuda_backend_create takes one device allocation (the arena),
 * one pinned host allocation, a stream and the library handles; destroy
 * releases them all. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "cuda_kernels.h"
#include "rnnd/rng.h"

/* --- arena -------------------------------------------------------------- */

/* Hands out aligned pieces of [base, base + *used); with base 0 it only counts. */
void *cuda_carve(uintptr_t base, size_t *used, size_t bytes) {
  size_t at = (*used + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  *used = at + bytes;
  return (void *)(base + at);
}

static int input_width(const cuda_backend *cb, int layer) { return layer == 0 ? cb->embed : cb->top; }

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
    cb->x[l] = cuda_carve(base, &used, (size_t)T * input_width(cb, l) * e);
    activations += (size_t)T * input_width(cb, l) * e;
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
  cb->seq_lengths = cuda_carve(base, &used, (size_t)B * sizeof(int32_t));
  cb->segments = cuda_carve(base, &used, MAX_SEGMENTS * sizeof(cuda_weight_segment));
  cb->grad_segments = cuda_carve(base, &used, MAX_SEGMENTS * sizeof(cuda_weight_segment));
  cuda_heads_carve(cb, base, &used);
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
    set->lengths = cuda_carve(base, &used, (size_t)cb->cap.max_pieces * sizeof(int32_t));
    cuda_heads_carve_staging(cb, base, &used, set);
  }
  cb->host_grads = cuda_carve(base, &used, cb->base.layout->numel * sizeof(float));
  cb->host_nll = cuda_carve(base, &used, sizeof(double));
  cuda_heads_carve_host(cb, base, &used);
  cuda_segments_carve_host(cb, base, &used);
  return used;
}

/* --- descriptors ------------------------------------------------------- */

static void set_data_descriptor(cudnnRNNDataDescriptor_t desc, const cuda_backend *cb, int max_steps, int pieces,
                                int width, const int32_t *lengths) {
  float fill = 0.0f; /* ignored by the packed layout, which has no padding */
  CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc, cb->cudnn_type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, max_steps,
                                        pieces, width, lengths, &fill));
}

static void set_batch_shape(cuda_backend *cb, int max_steps, int pieces, const int32_t *lengths) {
  set_data_descriptor(cb->x_first, cb, max_steps, pieces, cb->embed, lengths);
  set_data_descriptor(cb->x_upper, cb, max_steps, pieces, cb->top, lengths);
  set_data_descriptor(cb->y_desc, cb, max_steps, pieces, cb->top, lengths);
  int dims[3] = {cb->directions, pieces, cb->hidden}, strides[3] = {pieces * cb->hidden, cb->hidden, 1};
  CUDNN_CHECK(cudnnSetTensorNdDescriptor(cb->h_desc, cb->cudnn_type, 3, dims, strides));
}

static cudnnRNNDataDescriptor_t x_desc_of(const cuda_backend *cb, int layer) {
  return layer == 0 ? cb->x_first : cb->x_upper;
}

static void create_layer_descriptors(cuda_backend *cb) {
  const int cell = cb->base.layout->shape.cell;
  for (int l = 0; l < cb->layers; l++) {
    cuda_layer *L = &cb->layer[l];
    L->input_size = input_width(cb, l);
    CUDNN_CHECK(cudnnCreateRNNDescriptor(&L->desc));
    CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        L->desc, CUDNN_RNN_ALGO_STANDARD, cell == RNND_CELL_LSTM ? CUDNN_LSTM : CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS,
        cb->directions == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, cb->cudnn_type,
        CUDNN_DATA_FLOAT,
        cb->storage == RNND_DTYPE_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH, L->input_size, cb->hidden, cb->hidden,
        1, cb->no_dropout, CUDNN_RNN_PADDED_IO_DISABLED));
    CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(cb->cudnn, L->desc, &L->weight_bytes));
  }
}

/* --- temp spaces (cuda_temp) --------------------------------------------- */

typedef struct {
  size_t workspace, reserve[RNND_MAX_LAYERS];
} temp_sizes;

/* What the shape the descriptors now hold needs: the larger workspace of
 * the training and inference modes, and each layer's reserve. */
static temp_sizes needed_temp_sizes(const cuda_backend *cb) {
  temp_sizes need = {0};
  for (int l = 0; l < cb->layers; l++) {
    size_t work = 0, reserve = 0, infer_work = 0, no_reserve = 0;
    CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(cb->cudnn, cb->layer[l].desc, CUDNN_FWD_MODE_TRAINING, x_desc_of(cb, l),
                                          &work, &reserve));
    CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(cb->cudnn, cb->layer[l].desc, CUDNN_FWD_MODE_INFERENCE,
                                          x_desc_of(cb, l), &infer_work, &no_reserve));
    need.reserve[l] = reserve;
    if (work > need.workspace) need.workspace = work;
    if (infer_work > need.workspace) need.workspace = infer_work;
  }
  return need;
}

/* Points the workspace and reserves into the temp allocation at `base`
 * (base 0: only counts) and returns its size. */
static size_t place_temp(cuda_backend *cb, uintptr_t base) {
  size_t used = 0;
  cb->workspace = cuda_carve(base, &used, cb->cudnn_workspace_bytes);
  for (int l = 0; l < cb->layers; l++) cb->layer[l].reserve = cuda_carve(base, &used, cb->layer[l].reserve_bytes);
  return used;
}

/* (Re)allocates the temp spaces at the sizes now in cb. Nothing on the
 * stream may still use the old allocation, so it is synchronised first. */
static void allocate_temp(cuda_backend *cb) {
  if (cb->temp.base) {
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    CUDA_CHECK(cudaFree(cb->temp.base));
    cb->temp.base = NULL;
  }
  cb->temp.bytes = place_temp(cb, 0);
  CUDA_CHECK(cudaMalloc((void **)&cb->temp.base, cb->temp.bytes ? cb->temp.bytes : 1));
  place_temp(cb, (uintptr_t)cb->temp.base);
}

/* A size that holds `need`, with a quarter of headroom when it grows, so
 * that a run whose shapes creep upwards regrows rarely. */
static size_t grown(size_t have, size_t need) { return need <= have ? have : need + need / 4; }

/* The batch shape now in the descriptors must fit the temp spaces: if it
 * needs more than they hold, they grow (and the growth is counted). */
static void fit_temp_spaces(cuda_backend *cb) {
  temp_sizes need = needed_temp_sizes(cb);
  int fits = need.workspace <= cb->cudnn_workspace_bytes;
  for (int l = 0; l < cb->layers; l++) fits &= need.reserve[l] <= cb->layer[l].reserve_bytes;
  if (fits) return;
  cb->cudnn_workspace_bytes = grown(cb->cudnn_workspace_bytes, need.workspace);
  for (int l = 0; l < cb->layers; l++)
    cb->layer[l].reserve_bytes = grown(cb->layer[l].reserve_bytes, need.reserve[l]);
  allocate_temp(cb);
  cb->temp.growths++;
}

/* The first sizing: for the largest batch (or segment) rectangle, every
 * piece as long as the longest. Other shapes may need more (fit_temp_spaces). */
static void size_temp_spaces(cuda_backend *cb) {
  int *lengths = RNND_ALLOC(int, (size_t)cb->cap.max_pieces, "capacity lengths");
  for (int i = 0; i < cb->cap.max_pieces; i++) lengths[i] = cb->held_steps;
  set_batch_shape(cb, cb->held_steps, cb->cap.max_pieces, lengths);
  free(lengths);
  temp_sizes need = needed_temp_sizes(cb);
  cb->cudnn_workspace_bytes = need.workspace;
  for (int l = 0; l < cb->layers; l++) cb->layer[l].reserve_bytes = need.reserve[l];
  allocate_temp(cb);
}

/* --- canonical <-> weight space ------------------------------------------ */

/* One run of `count` floats at `canonical`, found at `address` in layer L's
 * weights; its gradient sits at the same offset in L's dweights. */
static void add_segment(cuda_backend *cb, cuda_weight_segment *table, cuda_weight_segment *grad_table,
                        const cuda_layer *L, size_t canonical, const void *address, int64_t count) {
  if (cb->n_segments == MAX_SEGMENTS) RNND_FAIL("more than %d weight segments", MAX_SEGMENTS);
  int64_t in_layer = (int64_t)((const char *)address - L->weights);
  if (in_layer < 0 || (size_t)in_layer + (size_t)count * cb->elem > L->weight_bytes)
    RNND_FAIL("cuDNN weight matrix outside its weight space (offset %lld)", (long long)in_layer);
  table[cb->n_segments] = (cuda_weight_segment){(int64_t)canonical, (int64_t)(L->weights - cb->arena) + in_layer,
                                                count};
  grad_table[cb->n_segments] = (cuda_weight_segment){(int64_t)canonical,
                                                     (int64_t)(L->dweights - cb->arena) + in_layer, count};
  cb->n_segments++;
  if (count > cb->longest_segment) cb->longest_segment = count;
}

/* Where each gate's matrix and bias of each layer and direction lives in
 * the weight space: linear layer k < gates is gate k of weight_ih/bias_ih,
 * gates + k the same gate of weight_hh/bias_hh. */
static void build_segment_table(cuda_backend *cb) {
  cuda_weight_segment table[MAX_SEGMENTS], grad_table[MAX_SEGMENTS];
  const int H = cb->hidden, G = cb->gates;
  cudnnTensorDescriptor_t m_desc, b_desc;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_desc));
  cb->n_segments = 0;
  for (int l = 0; l < cb->layers; l++) {
    const cuda_layer *L = &cb->layer[l];
    cb->layer_segments[l][0] = cb->n_segments;
    for (int dir = 0; dir < cb->directions; dir++) {
      const rnnd_rnn_offsets *o = &cb->base.layout->rnn[l][dir];
      for (int k = 0; k < 2 * G; k++) {
        void *matrix = NULL, *bias = NULL;
        CUDNN_CHECK(cudnnGetRNNWeightParams(cb->cudnn, L->desc, dir, L->weight_bytes, L->weights, k, m_desc,
                                            &matrix, b_desc, &bias));
        int gate = k % G, recurrent = k >= G, width = recurrent ? H : L->input_size;
        size_t w = (recurrent ? o->weight_hh : o->weight_ih) + (size_t)gate * H * width;
        size_t b = (recurrent ? o->bias_hh : o->bias_ih) + (size_t)gate * H;
        add_segment(cb, table, grad_table, L, w, matrix, (int64_t)H * width);
        add_segment(cb, table, grad_table, L, b, bias, H);
      }
    }
    cb->layer_segments[l][1] = cb->n_segments - cb->layer_segments[l][0];
  }
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(m_desc));
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(b_desc));
  /* On the backend's stream (a non-blocking one, which the legacy stream
   * of a plain cudaMemcpy does not order against), then waited for: the
   * tables live on this function's stack. */
  CUDA_CHECK(cudaMemcpyAsync(cb->segments, table, (size_t)cb->n_segments * sizeof *table, cudaMemcpyHostToDevice,
                             cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cb->grad_segments, grad_table, (size_t)cb->n_segments * sizeof *grad_table,
                             cudaMemcpyHostToDevice, cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

void cuda_backend_refresh_weights(cuda_backend *cb) {
  const size_t numel = cb->base.layout->numel;
  if (cb->storage != RNND_DTYPE_F32)
    cuda_cast_from_f32(cb->params16, cb->storage, cb->params, (int64_t)numel, cb->stream);
  cuda_canonical_to_space(cb->arena, cb->storage, cb->params, cb->segments, cb->n_segments, cb->longest_segment,
                          cb->stream);
}

/* Device parameters <- the host's, unless the device holds the master
 * weights (the CUDA step); then the 16-bit copy and weight spaces. */
static void upload_params(cuda_backend *cb, const float *params) {
  if (cb->params_resident) return;
  const size_t numel = cb->base.layout->numel;
  CUDA_CHECK(cudaMemcpyAsync(cb->params, params, numel * sizeof(float), cudaMemcpyHostToDevice, cb->stream));
  cuda_backend_refresh_weights(cb);
}

/* --- batch ---------------------------------------------------------------- */

/* A batch longer than the held steps runs by segments (which then fit). */
void cuda_backend_check_batch(const cuda_backend *cb, const rnnd_batch *b) {
  int segmented = cb->seg.segment > 0 && b->n_steps > cb->seg.segment;
  if (b->n_pieces > cb->cap.max_pieces || b->n_steps > cb->cap.max_steps ||
      (!segmented && b->n_tokens > cb->held_tokens))
    RNND_FAIL("batch (%d pieces, %d steps, %lld tokens) exceeds the backend capacity (%d, %d, %lld)", b->n_pieces,
              b->n_steps, (long long)b->n_tokens, cb->cap.max_pieces, cb->cap.max_steps,
              (long long)cb->held_tokens);
}

/* The next staging set, once the copies last enqueued from it have run. */
static cuda_staging *free_staging(cuda_backend *cb) {
  cuda_staging *set = &cb->staging[cb->next_staging];
  CUDA_CHECK(cudaEventSynchronize(set->copied)); /* at once for a set never used */
  cb->next_staging ^= 1;
  return set;
}

/* Copies the batch's index arrays (and the dropout keys of every row) to
 * the device through a staging set, sets the descriptors to its shape and
 * makes the temp spaces fit it. A segment's view counts its pieces' steps
 * within the view. */
void cuda_backend_upload_batch(cuda_backend *cb, const rnnd_batch *b) {
  const int64_t T = b->n_tokens;
  RNND_ASSERT(b->n_steps <= cb->held_steps && T <= cb->held_tokens);
  cuda_staging *set = free_staging(cb);
  for (int i = 0; i < b->n_pieces; i++) set->lengths[i] = 0;
  for (int t = 0; t < b->n_steps; t++)
    for (int i = 0; i < b->batch_sizes[t]; i++) {
      set->row_piece[b->step_offsets[t] + i] = b->pieces[i].id;
      set->lengths[i]++;
    }
  memcpy(set->inputs, b->inputs, (size_t)T * sizeof(int32_t));
  memcpy(set->targets, b->targets, (size_t)T * sizeof(int32_t));
  memcpy(set->positions, b->positions, (size_t)T * sizeof(int32_t));
  cudaStream_t s = cb->stream;
  CUDA_CHECK(cudaMemcpyAsync(cb->inputs, set->inputs, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->targets, set->targets, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->positions, set->positions, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->row_piece, set->row_piece, (size_t)T * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->seq_lengths, set->lengths, (size_t)b->n_pieces * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
  if (cb->heads.regress) cuda_heads_upload(cb, b, set);
  CUDA_CHECK(cudaEventRecord(set->copied, s));
  set_batch_shape(cb, b->n_steps, b->n_pieces, set->lengths);
  fit_temp_spaces(cb);
}

static const void *at_row(const void *base, int64_t row, int width, size_t elem) {
  return (const char *)base + (size_t)row * (size_t)width * elem;
}

static void apply_dropout(cuda_backend *cb, void *dst, const void *src, int64_t rows, int width,
                          const rnnd_dropout *dr, int slot) {
  uint64_t slot_key = rng_dropout_slot_key(dr->seed, dr->step, slot);
  cuda_dropout(dst, src, cb->storage, rows, width, cb->row_piece, cb->positions, slot_key, dr->p, cb->stream);
}

/* --- forward ---------------------------------------------------------------- */

/* Embedding and every layer; x[layers] then holds the decoder input. */
void cuda_backend_forward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, int training) {
  const int64_t T = b->n_tokens;
  const int use_dropout = dr && dr->p > 0.0f;
  /* the compute copy (16-bit: the rounded weights, as the CPU trainer uses) */
  if (cb->heads.regress)
    cuda_input_projection(cb, T);
  else
    cuda_gather_embedding(cb->x[0], cb->storage,
                          at_row(cb->params16, (int64_t)cb->base.layout->embedding_weight, 1, cb->elem), cb->inputs,
                          T, cb->embed, cb->stream);
  if (use_dropout) apply_dropout(cb, cb->x[0], cb->x[0], T, cb->embed, dr, 0);
  const cuda_state_link *k = &cb->link;
  for (int l = 0; l < cb->layers; l++) {
    cuda_layer *L = &cb->layer[l];
    CUDNN_CHECK(cudnnRNNForward(cb->cudnn, L->desc, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                cb->seq_lengths, x_desc_of(cb, l), cb->x[l], cb->y_desc, cb->y[l], cb->h_desc,
                                k->hx[l], k->hy[l], cb->h_desc, k->cx[l], k->cy[l], L->weight_bytes, L->weights,
                                cb->cudnn_workspace_bytes, cb->workspace, training ? L->reserve_bytes : 0,
                                training ? L->reserve : NULL));
    if (use_dropout) apply_dropout(cb, cb->x[l + 1], cb->y[l], T, cb->top, dr, l + 1);
    else CUDA_CHECK(cudaMemcpyAsync(cb->x[l + 1], cb->y[l], (size_t)T * cb->top * cb->elem,
                                    cudaMemcpyDeviceToDevice, cb->stream));
  }
}

/* --- decoder ---------------------------------------------------------------- */


/* logits[rows, width] = x[rows, in] W^T, fp32 out, fp32 accumulation. In
 * cuBLAS's column-major terms: [width x rows] = W^T-as-stored(T) * x(N). */
void cuda_linear_logits(cuda_backend *cb, const cuda_linear *h, const void *x, int rows) {
  const float one = 1.0f, zero = 0.0f;
  const void *weight = at_row(cb->params16, (int64_t)h->weight, 1, cb->elem);
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, h->width, rows, h->in, &one, weight, cb->blas_type,
                            h->in, x, cb->blas_type, h->in, &zero, h->logits, CUDA_R_32F, h->width,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* bias grad += column sums; W grad += dlogits^T x; dx = dlogits W. */
void cuda_linear_backward(cuda_backend *cb, const cuda_linear *h, const void *x, void *dx, int rows) {
  const float one = 1.0f, zero = 0.0f;
  const void *dlogits = h->grad16 ? h->grad16 : (const void *)h->logits;
  const void *weight = at_row(cb->params16, (int64_t)h->weight, 1, cb->elem);
  CUBLAS_CHECK(cublasSgemv(cb->cublas, CUBLAS_OP_N, h->width, rows, &one, h->logits, h->width, cb->ones, 1, &one,
                           cb->grads + h->bias, 1));
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_T, h->in, h->width, rows, &one, x, cb->blas_type,
                            h->in, dlogits, cb->blas_type, h->width, &one, cb->grads + h->weight, CUDA_R_32F, h->in,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (!dx) return;
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_N, h->in, rows, h->width, &one, weight, cb->blas_type,
                            h->in, dlogits, cb->blas_type, h->width, &zero, dx, cb->blas_type, h->in,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* The language-model decoder a block of rows at a time (or the task's
 * head); the loss sum is added into cb->nll_sum. */
void cuda_backend_decoder_pass(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy) {
  if (cb->heads.classify || cb->heads.regress) {
    cuda_heads_pass(cb, b, weight, dy);
    return;
  }
  const rnnd_layout *layout = cb->base.layout;
  const void *y = cb->x[cb->layers];
  const void *bias = at_row(cb->params16, (int64_t)layout->decoder_bias, 1, cb->elem);
  const cuda_linear decoder = {layout->decoder_weight, layout->decoder_bias, cb->vocab, cb->top, cb->logits,
                               cb->dlogits16};
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    const void *y_block = at_row(y, r0, cb->top, cb->elem);
    cuda_linear_logits(cb, &decoder, y_block, rows);
    cuda_softmax_xent(cb->logits, weight > 0.0f ? cb->dlogits16 : NULL, cb->storage, bias, cb->targets + r0, rows,
                      cb->vocab, weight, cb->row_nll + r0, cb->stream);
    if (weight > 0.0f)
      cuda_linear_backward(cb, &decoder, y_block, (char *)dy + (size_t)r0 * cb->top * cb->elem, rows);
  }
  cuda_sum_f64(cb->row_nll, b->n_tokens, cb->nll_part, cb->stream);
  cuda_add_f64(cb->nll_sum, cb->nll_part, cb->stream);
  if (weight > 0.0f) {
    /* the decoder's own parameters are final (a tied weight is the embedding's, final last) */
    size_t frontier = layout->decoder_bias;
    if (!layout->shape.tie_weights && layout->decoder_weight < frontier) frontier = layout->decoder_weight;
    cuda_gradient_final(cb, frontier);
  }
}

/* The loss sum enqueued by the decoder pass, once the stream has run. */
static double read_nll(cuda_backend *cb) {
  CUDA_CHECK(cudaMemcpyAsync(cb->host_nll, cb->nll_sum, sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  return *cb->host_nll;
}

/* --- backward ----------------------------------------------------------- */

/* Layer l's weight-space gradient into the canonical one. */
static void layer_gradient(cuda_backend *cb, int l) {
  cuda_space_add_to_canonical(cb->grads, cb->arena, cb->storage, cb->grad_segments + cb->layer_segments[l][0],
                              cb->layer_segments[l][1], cb->longest_segment, cb->stream);
  cuda_gradient_final(cb, cb->base.layout->rnn[l][0].weight_ih);
}

/* From dL/d(decoder input) in grad_a down to the embedding rows. */
void cuda_backend_backward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr) {
  const int64_t T = b->n_tokens;
  const int use_dropout = dr && dr->p > 0.0f;
  void *d_out = cb->grad_a, *d_in = cb->grad_b;
  const cuda_state_link *k = &cb->link;
  /* the classifier reads the top layer before the decoder's dropout */
  if (use_dropout && !cb->heads.classify) apply_dropout(cb, d_out, d_out, T, cb->top, dr, cb->layers);
  for (int l = cb->layers - 1; l >= 0; l--) {
    cuda_layer *L = &cb->layer[l];
    /* BackwardData first: BackwardWeights reads what it leaves in the reserve. */
    CUDNN_CHECK(cudnnRNNBackwardData_v8(cb->cudnn, L->desc, cb->seq_lengths, cb->y_desc, cb->y[l], d_out,
                                        x_desc_of(cb, l), d_in, cb->h_desc, k->hx[l], k->dhy[l], k->dhx[l],
                                        cb->h_desc, k->cx[l], k->dcy[l], k->dcx[l], L->weight_bytes, L->weights,
                                        cb->cudnn_workspace_bytes, cb->workspace, L->reserve_bytes, L->reserve));
    /* cuDNN supports only CUDNN_WGRAD_MODE_ADD, which adds into dweights:
     * start the layer's weight-space gradient from zero for this batch. */
    CUDA_CHECK(cudaMemsetAsync(L->dweights, 0, L->weight_bytes, cb->stream));
    CUDNN_CHECK(cudnnRNNBackwardWeights_v8(cb->cudnn, L->desc, CUDNN_WGRAD_MODE_ADD, cb->seq_lengths,
                                           x_desc_of(cb, l), cb->x[l], cb->h_desc, k->hx[l], cb->y_desc, cb->y[l],
                                           L->weight_bytes, L->dweights, cb->cudnn_workspace_bytes, cb->workspace,
                                           L->reserve_bytes, L->reserve));
    layer_gradient(cb, l);
    if (use_dropout) apply_dropout(cb, d_in, d_in, T, input_width(cb, l), dr, l);
    void *swap = d_out;
    d_out = d_in;
    d_in = swap;
  }
  if (cb->heads.regress)
    cuda_input_projection_backward(cb, d_out, T);
  else
    cuda_scatter_add_embedding(cb->grads + cb->base.layout->embedding_weight, d_out, cb->storage, cb->inputs, T,
                               cb->embed, cb->stream);
  cuda_gradient_final(cb, 0);
}

/* --- ops ---------------------------------------------------------------- */

static double cuda_train_batch(rnnd_backend *be, const float *params, float *grads, const rnnd_batch *b,
                               const rnnd_dropout *dr, float loss_weight) {
  cuda_backend *cb = (cuda_backend *)be;
  cuda_backend_check_batch(cb, b);
  if (b->n_tokens == 0) return 0.0;
  const size_t numel = be->layout->numel;
  upload_params(cb, params);
  CUDA_CHECK(cudaMemsetAsync(cb->grads, 0, numel * sizeof(float), cb->stream));
  cuda_backend_run(cb, b, dr, loss_weight, 1);
  CUDA_CHECK(cudaMemcpyAsync(cb->host_grads, cb->grads, numel * sizeof(float), cudaMemcpyDeviceToHost, cb->stream));
  double nll = read_nll(cb); /* synchronises the stream, so host_grads is there too */
  for (size_t i = 0; i < numel; i++) grads[i] += cb->host_grads[i];
  return nll;
}

static double cuda_eval_batch(rnnd_backend *be, const float *params, const rnnd_batch *b) {
  cuda_backend *cb = (cuda_backend *)be;
  cuda_backend_check_batch(cb, b);
  if (b->n_tokens == 0) return 0.0;
  upload_params(cb, params);
  cuda_backend_run(cb, b, NULL, 0.0f, 0);
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
  cb->vocab = s->vocab_size;
  cb->top = s->hidden * s->directions;
  cb->gates = layout->gates;
  cb->heads.classify = s->task == RNND_TASK_CLASSIFY;
  cb->heads.n_classes = s->n_classes;
  cb->heads.regress = s->task == RNND_TASK_REGRESS;
  cb->heads.n_features = s->n_features;
  if (cb->heads.regress) cb->vocab = s->n_features; /* the decoder's width: the next step's features */
  cb->storage = cap->storage;
  set_types(cb);
  choose_held_shape(cb);
  cb->decoder_rows = DECODER_BLOCK_FLOATS / cb->vocab;
  if (cb->decoder_rows < DECODER_MIN_ROWS) cb->decoder_rows = DECODER_MIN_ROWS;
  if (cb->decoder_rows > cb->held_tokens) cb->decoder_rows = (int)cb->held_tokens;
  if (cb->heads.classify) cb->decoder_rows = 1; /* no language-model decoder: its buffers stay minimal */
  create_handles(cb);
  create_layer_descriptors(cb);
  size_temp_spaces(cb);
  allocate(cb);
  build_segment_table(cb);
  return &cb->base;
}
