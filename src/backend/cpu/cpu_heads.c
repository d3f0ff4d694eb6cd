/* cpu_heads.c — the CPU backend's heads other than the full softmax: the
 * adaptive softmax (torch.nn.AdaptiveLogSoftmaxWithLoss), the classifier
 * on each piece's final hidden state (model.task = classify) and the
 * next-step forecaster (model.task = regress). Buffers are cpu_backend.c's
 * (cpu_internal.h). */
#include <math.h>
#include <string.h>

#include "cpu_blas.h"
#include "cpu_internal.h"
#include "cpu_math.h"
#include "rnnd/common.h"

/* --- adaptive softmax (torch.nn.AdaptiveLogSoftmaxWithLoss) -------------- */

/* Tail cluster of an id, or -1 for the head's shortlist. */
static int cluster_of(const rnnd_model_shape *s, int id) {
  for (int c = s->n_clusters - 1; c >= 0; c--)
    if (id >= s->cutoffs[c]) return c;
  return -1;
}

/* Softmax of a row in place; with weight > 0 the row becomes
 * weight * (softmax - onehot(target)). Returns the target's NLL. */
static double softmax_and_gradient(float *row, int n, int target, float weight) {
  float sum;
  double nll = softmax_row(row, n, target, &sum);
  if (weight > 0.0f) {
    float scale = weight / sum;
    for (int j = 0; j < n; j++) row[j] *= scale;
    row[target] -= weight;
  }
  return nll;
}

/* One tail cluster over the rows of a block whose target falls in it:
 * projection, output layer, log-softmax, and with grads their gradients and
 * dL/dy added into dy. Returns the NLL sum of those rows' tail terms. */
static double adaptive_tail(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                            const int32_t *targets, int rows, int c, float weight) {
  const rnnd_layout *l = cb->base.layout;
  const rnnd_model_shape *s = &l->shape;
  const int top = cb->top, h = s->tail_hidden[c], lo = s->cutoffs[c], size = s->cutoffs[c + 1] - lo;
  int n = 0;
  for (int i = 0; i < rows; i++)
    if (targets[i] >= lo && targets[i] < lo + size) cb->tail_rows[n++] = i;
  if (n == 0) return 0.0;
  for (int k = 0; k < n; k++)
    memcpy(cb->tail_y + (int64_t)k * top, y + (int64_t)cb->tail_rows[k] * top, (size_t)top * sizeof(float));
  const float *w1 = params + l->tail_proj[c], *w2 = params + l->tail_out[c];
  gemm_nt_par(n, h, top, cb->tail_y, top, w1, top, cb->tail_p, h, 0.0f);
  gemm_nt_par(n, size, h, cb->tail_p, h, w2, h, cb->tail_logits, size, 0.0f);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < n; k++)
    cb->row_nll[k] = softmax_and_gradient(cb->tail_logits + (int64_t)k * size, size,
                                          targets[cb->tail_rows[k]] - lo, grads ? weight : 0.0f);
  double nll = 0.0;
  for (int k = 0; k < n; k++) nll += cb->row_nll[k];
  if (!grads) return nll;
  gemm_tn_par(size, h, n, cb->tail_logits, size, cb->tail_p, h, grads + l->tail_out[c], h, 1.0f);
  gemm_nn_par(n, h, size, cb->tail_logits, size, w2, h, cb->tail_dp, h, 0.0f);
  gemm_tn_par(h, top, n, cb->tail_dp, h, cb->tail_y, top, grads + l->tail_proj[c], top, 1.0f);
  gemm_nn_par(n, top, h, cb->tail_dp, h, w1, top, cb->tail_dy, top, 0.0f);
  for (int k = 0; k < n; k++) {
    float *d = dy + (int64_t)cb->tail_rows[k] * top;
    const float *src = cb->tail_dy + (int64_t)k * top;
    for (int j = 0; j < top; j++) d[j] += src[j];
  }
  return nll;
}

/* The adaptive decoder over one block of rows: the head's softmax over the
 * shortlist and one entry per cluster, then each cluster's tail. With grads
 * (training) also the gradients and dL/dy into dy. */
static double adaptive_block(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                             const int32_t *targets, int rows, float weight) {
  const rnnd_layout *l = cb->base.layout;
  const rnnd_model_shape *s = &l->shape;
  const int top = cb->top, head = cb->head_size;
  gemm_nt_par(rows, head, top, y, top, params + l->head_weight, top, cb->logits, head, 0.0f);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    int c = cluster_of(s, targets[i]);
    cb->row_nll[i] = softmax_and_gradient(cb->logits + (int64_t)i * head, head,
                                          c < 0 ? targets[i] : s->cutoffs[0] + c, grads ? weight : 0.0f);
  }
  double nll = 0.0;
  for (int i = 0; i < rows; i++) nll += cb->row_nll[i];
  if (grads) {
    gemm_tn_par(head, top, rows, cb->logits, head, y, top, grads + l->head_weight, top, 1.0f);
    gemm_nn_par(rows, top, head, cb->logits, head, params + l->head_weight, top, dy, top, 0.0f);
  }
  for (int c = 0; c < s->n_clusters; c++) nll += adaptive_tail(cb, params, grads, y, dy, targets, rows, c, weight);
  return nll;
}

/* Whole batch through the adaptive decoder (grads NULL: evaluation). */
double cpu_adaptive_decoder(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                            const rnnd_batch *b, float weight) {
  double nll = 0.0;
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    nll += adaptive_block(cb, params, grads, y + r0 * cb->top, dy ? dy + r0 * cb->top : NULL, b->targets + r0, rows,
                          weight);
  }
  return nll;
}

/* --- forecasting head (model.task = regress) ----------------------------- */

/* prediction = y W^T + b for every row; the loss of a scored row is its
 * mean squared error over the features (normalised units). With grads:
 * d(loss)/d(prediction) = weight * 2 (prediction - target) / F on scored
 * rows (0 elsewhere), the head's gradients, and dL/dy into dy. Errors in
 * original units (times the feature's std) go to cb->stats. */
double cpu_regression_head(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                           const rnnd_batch *b, float weight) {
  const rnnd_layout *l = cb->base.layout;
  const int F = cb->n_features, top = cb->top;
  const int64_t T = b->n_tokens;
  float *pred = cb->prediction;
  fill_rows(pred, T, F, params + l->decoder_bias);
  gemm_nt_par((int)T, F, top, y, top, params + l->decoder_weight, top, pred, F, 1.0f);
  double loss = 0.0;
  for (int64_t r = 0; r < T; r++) {
    float *p = pred + r * F;
    const float *target = b->series_target + r * F;
    double row = 0.0;
    for (int f = 0; f < F; f++) {
      float e = p[f] - target[f];
      if (b->scored[r]) {
        double original = (double)e * b->series_std[f];
        row += (double)e * e;
        cb->stats.sq_error += original * original;
        cb->stats.abs_error += fabs(original);
      }
      p[f] = b->scored[r] ? weight * 2.0f * e / (float)F : 0.0f;
    }
    cb->stats.values += b->scored[r] ? F : 0;
    loss += row / F;
  }
  if (!grads) return loss;
  gemm_tn_par(F, top, (int)T, pred, F, y, top, grads + l->decoder_weight, top, 1.0f);
  add_column_sums(grads + l->decoder_bias, pred, T, F);
  gemm_nn_par((int)T, top, F, pred, F, params + l->decoder_weight, top, dy, top, 0.0f);
  return loss;
}

/* --- classifier (model.task = classify) ---------------------------------- */

/* The top layer's output before dropout: what nn.GRU/nn.LSTM return as h_n. */
static const float *top_output(const cpu_backend *cb) {
  return cb->storage == RNND_DTYPE_F32 ? cb->layer_out[cb->layers - 1] : cb->layer_out[0];
}

/* Rows (in the view) of piece i's final hidden state, or -1 if it is not
 * in this view: the forward direction's last step, the backward
 * direction's first step (row i of step 0, in a view that starts at 0). */
static int64_t final_row(const rnnd_batch *v, int i) {
  int64_t t = (int64_t)v->pieces[i].length - 1 - v->positions[0];
  return t >= 0 && t < v->n_steps ? v->step_offsets[t] + i : -1;
}

/* Forward (and with grads, backward) of the classifier over the pieces
 * whose final step lies in the view. d(loss)/d(top output) goes to dy
 * (zero elsewhere). Returns the NLL sum of those pieces. */
double cpu_classifier(cpu_backend *cb, const float *params, float *grads, const rnnd_batch *v, float *dy,
                      float weight) {
  const rnnd_layout *l = cb->base.layout;
  const int top = cb->top, H = cb->hidden, C = cb->n_classes;
  const float *y = top_output(cb);
  int32_t *who = cb->class_pieces; /* the pieces whose final step is here, in order */
  int n = 0;
  for (int i = 0; i < v->n_pieces; i++) {
    int64_t r = final_row(v, i);
    if (r < 0) continue;
    float *f = cb->features + (int64_t)n * top;
    memcpy(f, y + r * top, (size_t)H * sizeof(float));
    if (cb->directions == 2) memcpy(f + H, y + (int64_t)i * top + H, (size_t)H * sizeof(float));
    who[n++] = i;
  }
  if (dy) memset(dy, 0, (size_t)(v->n_tokens * top) * sizeof(float));
  if (n == 0) return 0.0;
  float *logits = cb->class_logits;
  fill_rows(logits, n, C, params + l->classifier_bias);
  gemm_nt(n, C, top, cb->features, top, params + l->classifier_weight, top, logits, C, 1.0f);
  double nll = 0.0;
  for (int k = 0; k < n; k++) {
    float *row = logits + (int64_t)k * C;
    int label = v->labels[who[k]];
    cb->stats.correct += row_argmax(row, C) == label;
    nll += softmax_and_gradient(row, C, label, grads ? weight : 0.0f);
  }
  if (!grads) return nll;
  gemm_tn(C, top, n, logits, C, cb->features, top, grads + l->classifier_weight, top, 1.0f);
  add_column_sums(grads + l->classifier_bias, logits, n, C);
  gemm_nn(n, top, C, logits, C, params + l->classifier_weight, top, cb->d_features, top, 0.0f);
  for (int k = 0; k < n; k++) {
    int i = who[k];
    const float *d = cb->d_features + (int64_t)k * top;
    memcpy(dy + final_row(v, i) * top, d, (size_t)H * sizeof(float));
    if (cb->directions == 2) memcpy(dy + (int64_t)i * top + H, d + H, (size_t)H * sizeof(float));
  }
  return nll;
}
