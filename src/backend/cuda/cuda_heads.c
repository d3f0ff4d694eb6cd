/* cuda_heads.c — the CUDA backend's task heads (model.task = classify and
 * regress) and the regress input projection, computing what the CPU
 * backend's classifier, regression_head, layer_input and
 * add_embedding_gradient compute:
 *  - classify: each piece's final hidden state of the top layer, before
 *    dropout (forward's last step, backward's first), -> linear -> softmax
 *    cross-entropy against the piece's label; accuracy counted;
 *  - regress: x0 = values W_in^T + b_in in place of the embedding, and a
 *    linear head on every row with the mean squared error over the
 *    features of the scored rows; errors in original units counted.
 * The buffers are carved out of the backend's arena and pinned area (see
 * cuda_backend.c); nothing here allocates. */
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"

static const void *params16_at(const cuda_backend *cb, size_t offset) {
  return (const char *)cb->params16 + offset * cb->elem;
}

void cuda_heads_carve(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_heads *h = &cb->heads;
  const int64_t B = cb->cap.max_pieces, T = cb->held_tokens, F = h->n_features;
  if (h->classify) {
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
  if (h->regress) {
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
}

void cuda_heads_carve_host(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_heads *h = &cb->heads;
  const int64_t B = cb->cap.max_pieces;
  if (h->classify) {
    h->host_final = cuda_carve(base, used, (size_t)B * 3 * sizeof(int32_t));
    h->host_correct = cuda_carve(base, used, (size_t)B * sizeof(int32_t));
  }
  if (h->regress) h->host_errors = cuda_carve(base, used, 2 * sizeof(double));
}

void cuda_heads_carve_staging(cuda_backend *cb, uintptr_t base, size_t *used, cuda_staging *set) {
  const int64_t T = cb->held_tokens, F = cb->heads.n_features;
  if (!cb->heads.regress) return;
  set->series = cuda_carve(base, used, (size_t)(2 * T * F + F) * sizeof(float));
  set->scored = cuda_carve(base, used, (size_t)T);
}

void cuda_heads_begin(cuda_backend *cb) {
  cuda_heads *h = &cb->heads;
  memset(&h->stats, 0, sizeof h->stats);
  h->pieces_scored = 0;
  if (h->regress) CUDA_CHECK(cudaMemsetAsync(h->error_sums, 0, 2 * sizeof(double), cb->stream));
}

/* The stream must have run (the caller synchronised it). */
void cuda_heads_finish(cuda_backend *cb) {
  cuda_heads *h = &cb->heads;
  for (int k = 0; k < h->pieces_scored; k++) h->stats.correct += h->host_correct[k];
  h->pieces_scored = 0;
  if (h->regress) {
    h->stats.sq_error = h->host_errors[0];
    h->stats.abs_error = h->host_errors[1];
  }
}

/* --- regress: series rows and the input projection ----------------------- */

void cuda_heads_upload(cuda_backend *cb, const rnnd_batch *b, cuda_staging *set) {
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

/* x0[rows, E] = bias rows, then += values W_in^T (column-major: [E x rows]
 * += W_in-as-stored(T) [E x F] * values [F x rows]). */
void cuda_input_projection(cuda_backend *cb, int64_t rows) {
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
void cuda_input_projection_backward(cuda_backend *cb, const void *dx0, int64_t rows) {
  const rnnd_layout *l = cb->base.layout;
  const int F = cb->heads.n_features, E = cb->embed;
  const float one = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_T, F, E, (int)rows, &one, cb->heads.series16,
                            cb->blas_type, F, dx0, cb->blas_type, E, &one, cb->grads + l->input_weight, CUDA_R_32F, F,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  cuda_add_column_sums(cb->grads + l->input_bias, dx0, cb->storage, rows, E, cb->stream);
}

/* Every row through the linear head and the squared error, a block of
 * rows at a time; the loss is added into nll_sum, the errors into
 * error_sums. */
static void regression_pass(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy) {
  cuda_heads *h = &cb->heads;
  const rnnd_layout *l = cb->base.layout;
  const int F = h->n_features;
  const void *y = cb->x[cb->layers];
  const cuda_linear head = {l->decoder_weight, l->decoder_bias, F, cb->top, cb->logits, cb->dlogits16};
  for (int64_t r = 0; r < b->n_tokens; r++) h->stats.values += b->scored[r] ? F : 0;
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    const void *y_block = (const char *)y + (size_t)(r0 * cb->top) * cb->elem;
    cuda_linear_logits(cb, &head, y_block, rows);
    cuda_mse(cb->logits, weight > 0.0f ? cb->dlogits16 : NULL, cb->storage, params16_at(cb, l->decoder_bias),
             h->series_target + r0 * F, h->scored + r0, h->std, rows, F, weight, cb->row_nll + r0, h->row_sq + r0,
             h->row_abs + r0, cb->stream);
    if (weight > 0.0f) cuda_linear_backward(cb, &head, y_block, (char *)dy + (size_t)(r0 * cb->top) * cb->elem, rows);
  }
  cuda_sum_f64(cb->row_nll, b->n_tokens, cb->nll_part, cb->stream);
  cuda_add_f64(cb->nll_sum, cb->nll_part, cb->stream);
  for (int k = 0; k < 2; k++) {
    cuda_sum_f64(k ? h->row_abs : h->row_sq, b->n_tokens, h->error_sums + 2 + k, cb->stream);
    cuda_add_f64(h->error_sums + k, h->error_sums + 2 + k, cb->stream);
  }
  CUDA_CHECK(cudaMemcpyAsync(h->host_errors, h->error_sums, 2 * sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
}

/* --- classify ------------------------------------------------------------ */

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

static void classifier_pass(cuda_backend *cb, const rnnd_batch *v, float weight, void *dy) {
  cuda_heads *h = &cb->heads;
  const rnnd_layout *l = cb->base.layout;
  const int B = cb->cap.max_pieces, C = h->n_classes;
  if (dy) CUDA_CHECK(cudaMemsetAsync(dy, 0, (size_t)(v->n_tokens * cb->top) * cb->elem, cb->stream));
  /* the previous view's flags must be in before the pinned rows are rewritten */
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  for (int k = 0; k < h->pieces_scored; k++) h->stats.correct += h->host_correct[k];
  int n = final_rows(cb, v);
  h->pieces_scored = n;
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(h->final_fwd, h->host_final, (size_t)B * 3 * sizeof(int32_t), cudaMemcpyHostToDevice,
                             cb->stream));
  const void *top_output = cb->y[cb->layers - 1]; /* before dropout, what nn.GRU/nn.LSTM return as h_n */
  cuda_gather_final(h->features, top_output, cb->storage, h->final_fwd, h->final_bwd, n, cb->hidden, cb->directions,
                    cb->stream);
  const cuda_linear head = {l->classifier_weight, l->classifier_bias, C, cb->top, h->class_logits, h->class_grad16};
  cuda_linear_logits(cb, &head, h->features, n);
  const void *bias = params16_at(cb, l->classifier_bias);
  cuda_count_correct(h->class_logits, bias, cb->storage, h->labels, n, C, h->correct, cb->stream);
  CUDA_CHECK(cudaMemcpyAsync(h->host_correct, h->correct, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                             cb->stream));
  cuda_softmax_xent(h->class_logits, weight > 0.0f ? h->class_grad16 : NULL, cb->storage, bias, h->labels, n, C,
                    weight, cb->row_nll, cb->stream);
  cuda_sum_f64(cb->row_nll, n, cb->nll_part, cb->stream);
  cuda_add_f64(cb->nll_sum, cb->nll_part, cb->stream);
  if (weight <= 0.0f) return;
  cuda_linear_backward(cb, &head, h->features, h->d_features, n);
  cuda_scatter_final(dy, h->d_features, cb->storage, h->final_fwd, h->final_bwd, n, cb->hidden, cb->directions,
                     cb->stream);
}

void cuda_heads_pass(cuda_backend *cb, const rnnd_batch *b, float weight, void *dy) {
  if (cb->heads.classify) classifier_pass(cb, b, weight, weight > 0.0f ? dy : NULL);
  else regression_pass(cb, b, weight, dy);
  if (weight > 0.0f) {
    const rnnd_layout *l = cb->base.layout;
    cuda_gradient_final(cb, cb->heads.classify ? l->classifier_weight : l->decoder_weight);
  }
}
