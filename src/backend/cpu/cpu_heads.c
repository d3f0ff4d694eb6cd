/* cpu_heads.c — what the CPU backend puts on its layers, as the tables of
 * cpu_internal.h: the heads (the full softmax decoder with fused
 * cross-entropy, the adaptive softmax as torch.nn.AdaptiveLogSoftmaxWithLoss,
 * the classifier on each piece's final hidden state for model.task =
 * classify, the next-step forecaster for model.task = regress) and the first
 * layer's input (the embedding, or the forecaster's input projection). Each
 * head takes its buffers with cpu_take; cpu_backend.c frees them. */
#include <math.h>
#include <string.h>

#include "cpu_blas.h"
#include "cpu_internal.h"
#include "cpu_math.h"
#include "rnnd/common.h"
#include "rnnd/rng.h"

/* Row (in the view) of piece i's last step, or -1 if it is not in this
 * view: where the forward direction's final hidden state is (the backward
 * direction's is row i of step 0, in a view that starts at 0). */
static int64_t final_row(const rnnd_batch *v, int i) {
  int64_t t = (int64_t)v->pieces[i].length - 1 - v->positions[0];
  return t >= 0 && t < v->n_steps ? v->step_offsets[t] + i : -1;
}

/* --- the full softmax decoder ---------------------------------------------- */

/* Logits without the bias, which softmax_chunk adds while the row is hot;
 * rows from r0 of the decoder input (bf16 products: its bf16 copy). */
static void decoder_logits(const cpu_backend *cb, const float *params, const float *y, int64_t r0, int rows) {
  const size_t w = cb->base.layout->decoder_weight;
  if (cb->dnnl)
    bf16_gemm_nt(cb->dnnl, rows, cb->vocab, cb->top, cb->decoder_input16 + r0 * cb->top, cb->top, cb->weights16 + w,
                 cb->top, cb->logits, cb->vocab, 0.0f);
  else
    gemm_nt_par(rows, cb->vocab, cb->top, y + r0 * cb->top, cb->top, params + w, cb->top, cb->logits, cb->vocab, 0.0f);
}

/* The block's gradient into the decoder's weight and dL/dy (bf16 products:
 * from the gradient rows' bf16 copy). */
static void decoder_backward(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy, int64_t r0,
                             int rows) {
  const int V = cb->vocab, top = cb->top;
  const size_t w = cb->base.layout->decoder_weight;
  if (cb->dnnl) {
    bf16_gemm_tn(cb->dnnl, V, top, rows, cb->dlogits16, V, cb->decoder_input16 + r0 * top, top, grads + w, top, 1.0f);
    bf16_gemm_nn(cb->dnnl, rows, top, V, cb->dlogits16, V, cb->weights16 + w, top, dy + r0 * top, top, 0.0f);
    return;
  }
  gemm_tn_par(V, top, rows, cb->logits, V, y + r0 * top, top, grads + w, top, 1.0f);
  gemm_nn_par(rows, top, V, cb->logits, V, params + w, top, dy + r0 * top, top, 0.0f);
}

/* The largest of row + bias (16 fixed lanes, as row_max); the row is only
 * read. */
static float biased_max(const float *row, const float *bias, int n) {
  float lane[16];
  for (int k = 0; k < 16; k++) lane[k] = row[0] + bias[0];
  int j = 0;
  for (; j + 16 <= n; j += 16)
    RNND_LANE_LOOP for (int k = 0; k < 16; k++) {
      float v = row[j + k] + bias[j + k];
      lane[k] = v > lane[k] ? v : lane[k];
    }
  float max = lane[0];
  for (int k = 1; k < 16; k++) max = lane[k] > max ? lane[k] : max;
  for (; j < n; j++) {
    float v = row[j] + bias[j];
    max = v > max ? v : max;
  }
  return max;
}

/* e = exp(row + bias - max) (e may be the row itself); returns its sum (16
 * fixed lanes, as row_sum). */
static float exp_and_sum(const float *row, const float *bias, float *e, int n, float max) {
  float lane[16] = {0};
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; k++) {
      float v = fast_expf((row[j + k] + bias[j + k]) - max);
      e[j + k] = v;
      lane[k] += v;
    }
  float sum = 0.0f;
  for (int k = 0; k < 16; k++) sum += lane[k];
  for (; j < n; j++) {
    e[j] = fast_expf((row[j] + bias[j]) - max);
    sum += e[j];
  }
  return sum;
}

/* The gradient g = e * scale over [begin, end), added into the bias partial
 * and written where the decoder's backward products read it: in place over
 * e (fp32 products) or rounded into g16 (bf16 products). */
static void scale_and_add(float *e, int begin, int end, float scale, float *bias_partial, uint16_t *g16) {
  if (g16) {
    for (int j = begin; j < end; j++) {
      float g = e[j] * scale;
      bias_partial[j] += g;
      g16[j] = rnnd_f32_to_bf16(g);
    }
    return;
  }
  for (int j = begin; j < end; j++) {
    float g = e[j] * scale;
    e[j] = g;
    bias_partial[j] += g;
  }
}

/* One chunk of softmax rows. Training turns each row into
 * weight * (softmax - onehot(target)), the gradient of the loss, and adds
 * the chunk's rows into its own bias-gradient partial while they are in
 * cache. The passes over a row are fused, each value computed as the
 * separate passes did (softmax_row's order), so results are unchanged.
 * Where nothing reads the fp32 gradient rows afterwards (evaluation, and
 * bf16 products, which read their bf16 copy), the exponentials go to the
 * chunk's own row `e` and the logits are only read: the block, larger than
 * the caches, is not written back to memory. */
static void softmax_chunk(cpu_backend *cb, const float *bias, const int32_t *targets, int first, int rows,
                          float weight, float *bias_partial, float *e) {
  const int V = cb->vocab;
  const int in_place = weight > 0.0f && !cb->dlogits16;
  for (int i = first; i < first + rows; i++) {
    float *row = cb->logits + (int64_t)i * V, *exps = in_place ? row : e;
    const int target = targets[i];
    float max = biased_max(row, bias, V), target_logit = row[target] + bias[target];
    float sum = exp_and_sum(row, bias, exps, V, max);
    cb->row_nll[i] = (double)logf(sum) + (double)max - (double)target_logit;
    if (weight <= 0.0f) continue;
    float scale = weight / sum, g_target = exps[target] * scale - weight;
    uint16_t *g16 = cb->dlogits16 ? cb->dlogits16 + (int64_t)i * V : NULL;
    scale_and_add(exps, 0, target, scale, bias_partial, g16);
    bias_partial[target] += g_target;
    if (g16) g16[target] = rnnd_f32_to_bf16(g_target);
    else exps[target] = g_target;
    scale_and_add(exps, target + 1, V, scale, bias_partial, g16);
  }
}

/* Softmax (and, with weight > 0, its gradient) of a block of logits rows.
 * Chunks of rows are fixed, and their losses and bias partials are summed in
 * chunk order, so the results do not depend on the thread count. */
static double softmax_block(cpu_backend *cb, const float *bias, float *gbias, const int32_t *targets, int rows,
                            float weight) {
  const int V = cb->vocab, chunks = (rows + SOFTMAX_CHUNK_ROWS - 1) / SOFTMAX_CHUNK_ROWS;
  if (weight > 0.0f) memset(cb->bias_partials, 0, (size_t)chunks * V * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int c = 0; c < chunks; c++) {
    int first = c * SOFTMAX_CHUNK_ROWS, n = rows - first < SOFTMAX_CHUNK_ROWS ? rows - first : SOFTMAX_CHUNK_ROWS;
    softmax_chunk(cb, bias, targets, first, n, weight, cb->bias_partials + (int64_t)c * V,
                  cb->softmax_exps + (int64_t)c * V);
  }
  if (weight > 0.0f)
    for (int c = 0; c < chunks; c++)
      for (int j = 0; j < V; j++) gbias[j] += cb->bias_partials[(int64_t)c * V + j];
  double nll = 0.0;
  for (int i = 0; i < rows; i++) nll += cb->row_nll[i];
  return nll;
}

/* Decoder + softmax cross-entropy a block of rows at a time (the logits
 * never exist in full); with grads also its backward, dL/dy into dy. */
static double softmax_loss(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                           const rnnd_batch *b, float weight) {
  const rnnd_layout *l = cb->base.layout;
  double nll = 0.0;
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    decoder_logits(cb, params, y, r0, rows);
    nll += softmax_block(cb, params + l->decoder_bias, grads ? grads + l->decoder_bias : NULL, b->targets + r0, rows,
                         grads ? weight : 0.0f);
    if (grads) decoder_backward(cb, params, grads, y, dy, r0, rows);
  }
  return nll;
}

/* Inference: each piece's next-token log-probabilities after its last step. */
static void softmax_outputs(cpu_backend *cb, const float *params, const float *y, const rnnd_batch *b, float *out) {
  const rnnd_layout *l = cb->base.layout;
  const int V = cb->vocab, top = cb->top;
  for (int i = 0; i < b->n_pieces; i++) {
    int64_t r = final_row(b, i);
    if (r < 0) continue;
    float *row = out + (int64_t)i * V;
    memcpy(row, params + l->decoder_bias, (size_t)V * sizeof(float));
    gemv_nt(V, top, y + r * top, params + l->decoder_weight, top, row, 1.0f);
    log_softmax_row(row, V);
  }
}

/* Blocks of rows of logits: large enough that each GEMM amortises packing
 * the [vocab x top] weight, at most DECODER_BLOCK_FLOATS. */
static void allocate_softmax(cpu_backend *cb) {
  cb->decoder_rows = DECODER_BLOCK_FLOATS / cb->vocab;
  if (cb->decoder_rows < DECODER_MIN_ROWS) cb->decoder_rows = DECODER_MIN_ROWS;
  if (cb->decoder_rows > cb->rows) cb->decoder_rows = (int)cb->rows;
  const int chunks = (cb->decoder_rows + SOFTMAX_CHUNK_ROWS - 1) / SOFTMAX_CHUNK_ROWS;
  cb->logits = cpu_take(cb, cb->decoder_rows, cb->vocab, 0);
  cb->row_nll = RNND_ALLOC(double, cb->decoder_rows, "row losses");
  cb->bias_partials = cpu_take(cb, chunks, cb->vocab, 0);
  cb->softmax_exps = cpu_take(cb, chunks, cb->vocab, 0);
}

/* ... and with bf16 products the gradient rows' bf16 copy. */
static void allocate_full_softmax(cpu_backend *cb) {
  allocate_softmax(cb);
  if (cb->dnnl) cb->dlogits16 = cpu_take16(cb, cb->decoder_rows, cb->vocab, 0);
}

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
static double adaptive_loss(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                            const rnnd_batch *b, float weight) {
  double nll = 0.0;
  for (int64_t r0 = 0; r0 < b->n_tokens; r0 += cb->decoder_rows) {
    int rows = (int)(b->n_tokens - r0 < cb->decoder_rows ? b->n_tokens - r0 : cb->decoder_rows);
    nll += adaptive_block(cb, params, grads, y + r0 * cb->top, dy ? dy + r0 * cb->top : NULL, b->targets + r0, rows,
                          weight);
  }
  return nll;
}

/* Inference: the full distribution of each piece's next token, as
 * AdaptiveLogSoftmaxWithLoss.log_prob: the head's log-probabilities over
 * the shortlist, and for a word of tail cluster c its log-probability
 * within the cluster plus the head's for the cluster. */
static void adaptive_outputs(cpu_backend *cb, const float *params, const float *y, const rnnd_batch *b, float *out) {
  const rnnd_layout *l = cb->base.layout;
  const rnnd_model_shape *s = &l->shape;
  const int V = cb->vocab, top = cb->top, head = cb->head_size, shortlist = s->cutoffs[0];
  float *head_row = cb->logits;
  for (int i = 0; i < b->n_pieces; i++) {
    int64_t r = final_row(b, i);
    if (r < 0) continue;
    const float *yr = y + r * top;
    float *row = out + (int64_t)i * V;
    gemv_nt(head, top, yr, params + l->head_weight, top, head_row, 0.0f);
    log_softmax_row(head_row, head);
    memcpy(row, head_row, (size_t)shortlist * sizeof(float));
    for (int c = 0; c < s->n_clusters; c++) {
      const int h = s->tail_hidden[c], lo = s->cutoffs[c], size = s->cutoffs[c + 1] - lo;
      gemv_nt(h, top, yr, params + l->tail_proj[c], top, cb->tail_p, 0.0f);
      gemv_nt(size, h, cb->tail_p, params + l->tail_out[c], h, row + lo, 0.0f);
      log_softmax_row(row + lo, size);
      for (int j = 0; j < size; j++) row[lo + j] += head_row[shortlist + c];
    }
  }
}

/* --- forecasting head (model.task = regress) ----------------------------- */

/* prediction = y W^T + b for every row; the loss of a scored row is its
 * mean squared error over the features (normalised units). With grads:
 * d(loss)/d(prediction) = weight * 2 (prediction - target) / F on scored
 * rows (0 elsewhere), the head's gradients, and dL/dy into dy. Errors in
 * original units (times the feature's std) go to cb->stats. */
static double regression_loss(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
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

/* Inference: each piece's predicted next step (normalised units). */
static void forecaster_outputs(cpu_backend *cb, const float *params, const float *y, const rnnd_batch *b, float *out) {
  const rnnd_layout *l = cb->base.layout;
  const int F = cb->n_features, top = cb->top;
  for (int i = 0; i < b->n_pieces; i++) {
    int64_t r = final_row(b, i);
    if (r < 0) continue;
    float *row = out + (int64_t)i * F;
    memcpy(row, params + l->decoder_bias, (size_t)F * sizeof(float));
    gemv_nt(F, top, y + r * top, params + l->decoder_weight, top, row, 1.0f);
  }
}

/* --- classifier (model.task = classify) ---------------------------------- */

/* The top layer's output before dropout: what nn.GRU/nn.LSTM return as h_n. */
static const float *top_output(const cpu_backend *cb) {
  return cb->storage == RNND_DTYPE_F32 ? cb->layer_out[cb->layers - 1] : cb->layer_out[0];
}

/* The final hidden states of the pieces whose final step lies in view v
 * into cb->features, their places in v into cb->class_pieces; returns
 * how many. */
static int gather_final_states(cpu_backend *cb, const rnnd_batch *v) {
  const int top = cb->top, H = cb->hidden;
  const float *y = top_output(cb);
  int n = 0;
  for (int i = 0; i < v->n_pieces; i++) {
    int64_t r = final_row(v, i);
    if (r < 0) continue;
    float *f = cb->features + (int64_t)n * top;
    memcpy(f, y + r * top, (size_t)H * sizeof(float));
    if (cb->directions == 2) memcpy(f + H, y + (int64_t)i * top + H, (size_t)H * sizeof(float));
    cb->class_pieces[n++] = i;
  }
  return n;
}

/* Inference: each piece's class log-probabilities (y unused: the
 * classifier reads the final states). */
static void classifier_outputs(cpu_backend *cb, const float *params, const float *y, const rnnd_batch *b, float *out) {
  (void)y;
  const rnnd_layout *l = cb->base.layout;
  const int top = cb->top, C = cb->n_classes;
  int n = gather_final_states(cb, b);
  for (int k = 0; k < n; k++) {
    float *row = out + (int64_t)cb->class_pieces[k] * C;
    memcpy(row, params + l->classifier_bias, (size_t)C * sizeof(float));
    gemv_nt(C, top, cb->features + (int64_t)k * top, params + l->classifier_weight, top, row, 1.0f);
    log_softmax_row(row, C);
  }
}

/* Forward (and with grads, backward) of the classifier over the pieces
 * whose final step lies in the view, from the top layer before dropout (not
 * y, the decoder input). d(loss)/d(top output) goes to dy (zero elsewhere).
 * Returns the NLL sum of those pieces. */
static double classifier_loss(cpu_backend *cb, const float *params, float *grads, const float *decoder_input,
                              float *dy, const rnnd_batch *v, float weight) {
  (void)decoder_input;
  const rnnd_layout *l = cb->base.layout;
  const int top = cb->top, H = cb->hidden, C = cb->n_classes;
  const int32_t *who = cb->class_pieces;
  int n = gather_final_states(cb, v);
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

/* --- the heads' buffers ------------------------------------------------------ */

/* The adaptive decoder's per-cluster buffers, beside the softmax's (its
 * head shortlist uses `logits`). */
static void allocate_adaptive(cpu_backend *cb) {
  const rnnd_model_shape *s = &cb->base.layout->shape;
  allocate_softmax(cb);
  const int rows = cb->decoder_rows;
  cb->head_size = s->cutoffs[0] + s->n_clusters;
  for (int c = 0; c < s->n_clusters; c++) {
    int size = s->cutoffs[c + 1] - s->cutoffs[c];
    if (size > cb->widest_cluster) cb->widest_cluster = size;
    if (s->tail_hidden[c] > cb->widest_tail) cb->widest_tail = s->tail_hidden[c];
  }
  cb->tail_rows = RNND_ALLOC(int32_t, rows, "adaptive rows");
  cb->tail_y = cpu_take(cb, rows, cb->top, 0);
  cb->tail_dy = cpu_take(cb, rows, cb->top, 0);
  cb->tail_p = cpu_take(cb, rows, cb->widest_tail, 0);
  cb->tail_dp = cpu_take(cb, rows, cb->widest_tail, 0);
  cb->tail_logits = cpu_take(cb, rows, cb->widest_cluster, 0);
}

static void allocate_classifier(cpu_backend *cb) {
  const int64_t B = cb->cap.max_pieces;
  cb->features = cpu_take(cb, B, cb->top, 0);
  cb->d_features = cpu_take(cb, B, cb->top, 0);
  cb->class_logits = cpu_take(cb, B, cb->n_classes, 0);
  cb->class_pieces = RNND_ALLOC(int32_t, B, "classifier pieces");
}

static void allocate_forecaster(cpu_backend *cb) { cb->prediction = cpu_take(cb, cb->rows, cb->n_features, 0); }

/* The decoder weight (the embedding, with tied weights). */
static void softmax_bf16_weights(const cpu_backend *cb, size_t *offset, size_t *count) {
  *offset = cb->base.layout->decoder_weight;
  *count = (size_t)cb->vocab * (size_t)cb->top;
}

static const cpu_head_ops softmax_head = {.name = "softmax",
                                          .allocate = allocate_full_softmax,
                                          .loss = softmax_loss,
                                          .outputs = softmax_outputs,
                                          .reads_before_dropout = 0,
                                          .bf16_weights = softmax_bf16_weights};
static const cpu_head_ops adaptive_head = {.name = "adaptive softmax",
                                           .allocate = allocate_adaptive,
                                           .loss = adaptive_loss,
                                           .outputs = adaptive_outputs,
                                           .reads_before_dropout = 0,
                                           .bf16_weights = NULL}; /* fp32 products */
static const cpu_head_ops classifier_head = {.name = "classifier",
                                             .allocate = allocate_classifier,
                                             .loss = classifier_loss,
                                             .outputs = classifier_outputs,
                                             .reads_before_dropout = 1,
                                             .bf16_weights = NULL}; /* fp32 products */
static const cpu_head_ops forecaster_head = {.name = "forecaster",
                                             .allocate = allocate_forecaster,
                                             .loss = regression_loss,
                                             .outputs = forecaster_outputs,
                                             .reads_before_dropout = 0,
                                             .bf16_weights = NULL}; /* fp32 products */

const cpu_head_ops *cpu_head_for(const rnnd_model_shape *s) {
  if (s->task == RNND_TASK_CLASSIFY) return &classifier_head;
  if (s->task == RNND_TASK_REGRESS) return &forecaster_head;
  return s->decoder == RNND_DECODER_ADAPTIVE ? &adaptive_head : &softmax_head;
}

/* --- the first layer's input ------------------------------------------------- */

/* What embedding dropout multiplies word id's vector by in this batch:
 * 0 (dropped) or 1 / (1 - p); 1 without it. */
static float embedding_scale(const rnnd_dropout *dr, int32_t id) {
  if (!dr || dr->p_embedding <= 0.0f) return 1.0f;
  return rng_embedding_dropout_uniform(dr->seed, dr->step, id) < dr->p_embedding ? 0.0f
                                                                                : 1.0f / (1.0f - dr->p_embedding);
}

static void embedding_forward(const cpu_backend *cb, const float *params, const rnnd_batch *b, const rnnd_dropout *dr,
                              float *x0) {
  const float *embedding = params + cb->base.layout->embedding_weight;
  for (int64_t r = 0; r < b->n_tokens; r++) {
    const float *row = embedding + (int64_t)b->inputs[r] * cb->embed;
    const float s = embedding_scale(dr, b->inputs[r]);
    float *x = x0 + r * cb->embed;
    if (s == 1.0f) memcpy(x, row, (size_t)cb->embed * sizeof(float));
    else
      for (int j = 0; j < cb->embed; j++) x[j] = row[j] * s;
  }
}

/* Scatter-adds dL/d(embedded input) into the embedding rows it came from
 * (times their embedding-dropout scale). */
static void embedding_backward(const cpu_backend *cb, float *grads, const rnnd_batch *b, const rnnd_dropout *dr,
                               const float *d_x) {
  float *g_embedding = grads + cb->base.layout->embedding_weight;
  for (int64_t r = 0; r < b->n_tokens; r++) {
    float *g = g_embedding + (int64_t)b->inputs[r] * cb->embed;
    const float *src = d_x + r * cb->embed, s = embedding_scale(dr, b->inputs[r]);
    if (s == 1.0f)
      for (int j = 0; j < cb->embed; j++) g[j] += src[j];
    else
      for (int j = 0; j < cb->embed; j++) g[j] += src[j] * s;
  }
}

/* x0 = values W_in^T + b_in. */
static void projection_forward(const cpu_backend *cb, const float *params, const rnnd_batch *b, const rnnd_dropout *dr,
                               float *x0) {
  (void)dr;
  const rnnd_layout *l = cb->base.layout;
  fill_rows(x0, b->n_tokens, cb->embed, params + l->input_bias);
  gemm_nt_par((int)b->n_tokens, cb->embed, cb->n_features, b->series_in, cb->n_features, params + l->input_weight,
              cb->n_features, x0, cb->embed, 1.0f);
}

/* The input projection's weight and bias gradients. */
static void projection_backward(const cpu_backend *cb, float *grads, const rnnd_batch *b, const rnnd_dropout *dr,
                                const float *d_x) {
  (void)dr;
  const rnnd_layout *l = cb->base.layout;
  gemm_tn_par(cb->embed, cb->n_features, (int)b->n_tokens, d_x, cb->embed, b->series_in, cb->n_features,
              grads + l->input_weight, cb->n_features, 1.0f);
  add_column_sums(grads + l->input_bias, d_x, b->n_tokens, cb->embed);
}

static const cpu_input_ops embedding_input = {
    .name = "embedding", .forward = embedding_forward, .backward = embedding_backward};
static const cpu_input_ops projection_input = {
    .name = "input projection", .forward = projection_forward, .backward = projection_backward};

const cpu_input_ops *cpu_input_for(const rnnd_model_shape *s) {
  return s->task == RNND_TASK_REGRESS ? &projection_input : &embedding_input;
}
