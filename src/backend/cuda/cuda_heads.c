/* cuda_heads.c — what the CUDA backend puts on its layers, as the tables of
 * cuda_internal.h, computing what the CPU backend's cpu_heads.c computes:
 *  - the language-model decoder: a cuBLAS linear layer and fused softmax
 *    cross-entropy, a block of rows at a time;
 *  - classify: each piece's final hidden state of the top layer, before
 *    dropout (forward's last step, backward's first), -> linear -> softmax
 *    cross-entropy against the piece's label; accuracy counted;
 *  - regress: a linear head on every row with the mean squared error over
 *    the features of the scored rows; errors in original units counted;
 *  - the first layer's input: the embedding rows, or (regress) the input
 *    projection x0 = values W_in^T + b_in.
 * Each head says how wide its logits are and carves its buffers out of the
 * backend's arena and pinned area (cuda_backend.c); nothing here allocates.
 * Each head tells the gradient listener when its own parameters' gradient
 * is final. */
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"

static const void *params16_at(const cuda_backend *cb, size_t offset) { return cuda_at_row(cb->params16, (int64_t)offset, 1, cb->elem); }

/* --- a linear layer on rows ------------------------------------------------ */

/* A linear head on rows of x (in D): logits[rows, width] (fp32) = x W^T
 * with W at `weight` of the compute copy, `in` wide; the bias is added by
 * the kernel that reads the logits. Backward from the gradient (fp32 in
 * logits, in D in grad16 with 16-bit storage): W and bias gradients, and
 * dx = dlogits W (not when dx is NULL). */
typedef struct {
  size_t weight, bias;
  int width, in;
  float *logits;
  void *grad16;
} cuda_linear;

/* logits[rows, width] = x[rows, in] W^T, fp32 out, fp32 accumulation. In
 * cuBLAS's column-major terms: [width x rows] = W^T-as-stored(T) * x(N). */
static void linear_logits(cuda_backend *cb, const cuda_linear *h, const void *x, int rows) {
  const float one = 1.0f, zero = 0.0f;
  const void *weight = params16_at(cb, h->weight);
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, h->width, rows, h->in, &one, weight, cb->blas_type,
                            h->in, x, cb->blas_type, h->in, &zero, h->logits, CUDA_R_32F, h->width,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* bias grad += column sums; W grad += dlogits^T x; dx = dlogits W. */
static void linear_backward(cuda_backend *cb, const cuda_linear *h, const void *x, void *dx, int rows) {
  const float one = 1.0f, zero = 0.0f;
  const void *dlogits = h->grad16 ? h->grad16 : (const void *)h->logits;
  const void *weight = params16_at(cb, h->weight);
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

/* Logits buffers in blocks of rows of at most DECODER_BLOCK_FLOATS (64 MiB). */
static void blocks_of_rows(cuda_backend *cb, int width) {
  cb->vocab = width;
  cb->decoder_rows = DECODER_BLOCK_FLOATS / width;
  if (cb->decoder_rows < DECODER_MIN_ROWS) cb->decoder_rows = DECODER_MIN_ROWS;
  if (cb->decoder_rows > cb->held_tokens) cb->decoder_rows = (int)cb->held_tokens;
}

/* --- the language-model decoder --------------------------------------------- */

static void softmax_size(cuda_backend *cb) { blocks_of_rows(cb, cb->base.layout->shape.vocab_size); }

/* The decoder a block of rows at a time; the loss sum is added into
 * cb->nll_sum, and with weight > 0 the gradients and dL/dy into dy. */
static void softmax_pass(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy) {
  const rnnd_layout *layout = cb->base.layout;
  const void *y = cb->x[cb->layers];
  const void *bias = params16_at(cb, layout->decoder_bias);
  const cuda_linear decoder = {layout->decoder_weight, layout->decoder_bias, cb->vocab, cb->top, cb->logits,
                               cb->dlogits16};
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    const void *y_block = cuda_at_row(y, r0, cb->top, cb->elem);
    linear_logits(cb, &decoder, y_block, rows);
    cuda_softmax_xent(cb->logits, weight > 0.0f ? cb->dlogits16 : NULL, cb->storage, bias, cb->targets + r0, rows,
                      cb->vocab, weight, cb->row_nll + r0, cb->stream);
    if (weight > 0.0f)
      linear_backward(cb, &decoder, y_block, (char *)dy + (size_t)r0 * cb->top * cb->elem, rows);
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

/* --- regress ------------------------------------------------------------------ */

static void forecaster_size(cuda_backend *cb) { blocks_of_rows(cb, cb->heads.n_features); }

static void forecaster_carve(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_heads *h = &cb->heads;
  const int64_t T = cb->held_tokens, F = h->n_features;
  h->series_in = cuda_carve(base, used, (size_t)(2 * T * F + F) * sizeof(float)); /* in, target, std */
  h->series_target = h->series_in + T * F;
  h->std = h->series_target + T * F;
  h->series16 = cb->storage == RNND_DTYPE_F32 ? (void *)h->series_in
                                              : cuda_carve(base, used, (size_t)(T * F) * cb->elem);
  h->scored = cuda_carve(base, used, (size_t)T);
  h->row_sq = cuda_carve(base, used, (size_t)T * 2 * sizeof(double));
  h->row_abs = h->row_sq + T;
  h->error_sums = cuda_carve(base, used, 4 * sizeof(double));
}

static void forecaster_carve_host(cuda_backend *cb, uintptr_t base, size_t *used) {
  cb->heads.host_errors = cuda_carve(base, used, 2 * sizeof(double));
}

static void forecaster_carve_staging(cuda_backend *cb, uintptr_t base, size_t *used, cuda_staging *set) {
  const int64_t T = cb->held_tokens, F = cb->heads.n_features;
  set->series = cuda_carve(base, used, (size_t)(2 * T * F + F) * sizeof(float));
  set->scored = cuda_carve(base, used, (size_t)T);
}

/* The batch's series rows to the device through the staging set upload_batch is filling. */
static void forecaster_upload(cuda_backend *cb, const rnnd_batch *b, cuda_staging *set) {
  cuda_heads *h = &cb->heads;
  const int64_t T = b->n_tokens, F = h->n_features, cap = cb->held_tokens;
  RNND_ASSERT(b->n_features == F && b->series_in && b->scored);
  /* the three parts at the device's offsets: in, target, std */
  const float *parts[3] = {b->series_in, b->series_target, b->series_std};
  const int64_t counts[3] = {T * F, T * F, F};
  for (int k = 0; k < 3; k++) {
    float *staged = set->series + k * cap * F;
    memcpy(staged, parts[k], (size_t)counts[k] * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(h->series_in + k * cap * F, staged, (size_t)counts[k] * sizeof(float),
                               cudaMemcpyHostToDevice, cb->stream));
  }
  memcpy(set->scored, b->scored, (size_t)T);
  CUDA_CHECK(cudaMemcpyAsync(h->scored, set->scored, (size_t)T, cudaMemcpyHostToDevice, cb->stream));
  if (cb->storage != RNND_DTYPE_F32) cuda_cast_from_f32(h->series16, cb->storage, h->series_in, T * F, cb->stream);
}

static void forecaster_begin(cuda_backend *cb) {
  memset(&cb->heads.stats, 0, sizeof cb->heads.stats);
  CUDA_CHECK(cudaMemsetAsync(cb->heads.error_sums, 0, 2 * sizeof(double), cb->stream));
}

/* The stream has run (the caller synchronised it). */
static void forecaster_finish(cuda_backend *cb) {
  cb->heads.stats.sq_error = cb->heads.host_errors[0];
  cb->heads.stats.abs_error = cb->heads.host_errors[1];
}

/* Every row through the linear head and the squared error, a block of
 * rows at a time; the loss is added into nll_sum, the errors into
 * error_sums. */
static void forecaster_pass(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy) {
  cuda_heads *h = &cb->heads;
  const rnnd_layout *l = cb->base.layout;
  const int F = h->n_features;
  const void *y = cb->x[cb->layers];
  const cuda_linear head = {l->decoder_weight, l->decoder_bias, F, cb->top, cb->logits, cb->dlogits16};
  for (int64_t r = 0; r < b->n_tokens; r++) h->stats.values += b->scored[r] ? F : 0;
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    const void *y_block = cuda_at_row(y, r0, cb->top, cb->elem);
    linear_logits(cb, &head, y_block, rows);
    cuda_mse(cb->logits, weight > 0.0f ? cb->dlogits16 : NULL, cb->storage, params16_at(cb, l->decoder_bias),
             h->series_target + r0 * F, h->scored + r0, h->std, rows, F, weight, cb->row_nll + r0, h->row_sq + r0,
             h->row_abs + r0, cb->stream);
    if (weight > 0.0f) linear_backward(cb, &head, y_block, (char *)dy + (size_t)(r0 * cb->top) * cb->elem, rows);
  }
  cuda_sum_f64(cb->row_nll, b->n_tokens, cb->nll_part, cb->stream);
  cuda_add_f64(cb->nll_sum, cb->nll_part, cb->stream);
  for (int k = 0; k < 2; k++) {
    cuda_sum_f64(k ? h->row_abs : h->row_sq, b->n_tokens, h->error_sums + 2 + k, cb->stream);
    cuda_add_f64(h->error_sums + k, h->error_sums + 2 + k, cb->stream);
  }
  CUDA_CHECK(cudaMemcpyAsync(h->host_errors, h->error_sums, 2 * sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  if (weight > 0.0f) cuda_gradient_final(cb, l->decoder_weight);
}

/* --- classify ------------------------------------------------------------ */

/* No row-blocked logits: its logits are one row a piece (class_logits). */
static void classifier_size(cuda_backend *cb) {
  cb->vocab = cb->base.layout->shape.vocab_size;
  cb->decoder_rows = 1;
}

static void classifier_carve(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_heads *h = &cb->heads;
  const int64_t B = cb->cap.max_pieces;
  h->features = cuda_carve(base, used, (size_t)(B * cb->top) * cb->elem);
  h->d_features = cuda_carve(base, used, (size_t)(B * cb->top) * cb->elem);
  h->class_logits = cuda_carve(base, used, (size_t)(B * h->n_classes) * sizeof(float));
  h->class_grad16 = cb->storage == RNND_DTYPE_F32 ? NULL
                                                  : cuda_carve(base, used, (size_t)(B * h->n_classes) * cb->elem);
  h->final_fwd = cuda_carve(base, used, (size_t)B * 3 * sizeof(int32_t)); /* fwd rows, bwd rows, labels */
  h->final_bwd = h->final_fwd + B;
  h->labels = h->final_bwd + B;
  h->correct = cuda_carve(base, used, (size_t)B * sizeof(int32_t));
}

static void classifier_carve_host(cuda_backend *cb, uintptr_t base, size_t *used) {
  const int64_t B = cb->cap.max_pieces;
  cb->heads.host_final = cuda_carve(base, used, (size_t)B * 3 * sizeof(int32_t));
  cb->heads.host_correct = cuda_carve(base, used, (size_t)B * sizeof(int32_t));
}

static void classifier_begin(cuda_backend *cb) {
  memset(&cb->heads.stats, 0, sizeof cb->heads.stats);
  cb->heads.pieces_scored = 0;
}

/* The stream has run (the caller synchronised it): the last view's flags. */
static void classifier_finish(cuda_backend *cb) {
  cuda_heads *h = &cb->heads;
  for (int k = 0; k < h->pieces_scored; k++) h->stats.correct += h->host_correct[k];
  h->pieces_scored = 0;
}

/* Pieces whose final step lies in this batch or segment view: the row of
 * forward's last step, of backward's first (row i of step 0; bidirectional
 * models never run by segments), and the label. Returns their count. */
static int final_rows(cuda_backend *cb, const rnnd_batch *v) {
  const int B = cb->cap.max_pieces;
  int32_t *fwd = cb->heads.host_final, *bwd = fwd + B, *labels = bwd + B;
  const int t0 = v->positions[0];
  int n = 0;
  for (int i = 0; i < v->n_pieces; i++) {
    int t = v->pieces[i].length - 1 - t0;
    if (t < 0 || t >= v->n_steps) continue;
    fwd[n] = (int32_t)(v->step_offsets[t] + i);
    bwd[n] = i;
    labels[n] = v->labels[i];
    n++;
  }
  return n;
}

/* The classifier on the pieces ending in this view, from the top layer
 * before dropout (what nn.GRU/nn.LSTM return as h_n); dL/d(top output)
 * scattered back into dy (zero elsewhere). */
static void classifier_pass(cuda_backend *cb, const rnnd_batch *v, float weight, void *dy) {
  cuda_heads *h = &cb->heads;
  const rnnd_layout *l = cb->base.layout;
  const int B = cb->cap.max_pieces, C = h->n_classes;
  if (weight > 0.0f) CUDA_CHECK(cudaMemsetAsync(dy, 0, (size_t)(v->n_tokens * cb->top) * cb->elem, cb->stream));
  /* the previous view's flags must be in before the pinned rows are rewritten */
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  classifier_finish(cb);
  int n = final_rows(cb, v);
  h->pieces_scored = n;
  if (n > 0) {
    CUDA_CHECK(cudaMemcpyAsync(h->final_fwd, h->host_final, (size_t)B * 3 * sizeof(int32_t), cudaMemcpyHostToDevice,
                               cb->stream));
    cuda_gather_final(h->features, cb->y[cb->layers - 1], cb->storage, h->final_fwd, h->final_bwd, n, cb->hidden,
                      cb->directions, cb->stream);
    const cuda_linear head = {l->classifier_weight, l->classifier_bias, C, cb->top, h->class_logits,
                              h->class_grad16};
    linear_logits(cb, &head, h->features, n);
    const void *bias = params16_at(cb, l->classifier_bias);
    cuda_count_correct(h->class_logits, bias, cb->storage, h->labels, n, C, h->correct, cb->stream);
    CUDA_CHECK(cudaMemcpyAsync(h->host_correct, h->correct, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               cb->stream));
    cuda_softmax_xent(h->class_logits, weight > 0.0f ? h->class_grad16 : NULL, cb->storage, bias, h->labels, n, C,
                      weight, cb->row_nll, cb->stream);
    cuda_sum_f64(cb->row_nll, n, cb->nll_part, cb->stream);
    cuda_add_f64(cb->nll_sum, cb->nll_part, cb->stream);
    if (weight > 0.0f) {
      linear_backward(cb, &head, h->features, h->d_features, n);
      cuda_scatter_final(dy, h->d_features, cb->storage, h->final_fwd, h->final_bwd, n, cb->hidden, cb->directions,
                         cb->stream);
    }
  }
  if (weight > 0.0f) cuda_gradient_final(cb, l->classifier_weight);
}

/* --- the tables --------------------------------------------------------------- */

static const cuda_head_ops softmax_head = {
    .name = "softmax",
    .size = softmax_size,
    .carve = NULL,
    .carve_host = NULL,
    .carve_staging = NULL,
    .upload = NULL,
    .begin = NULL,
    .pass = softmax_pass,
    .finish = NULL,
    .reads_before_dropout = 0,
};

static const cuda_head_ops classifier_head = {
    .name = "classifier",
    .size = classifier_size,
    .carve = classifier_carve,
    .carve_host = classifier_carve_host,
    .carve_staging = NULL,
    .upload = NULL, /* the labels go up with the final rows, in the pass */
    .begin = classifier_begin,
    .pass = classifier_pass,
    .finish = classifier_finish,
    .reads_before_dropout = 1,
};

static const cuda_head_ops forecaster_head = {
    .name = "forecaster",
    .size = forecaster_size,
    .carve = forecaster_carve,
    .carve_host = forecaster_carve_host,
    .carve_staging = forecaster_carve_staging,
    .upload = forecaster_upload,
    .begin = forecaster_begin,
    .pass = forecaster_pass,
    .finish = forecaster_finish,
    .reads_before_dropout = 0,
};

const cuda_head_ops *cuda_head_for(const rnnd_model_shape *s) {
  if (s->task == RNND_TASK_CLASSIFY) return &classifier_head;
  if (s->task == RNND_TASK_REGRESS) return &forecaster_head;
  return &softmax_head; /* cuda_backend_supports refuses the adaptive decoder */
}

/* --- the first layer's input ------------------------------------------------------ */

static void embedding_forward(cuda_backend *cb, int64_t rows, const rnnd_dropout *dr) {
  cuda_gather_embedding(cb->x[0], cb->storage, params16_at(cb, cb->base.layout->embedding_weight), cb->inputs, rows,
                        cb->embed, dr ? dr->seed : 0, dr ? dr->step : 0, dr ? dr->p_embedding : 0.0f, cb->stream);
}

static void embedding_backward(cuda_backend *cb, const void *dx0, int64_t rows, const rnnd_dropout *dr) {
  cuda_scatter_add_embedding(cb->grads + cb->base.layout->embedding_weight, dx0, cb->storage, cb->inputs, rows,
                             cb->embed, dr ? dr->seed : 0, dr ? dr->step : 0, dr ? dr->p_embedding : 0.0f, cb->stream);
}

/* x0[rows, E] = bias rows, then += values W_in^T (column-major: [E x rows]
 * += W_in-as-stored(T) [E x F] * values [F x rows]). */
static void projection_forward(cuda_backend *cb, int64_t rows, const rnnd_dropout *dr) {
  (void)dr;
  const rnnd_layout *l = cb->base.layout;
  const int F = cb->heads.n_features, E = cb->embed;
  const float one = 1.0f;
  cuda_fill_rows(cb->x[0], cb->storage, params16_at(cb, l->input_bias), rows, E, cb->stream);
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, E, (int)rows, F, &one, params16_at(cb, l->input_weight),
                            cb->blas_type, F, cb->heads.series16, cb->blas_type, F, &one, cb->x[0], cb->blas_type, E,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* W_in grad [E x F] (column-major [F x E]) += values [F x rows] dx0^T;
 * bias grad += column sums of dx0. */
static void projection_backward(cuda_backend *cb, const void *dx0, int64_t rows, const rnnd_dropout *dr) {
  (void)dr;
  const rnnd_layout *l = cb->base.layout;
  const int F = cb->heads.n_features, E = cb->embed;
  const float one = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_T, F, E, (int)rows, &one, cb->heads.series16,
                            cb->blas_type, F, dx0, cb->blas_type, E, &one, cb->grads + l->input_weight, CUDA_R_32F, F,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  cuda_add_column_sums(cb->grads + l->input_bias, dx0, cb->storage, rows, E, cb->stream);
}

static const cuda_input_ops embedding_input = {
    .name = "embedding", .forward = embedding_forward, .backward = embedding_backward};
static const cuda_input_ops projection_input = {
    .name = "input projection", .forward = projection_forward, .backward = projection_backward};

const cuda_input_ops *cuda_input_for(const rnnd_model_shape *s) {
  return s->task == RNND_TASK_REGRESS ? &projection_input : &embedding_input;
}
