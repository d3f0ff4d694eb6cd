/* cpu_backend.c — the CPU reference backend: embedding, stacked packed
 * GRU/LSTM layers (cpu_rnn.c), counter-keyed dropout, and a decoder whose
 * softmax cross-entropy forward and backward run fused, a block of rows at a
 * time, so the [tokens x vocab] logits never exist in full.
 *
 * With 16-bit storage (capacity.storage = fp16/bf16) each layer runs in fp32
 * in one layer's worth of fp32 workspace; what it keeps for backward (input,
 * output, gate values, GRU's W_hn h + b_hn or LSTM's cell state) is stored
 * in 16-bit buffers, and everything that crosses a layer boundary (its
 * input, output and their gradients) is rounded to the 16-bit format, so
 * the run overflows and underflows where a GPU run in that format would.
 *
 * What sits on the layers (the full or adaptive softmax decoder, the
 * classifier, the forecaster, and the first layer's input) is in
 * cpu_heads.c, called through the tables chosen at creation; the state
 * both files share is cpu_internal.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "cpu_internal.h"
#include "cpu_math.h"
#include "cpu_rnn.h"
#include "../schedule.h"
#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/half.h"
#include "rnnd/rng.h"

static int input_width(const cpu_backend *cb, int layer) { return layer == 0 ? cb->embed : cb->top; }

/* --- dropout ----------------------------------------------------------- */

/* dst = src * mask / (1 - p); dst may equal src. The mask bit of (row, unit)
 * depends only on (seed, step, slot, piece id, position, unit); locked
 * dropout keys every position as 0, one mask per piece. */
static void dropout_apply(float *dst, const float *src, int width, const rnnd_batch *b, const rnnd_dropout *dr,
                          int slot) {
  const float p = dr->p, scale = 1.0f / (1.0f - p);
  const uint64_t slot_key = rng_dropout_slot_key(dr->seed, dr->step, slot);
  /* every row's mask is its own: the rows split over the team */
#pragma omp parallel for schedule(static)
  for (int t = 0; t < b->n_steps; t++)
    for (int i = 0; i < b->batch_sizes[t]; i++) {
      int64_t row = b->step_offsets[t] + i;
      uint64_t row_key = rng_dropout_row_key(slot_key, b->pieces[i].id, dr->locked ? 0 : b->positions[row]);
      const float *in = src + row * width;
      float *o = dst + row * width;
      for (int j = 0; j < width; j++) {
        float u = rng_dropout_uniform(row_key, j);
        o[j] = u < p ? 0.0f : in[j] * scale;
      }
    }
}

/* --- forward ------------------------------------------------------------ */

static void direction_view(const cpu_backend *cb, const float *params, float *grads, int layer, int dir,
                           cpu_rnn_dir *d) {
  const rnnd_rnn_offsets *o = &cb->base.layout->rnn[layer][dir];
  *d = (cpu_rnn_dir){.cell = cb->base.layout->shape.cell, .hidden = cb->hidden, .input_size = o->input_size,
                     .reverse = dir, .w_ih = params + o->weight_ih, .w_hh = params + o->weight_hh,
                     .b_ih = params + o->bias_ih, .b_hh = params + o->bias_hh};
  if (cb->dnnl) {
    d->dnnl = cb->dnnl;
    d->w_ih16 = cb->weights16 + o->weight_ih;
    d->w_hh16 = cb->weights16 + o->weight_hh;
    d->x16 = cb->in16[layer];
    d->out16 = cb->out16[layer] + dir * cb->hidden;
  }
  if (grads) {
    d->gw_ih = grads + o->weight_ih;
    d->gw_hh = grads + o->weight_hh;
    d->gb_ih = grads + o->bias_ih;
    d->gb_hh = grads + o->bias_hh;
  }
  if (cb->hh_dropped) { /* weight dropout: the batch's dropped copy, and its own gradient */
    d->w_hh = cb->hh_copy + cb->hh_at[layer][dir];
    if (cb->dnnl) d->w_hh16 = cb->hh_copy16 + cb->hh_at[layer][dir];
    if (grads) d->gw_hh = cb->hh_grad + cb->hh_at[layer][dir];
  }
  const segment_link *k = &cb->link;
  if (dir == 0 && k->h0[layer]) {
    d->h0 = k->h0[layer];
    d->c0 = k->c0[layer];
    d->ld0 = k->ld0;
    d->dh0 = k->dh[layer];
    d->dc0 = k->dc[layer];
  }
  if (dir == 0 && k->last_rows) {
    d->dh_last = k->dh[layer];
    d->dc_last = k->dc[layer];
    d->last_rows = k->last_rows;
  }
}

/* Runs embedding and all layers; returns the decoder input. in[l] records
 * which buffer fed layer l (own buffer with dropout, else the output before). */
static const float *forward_layers(cpu_backend *cb, const float *params, const rnnd_batch *b,
                                   const rnnd_dropout *dr, const float **in) {
  float *x0 = cb->layer_in[0];
  cb->input->forward(cb, params, b, dr, x0);
  int use_dropout = dr && dr->p > 0.0f;
  if (use_dropout) dropout_apply(x0, x0, cb->embed, b, dr, 0);
  in[0] = x0;
  for (int l = 0; l < cb->layers; l++) {
    for (int dir = 0; dir < cb->directions; dir++) {
      cpu_rnn_dir d;
      direction_view(cb, params, NULL, l, dir, &d);
      cpu_rnn_forward(&d, b, in[l], input_width(cb, l), cb->layer_out[l] + dir * cb->hidden, cb->top,
                      &cb->saved[l][dir], &cb->scratch);
    }
    if (use_dropout) {
      dropout_apply(cb->layer_in[l + 1], cb->layer_out[l], cb->top, b, dr, l + 1);
      in[l + 1] = cb->layer_in[l + 1];
    } else {
      in[l + 1] = cb->layer_out[l];
    }
  }
  return in[cb->layers];
}

/* --- weight dropout (DropConnect on the hidden-to-hidden matrices) -------- */

/* What weight dropout multiplies element (row, col) of matrix m by: 0 or 1 / (1 - p). */
static float weight_scale(const rnnd_dropout *dr, int m, int64_t row, int col) {
  return rng_weight_dropout_uniform(dr->seed, dr->step, m, row, col) < dr->p_weight ? 0.0f
                                                                                   : 1.0f / (1.0f - dr->p_weight);
}

/* Before a training batch: every W_hh dropped into hh_copy (and its bf16
 * copy), hh_grad cleared, and the layers pointed at them. */
static void drop_recurrent_weights(cpu_backend *cb, const float *params, const rnnd_dropout *dr) {
  if (!dr || dr->p_weight <= 0.0f) return;
  RNND_ASSERT(cb->hh_copy); /* capacity.weight_dropout */
  const int64_t rows = (int64_t)cb->gates * cb->hidden;
  for (int l = 0; l < cb->layers; l++)
    for (int dir = 0; dir < cb->directions; dir++) {
      const float *w = params + cb->base.layout->rnn[l][dir].weight_hh;
      float *copy = cb->hh_copy + cb->hh_at[l][dir];
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < cb->hidden; j++)
          copy[r * cb->hidden + j] = w[r * cb->hidden + j] * weight_scale(dr, 2 * l + dir, r, j);
      memset(cb->hh_grad + cb->hh_at[l][dir], 0, (size_t)(rows * cb->hidden) * sizeof(float));
      if (cb->dnnl)
        for (int64_t i = 0; i < rows * cb->hidden; i++)
          cb->hh_copy16[cb->hh_at[l][dir] + i] = rnnd_f32_to_bf16(copy[i]);
    }
  cb->hh_dropped = 1;
}

/* After it: dL/dW_hh = dL/d(dropped W_hh) * mask / (1 - p), into grads. */
static void finish_weight_dropout(cpu_backend *cb, float *grads, const rnnd_dropout *dr) {
  if (!cb->hh_dropped) return;
  const int64_t rows = (int64_t)cb->gates * cb->hidden;
  for (int l = 0; l < cb->layers; l++)
    for (int dir = 0; dir < cb->directions; dir++) {
      float *g = grads + cb->base.layout->rnn[l][dir].weight_hh;
      const float *gd = cb->hh_grad + cb->hh_at[l][dir];
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < cb->hidden; j++) g[r * cb->hidden + j] += gd[r * cb->hidden + j] * weight_scale(dr, 2 * l + dir, r, j);
    }
  cb->hh_dropped = 0;
}

/* --- activation regularisers (AR, TAR) ------------------------------------ */

/* AR: dy += weight * 2 alpha y / width on every row of the decoder input
 * y, the gradient of weight * alpha * sum(y^2) / width. */
static void add_ar_gradient(const cpu_backend *cb, float *dy, const float *y, const rnnd_batch *b,
                            const rnnd_dropout *dr, float weight) {
  if (!dr || dr->ar_alpha <= 0.0f || weight <= 0.0f) return;
  const float k = weight * 2.0f * dr->ar_alpha / (float)cb->top;
  const int64_t n = b->n_tokens * cb->top;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dy[i] += k * y[i];
}

/* TAR: the gradient of weight * beta * sum((h_t - h_{t-1})^2) / width over
 * consecutive steps of each piece, h the top layer's raw output, added
 * into dh. Step t's row of piece i is step_offsets[t] + i. */
static void add_tar_gradient(const cpu_backend *cb, float *dh, const float *h, const rnnd_batch *b,
                             const rnnd_dropout *dr, float weight) {
  if (!dr || dr->tar_beta <= 0.0f || weight <= 0.0f) return;
  const float k = weight * 2.0f * dr->tar_beta / (float)cb->top;
  const int W = cb->top;
  /* steps in order: a row's two differences touch rows of other steps */
  for (int t = 1; t < b->n_steps; t++)
    for (int i = 0; i < b->batch_sizes[t]; i++) {
      const int64_t now = (b->step_offsets[t] + i) * W, before = (b->step_offsets[t - 1] + i) * W;
      for (int j = 0; j < W; j++) {
        float g = k * (h[now + j] - h[before + j]);
        dh[now + j] += g;
        dh[before + j] -= g;
      }
    }
}

/* --- backward ----------------------------------------------------------- */

static void backward_layers(cpu_backend *cb, const float *params, float *grads, const rnnd_batch *b,
                            const rnnd_dropout *dr, const float **in, float weight) {
  int use_dropout = dr && dr->p > 0.0f;
  float *d_out = cb->grad_a, *d_in = cb->grad_b;
  if (use_dropout && !cb->head->reads_before_dropout) dropout_apply(d_out, d_out, cb->top, b, dr, cb->layers);
  add_tar_gradient(cb, d_out, cb->layer_out[cb->layers - 1], b, dr, weight);
  for (int l = cb->layers - 1; l >= 0; l--) {
    int width = input_width(cb, l);
    for (int dir = 0; dir < cb->directions; dir++) {
      cpu_rnn_dir d;
      direction_view(cb, params, grads, l, dir, &d);
      cpu_rnn_backward(&d, b, in[l], width, cb->layer_out[l] + dir * cb->hidden, cb->top, d_out + dir * cb->hidden,
                       cb->top, &cb->saved[l][dir], d_in, width, dir ? 1.0f : 0.0f, &cb->scratch);
    }
    if (use_dropout) dropout_apply(d_in, d_in, width, b, dr, l);
    float *swap = d_out;
    d_out = d_in;
    d_in = swap;
  }
  cb->input->backward(cb, grads, b, dr, d_out);
}

/* --- 16-bit storage ----------------------------------------------------- */

/* Rounds x to the storage format in place and keeps the 16-bit copy, so
 * what the fp32 workspace holds afterwards is exactly what the copy holds. */
static void store16(const cpu_backend *cb, uint16_t *copy, float *x, int64_t n) {
  rnnd_store_half_array(cb->storage, copy, x, (size_t)n);
}

static void load16(const cpu_backend *cb, float *x, const uint16_t *copy, int64_t n) {
  rnnd_half_to_f32_array(cb->storage, x, copy, (size_t)n);
}

static void round16(const cpu_backend *cb, float *x, int64_t n) {
  rnnd_round_through_half_array(cb->storage, x, x, (size_t)n);
}

/* Embedding and all layers, one layer at a time in the fp32 workspace;
 * returns the decoder input (in the workspace, rounded). */
static const float *forward_layers16(cpu_backend *cb, const float *params, const rnnd_batch *b,
                                     const rnnd_dropout *dr) {
  const int64_t T = b->n_tokens, GH = (int64_t)cb->gates * cb->hidden;
  float *x = cb->layer_in[0], *out = cb->layer_out[0];
  cb->input->forward(cb, params, b, dr, x);
  int use_dropout = dr && dr->p > 0.0f;
  if (use_dropout) dropout_apply(x, x, cb->embed, b, dr, 0);
  store16(cb, cb->in16[0], x, T * cb->embed);
  for (int l = 0; l < cb->layers; l++) {
    for (int dir = 0; dir < cb->directions; dir++) {
      cpu_rnn_dir d;
      direction_view(cb, params, NULL, l, dir, &d);
      cpu_rnn_forward(&d, b, x, input_width(cb, l), out + dir * cb->hidden, cb->top, &cb->saved[0][dir],
                      &cb->scratch);
      store16(cb, cb->gates16[l][dir], cb->saved[0][dir].gates, T * GH);
      store16(cb, cb->extra16[l][dir], cb->saved[0][dir].extra, T * cb->hidden);
    }
    store16(cb, cb->out16[l], out, T * cb->top);
    if (use_dropout) dropout_apply(x, out, cb->top, b, dr, l + 1);
    else memcpy(x, out, (size_t)(T * cb->top) * sizeof(float));
    store16(cb, cb->in16[l + 1], x, T * cb->top);
  }
  cb->decoder_input16 = cb->in16[cb->layers];
  return x;
}

/* Backward of the layers from the 16-bit saved activations; gradients that
 * cross a layer boundary are rounded to the storage format. */
static void backward_layers16(cpu_backend *cb, const float *params, float *grads, const rnnd_batch *b,
                              const rnnd_dropout *dr, float weight) {
  const int64_t T = b->n_tokens, GH = (int64_t)cb->gates * cb->hidden;
  int use_dropout = dr && dr->p > 0.0f;
  float *d_out = cb->grad_a, *d_in = cb->grad_b, *x = cb->layer_in[0], *out = cb->layer_out[0];
  round16(cb, d_out, T * cb->top);
  if (use_dropout && !cb->head->reads_before_dropout) {
    dropout_apply(d_out, d_out, cb->top, b, dr, cb->layers);
    round16(cb, d_out, T * cb->top);
  }
  for (int l = cb->layers - 1; l >= 0; l--) {
    int width = input_width(cb, l);
    load16(cb, x, cb->in16[l], T * width);
    load16(cb, out, cb->out16[l], T * cb->top);
    if (l == cb->layers - 1) add_tar_gradient(cb, d_out, out, b, dr, weight); /* out: the top's raw output */
    for (int dir = 0; dir < cb->directions; dir++) {
      cpu_rnn_dir d;
      direction_view(cb, params, grads, l, dir, &d);
      load16(cb, cb->saved[0][dir].gates, cb->gates16[l][dir], T * GH);
      load16(cb, cb->saved[0][dir].extra, cb->extra16[l][dir], T * cb->hidden);
      cpu_rnn_backward(&d, b, x, width, out + dir * cb->hidden, cb->top, d_out + dir * cb->hidden, cb->top,
                       &cb->saved[0][dir], d_in, width, dir ? 1.0f : 0.0f, &cb->scratch);
    }
    round16(cb, d_in, T * width);
    if (use_dropout) {
      dropout_apply(d_in, d_in, width, b, dr, l);
      round16(cb, d_in, T * width);
    }
    float *swap = d_out;
    d_out = d_in;
    d_in = swap;
  }
  cb->input->backward(cb, grads, b, dr, d_out);
}

/* --- ops ---------------------------------------------------------------- */

static void check_capacity(const cpu_backend *cb, const rnnd_batch *b) {
  if (b->n_pieces > cb->cap.max_pieces || b->n_steps > cb->cap.max_steps || b->n_tokens > cb->cap.max_tokens)
    RNND_FAIL("batch (%d pieces, %d steps, %lld tokens) exceeds the backend capacity (%d, %d, %lld)", b->n_pieces,
              b->n_steps, (long long)b->n_tokens, cb->cap.max_pieces, cb->cap.max_steps,
              (long long)cb->cap.max_tokens);
}

/* --- segmented backpropagation through time ----------------------------- */

/* Copies each layer's state after the view's last step, for its first
 * `rows` pieces: layer l's h to row i of h_dst[l] and its c (LSTM) to row i
 * of c_dst[l], rows `ld` floats apart. */
static void copy_final_state(cpu_backend *cb, const rnnd_batch *view, int rows, float *const *h_dst,
                             float *const *c_dst, int ld) {
  const int H = cb->hidden, lstm = cb->base.layout->shape.cell == RNND_CELL_LSTM;
  const int64_t row = view->step_offsets[view->n_steps - 1];
  for (int l = 0; l < cb->layers; l++)
    for (int i = 0; i < rows; i++) {
      float *h = h_dst[l] + (int64_t)i * ld, *c = lstm ? c_dst[l] + (int64_t)i * ld : NULL;
      if (cb->storage == RNND_DTYPE_F32) {
        memcpy(h, cb->layer_out[l] + (row + i) * cb->top, (size_t)H * sizeof(float));
        if (c) memcpy(c, cb->saved[l][0].extra + (row + i) * H, (size_t)H * sizeof(float));
      } else { /* the 16-bit copies: the workspace holds only the top layer */
        load16(cb, h, cb->out16[l] + (row + i) * cb->top, H);
        if (c) load16(cb, c, cb->extra16[l][0] + (row + i) * H, H);
      }
    }
}

/* The state after the view's last step into boundary slot `next`. */
static void keep_segment_end(cpu_backend *cb, const rnnd_batch *view, int rows, int next) {
  const int64_t slot = (int64_t)next * cb->cap.max_pieces * cb->hidden;
  float *h[RNND_MAX_LAYERS], *c[RNND_MAX_LAYERS];
  for (int l = 0; l < cb->layers; l++) {
    h[l] = cb->boundary_h[l] + slot;
    c[l] = cb->boundary_c[l] ? cb->boundary_c[l] + slot : NULL;
  }
  copy_final_state(cb, view, rows, h, c, cb->hidden);
}

/* The state after the batch's last step into carry_state's state_out. */
static void keep_stream_end(cpu_backend *cb, const rnnd_batch *view) {
  if (!cb->stream_out) return;
  const int H = cb->hidden, width = rnnd_state_width(&cb->base.layout->shape);
  float *h[RNND_MAX_LAYERS], *c[RNND_MAX_LAYERS];
  for (int l = 0; l < cb->layers; l++) {
    h[l] = cb->stream_out + 2 * l * H;
    c[l] = cb->stream_out + (2 * l + 1) * H;
  }
  copy_final_state(cb, view, view->batch_sizes[view->n_steps - 1], h, c, width);
}

/* Points the layers at segment s's starting state and gradient carries:
 * the kept boundary state, or for the first segment the carried stream
 * state (or zeros). */
static void link_segment(cpu_backend *cb, int s, int last_rows, int backward) {
  const int64_t slot = (int64_t)s * cb->cap.max_pieces * cb->hidden;
  const int H = cb->hidden;
  for (int l = 0; l < cb->layers; l++) {
    if (s > 0) {
      cb->link.h0[l] = cb->boundary_h[l] + slot;
      cb->link.c0[l] = cb->boundary_c[l] ? cb->boundary_c[l] + slot : NULL;
    } else {
      cb->link.h0[l] = cb->stream_in ? cb->stream_in + 2 * l * H : NULL;
      cb->link.c0[l] = cb->stream_in ? cb->stream_in + (2 * l + 1) * H : NULL;
    }
    cb->link.dh[l] = backward ? cb->carry_dh[l] : NULL;
    cb->link.dc[l] = backward ? cb->carry_dc[l] : NULL;
  }
  cb->link.ld0 = s > 0 || !cb->stream_in ? 0 : rnnd_state_width(&cb->base.layout->shape);
  cb->link.last_rows = backward ? last_rows : 0;
}

/* --- the schedule's primitives (schedule.h) ------------------------------ */

/* One train_batch or eval_batch: the backend, the weights and gradient it
 * was given, and what forward leaves for the head and backward. */
typedef struct {
  cpu_backend *cb;
  const float *params;
  float *grads;            /* NULL: evaluation */
  float *out;              /* predict_batch: the head's outputs (else NULL) */
  const rnnd_dropout *dr;  /* training: the batch's regularisers (AR in head, TAR in backward) */
  float weight;            /* training: the loss weight the head was given */
  const float *y;          /* the decoder input of the last forward */
  const float *in[RNND_MAX_LAYERS + 1]; /* fp32: the buffer that fed each layer */
} cpu_run;

static void run_enter(void *context, const rnnd_batch *v, int s, int segments, int backward, int next_pieces) {
  cpu_run *r = context;
  (void)v;
  /* a whole batch neither receives nor hands on a state gradient */
  link_segment(r->cb, s, backward ? next_pieces : 0, backward && segments > 1);
}

static void run_forward(void *context, const rnnd_batch *v, const rnnd_dropout *dr, int training) {
  cpu_run *r = context;
  (void)training; /* what backward needs is kept either way */
  r->y = r->cb->storage != RNND_DTYPE_F32 ? forward_layers16(r->cb, r->params, v, dr)
                                          : forward_layers(r->cb, r->params, v, dr, r->in);
}

static double run_head(void *context, const rnnd_batch *v, float weight) {
  cpu_run *r = context;
  if (r->out) {
    r->cb->head->outputs(r->cb, r->params, r->y, v, r->out);
    return 0.0;
  }
  r->weight = weight;
  if (weight > 0.0f) {
    double nll = r->cb->head->loss(r->cb, r->params, r->grads, r->y, r->cb->grad_a, v, weight);
    add_ar_gradient(r->cb, r->cb->grad_a, r->y, v, r->dr, weight);
    return nll;
  }
  return r->cb->head->loss(r->cb, r->params, NULL, r->y, NULL, v, 0.0f);
}

static void run_backward(void *context, const rnnd_batch *v, const rnnd_dropout *dr) {
  cpu_run *r = context;
  if (r->cb->storage != RNND_DTYPE_F32) backward_layers16(r->cb, r->params, r->grads, v, dr, r->weight);
  else backward_layers(r->cb, r->params, r->grads, v, dr, r->in, r->weight);
}

/* The state after the view's last step: kept for the next segment, or
 * (the batch's last step) handed to carry_state's state_out. */
static void run_leave(void *context, const rnnd_batch *v, int s, int segments, int next_pieces) {
  cpu_run *r = context;
  if (s + 1 < segments) keep_segment_end(r->cb, v, next_pieces, s + 1);
  else keep_stream_end(r->cb, v);
}

static const rnnd_schedule_ops cpu_schedule = {
    .enter = run_enter, .forward = run_forward, .head = run_head, .backward = run_backward, .leave = run_leave};

/* weights16[offset, offset + count) = params there, in bf16. */
static void range_to_bf16(cpu_backend *cb, const float *params, size_t offset, size_t count) {
  uint16_t *to = cb->weights16 + offset;
  const float *from = params + offset;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < count; i++) to[i] = rnnd_f32_to_bf16(from[i]);
}

/* bf16 products: the batch's weights in bf16, once per batch; only those
 * the products read (the layers' matrices and the head's), not the
 * embedding, which is looked up in fp32, nor the biases. */
static void weights_to_bf16(cpu_backend *cb, const float *params) {
  if (!cb->dnnl) return;
  const size_t gate_rows = (size_t)cb->gates * (size_t)cb->hidden;
  for (int l = 0; l < cb->layers; l++)
    for (int dir = 0; dir < cb->directions; dir++) {
      const rnnd_rnn_offsets *o = &cb->base.layout->rnn[l][dir];
      range_to_bf16(cb, params, o->weight_ih, gate_rows * (size_t)o->input_size);
      range_to_bf16(cb, params, o->weight_hh, gate_rows * (size_t)cb->hidden);
    }
  if (cb->head->bf16_weights) {
    size_t offset, count;
    cb->head->bf16_weights(cb, &offset, &count);
    range_to_bf16(cb, params, offset, count);
  }
}

static void end_batch(cpu_backend *cb) {
  memset(&cb->link, 0, sizeof cb->link);
  cb->stream_in = NULL;
  cb->stream_out = NULL;
}

static double cpu_train_batch(rnnd_backend *be, const float *params, float *grads, const rnnd_batch *b,
                              const rnnd_dropout *dr, float loss_weight) {
  cpu_backend *cb = (cpu_backend *)be;
  check_capacity(cb, b);
  memset(&cb->stats, 0, sizeof cb->stats);
  /* by segments, the saved gates are those of the first segment, recomputed last */
  cb->last_train_tokens = cb->segment && b->n_steps > cb->segment ? b->step_offsets[cb->segment] : b->n_tokens;
  weights_to_bf16(cb, params);
  drop_recurrent_weights(cb, params, dr);
  cpu_run run = {.cb = cb, .params = params, .grads = grads, .dr = dr};
  double nll = schedule_run(&cpu_schedule, &run, b, cb->segment, cb->segment_offsets, dr, loss_weight);
  finish_weight_dropout(cb, grads, dr);
  end_batch(cb);
  return nll;
}

static double cpu_eval_batch(rnnd_backend *be, const float *params, const rnnd_batch *b) {
  cpu_backend *cb = (cpu_backend *)be;
  check_capacity(cb, b);
  memset(&cb->stats, 0, sizeof cb->stats);
  weights_to_bf16(cb, params);
  cpu_run run = {.cb = cb, .params = params, .grads = NULL};
  double nll = schedule_run(&cpu_schedule, &run, b, cb->segment, cb->segment_offsets, NULL, 0.0f);
  end_batch(cb);
  return nll;
}

static void cpu_predict_batch(rnnd_backend *be, const float *params, const rnnd_batch *b, float *out) {
  cpu_backend *cb = (cpu_backend *)be;
  check_capacity(cb, b);
  memset(&cb->stats, 0, sizeof cb->stats);
  weights_to_bf16(cb, params);
  cpu_run run = {.cb = cb, .params = params, .grads = NULL, .out = out};
  schedule_run(&cpu_schedule, &run, b, cb->segment, cb->segment_offsets, NULL, 0.0f);
  end_batch(cb);
}

static void cpu_last_stats(const rnnd_backend *be, rnnd_head_stats *out) { *out = ((const cpu_backend *)be)->stats; }

static void cpu_carry_state(rnnd_backend *be, const float *state_in, float *state_out) {
  cpu_backend *cb = (cpu_backend *)be;
  RNND_ASSERT(cb->directions == 1);
  cb->stream_in = state_in;
  cb->stream_out = state_out;
}

static size_t cpu_activation_bytes(const rnnd_backend *be) { return ((const cpu_backend *)be)->activation_bytes; }
static size_t cpu_workspace_bytes(const rnnd_backend *be) { return ((const cpu_backend *)be)->workspace_bytes; }

static void add_to_histogram(float value, int bins, int64_t *counts) {
  int k = (int)((value + 1.0f) * 0.5f * (float)bins);
  counts[k < 0 ? 0 : k >= bins ? bins - 1 : k]++;
}

/* The saved gate values are post-nonlinearity, [tokens, gates * hidden]. */
static void cpu_gate_histogram(const rnnd_backend *be, int layer, int gate, int bins, int64_t *counts) {
  const cpu_backend *cb = (const cpu_backend *)be;
  const int64_t G = (int64_t)cb->gates * cb->hidden;
  if (layer < 0 || layer >= cb->layers || gate < 0 || gate >= cb->gates) return;
  for (int dir = 0; dir < cb->directions; dir++)
    for (int64_t r = 0; r < cb->last_train_tokens; r++)
      for (int j = 0; j < cb->hidden; j++) {
        int64_t at = r * G + (int64_t)gate * cb->hidden + j;
        float v = cb->storage == RNND_DTYPE_F32 ? cb->saved[layer][dir].gates[at]
                                                : rnnd_half_to_f32(cb->storage, cb->gates16[layer][dir][at]);
        add_to_histogram(v, bins, counts);
      }
}

static void cpu_destroy(rnnd_backend *be) {
  cpu_backend *cb = (cpu_backend *)be;
  if (!cb) return;
  for (int l = 0; l <= cb->layers; l++) {
    free(cb->layer_in[l]);
    free(cb->in16[l]);
  }
  for (int l = 0; l < cb->layers; l++) {
    free(cb->layer_out[l]);
    free(cb->out16[l]);
    for (int d = 0; d < cb->directions; d++) {
      free(cb->gates16[l][d]);
      free(cb->extra16[l][d]);
    }
    for (int d = 0; d < cb->directions; d++) {
      free(cb->saved[l][d].gates);
      free(cb->saved[l][d].extra);
    }
  }
  cpu_rnn_scratch *s = &cb->scratch;
  free(s->step_gates);
  free(s->carry_h);
  free(s->carry_c);
  free(s->d_gates_ih);
  free(s->d_gates_hh);
  free(s->h_prev);
  free(s->zeros);
  free(s->gate_bias);
  free(s->sink);
  free(cb->grad_a);
  free(cb->grad_b);
  free(cb->logits);
  free(cb->row_nll);
  free(cb->bias_partials);
  free(cb->softmax_exps);
  free(cb->tail_rows);
  free(cb->tail_y);
  free(cb->tail_dy);
  free(cb->tail_p);
  free(cb->tail_dp);
  free(cb->tail_logits);
  free(cb->segment_offsets);
  free(cb->features);
  free(cb->d_features);
  free(cb->class_logits);
  free(cb->class_pieces);
  free(cb->prediction);
  free(cb->hh_copy);
  free(cb->hh_grad);
  free(cb->hh_copy16);
  for (int l = 0; l < cb->layers; l++) {
    free(cb->boundary_h[l]);
    free(cb->boundary_c[l]);
    free(cb->carry_dh[l]);
    free(cb->carry_dc[l]);
  }
  free(s->h0_16);
  free(s->d_ih16);
  free(s->d_hh16);
  free(s->h_prev16);
  free(cb->weights16);
  free(cb->dlogits16);
  cpu_dnnl_destroy(cb->dnnl);
  free(cb);
}

static const char *cpu_describe(const rnnd_backend *be) { return ((const cpu_backend *)be)->compute_note; }

static const rnnd_backend_ops cpu_ops = {
    .name = "cpu",
    .train_batch = cpu_train_batch,
    .eval_batch = cpu_eval_batch,
    .activation_bytes = cpu_activation_bytes,
    .workspace_bytes = cpu_workspace_bytes,
    .gate_histogram = cpu_gate_histogram,
    .destroy = cpu_destroy,
    .carry_state = cpu_carry_state,
    .last_stats = cpu_last_stats,
    .workspace_growths = NULL, /* sized once for the capacity */
    .describe = cpu_describe,
    .predict_batch = cpu_predict_batch,
};

/* Every layer's activations in fp32 (the reference path). */
static void allocate_fp32_activations(cpu_backend *cb) {
  const int64_t T = cb->rows, GH = (int64_t)cb->gates * cb->hidden;
  cb->layer_in[0] = cpu_take(cb, T, cb->embed, 1);
  for (int l = 0; l < cb->layers; l++) {
    cb->layer_in[l + 1] = cpu_take(cb, T, cb->top, 1);
    cb->layer_out[l] = cpu_take(cb, T, cb->top, 1);
    for (int d = 0; d < cb->directions; d++) {
      cb->saved[l][d].gates = cpu_take(cb, T, GH, 1);
      cb->saved[l][d].extra = cpu_take(cb, T, cb->hidden, 1);
    }
  }
}

/* The same activations in 16 bits, plus one layer's fp32 workspace. */
static void allocate_16bit_activations(cpu_backend *cb) {
  const int64_t T = cb->rows, GH = (int64_t)cb->gates * cb->hidden;
  cb->in16[0] = cpu_take16(cb, T, cb->embed, 1);
  for (int l = 0; l < cb->layers; l++) {
    cb->in16[l + 1] = cpu_take16(cb, T, cb->top, 1);
    cb->out16[l] = cpu_take16(cb, T, cb->top, 1);
    for (int d = 0; d < cb->directions; d++) {
      cb->gates16[l][d] = cpu_take16(cb, T, GH, 1);
      cb->extra16[l][d] = cpu_take16(cb, T, cb->hidden, 1);
    }
  }
  cb->layer_in[0] = cpu_take(cb, T, cb->embed > cb->top ? cb->embed : cb->top, 0);
  cb->layer_out[0] = cpu_take(cb, T, cb->top, 0);
  for (int d = 0; d < cb->directions; d++) {
    cb->saved[0][d].gates = cpu_take(cb, T, GH, 0);
    cb->saved[0][d].extra = cpu_take(cb, T, cb->hidden, 0);
  }
}

/* The states kept at segment starts count as activations: they are what
 * grows with the sequence length (T/K of them) once segments are on. */
static void allocate_segment_states(cpu_backend *cb) {
  const int64_t segments = (cb->cap.max_steps + cb->segment - 1) / cb->segment, B = cb->cap.max_pieces;
  const int lstm = cb->base.layout->shape.cell == RNND_CELL_LSTM;
  cb->segment_offsets = RNND_ALLOC(int64_t, cb->segment + 1, "segment offsets");
  for (int l = 0; l < cb->layers; l++) {
    cb->boundary_h[l] = cpu_take(cb, segments * B, cb->hidden, 1);
    cb->carry_dh[l] = cpu_take(cb, B, cb->hidden, 0);
    if (!lstm) continue;
    cb->boundary_c[l] = cpu_take(cb, segments * B, cb->hidden, 1);
    cb->carry_dc[l] = cpu_take(cb, B, cb->hidden, 0);
  }
}

/* capacity.weight_dropout: a dropped copy of every W_hh and its gradient. */
static void allocate_weight_dropout(cpu_backend *cb) {
  if (!cb->cap.weight_dropout) return;
  const int64_t matrix = (int64_t)cb->gates * cb->hidden * cb->hidden;
  int64_t at = 0;
  for (int l = 0; l < cb->layers; l++)
    for (int dir = 0; dir < cb->directions; dir++, at += matrix) cb->hh_at[l][dir] = at;
  cb->hh_copy = cpu_take(cb, at, 1, 0);
  cb->hh_grad = cpu_take(cb, at, 1, 0);
  if (cb->dnnl) cb->hh_copy16 = cpu_take16(cb, at, 1, 0);
}

static void allocate_buffers(cpu_backend *cb) {
  const int64_t T = cb->rows, B = cb->cap.max_pieces, GH = (int64_t)cb->gates * cb->hidden;
  if (cb->storage == RNND_DTYPE_F32) allocate_fp32_activations(cb);
  else allocate_16bit_activations(cb);
  cpu_rnn_scratch *s = &cb->scratch;
  s->step_gates = cpu_take(cb, B, GH, 0);
  s->carry_h = cpu_take(cb, B, cb->hidden, 0);
  s->carry_c = cpu_take(cb, B, cb->hidden, 0);
  s->d_gates_ih = cpu_take(cb, T, GH, 0);
  s->d_gates_hh = cpu_take(cb, T, GH, 0);
  s->h_prev = cpu_take(cb, T, cb->hidden, 0);
  s->zeros = RNND_ALLOC(float, cb->hidden, "zero state");
  s->gate_bias = RNND_ALLOC(float, GH, "gate biases");
  s->sink = cpu_take(cb, B, cb->hidden, 0);
  int widest = cb->embed > cb->top ? cb->embed : cb->top;
  cb->grad_a = cpu_take(cb, T, widest, 0);
  cb->grad_b = cpu_take(cb, T, widest, 0);
  if (cb->dnnl) {
    s->h0_16 = cpu_take16(cb, B, cb->hidden, 0);
    s->d_ih16 = cpu_take16(cb, T, GH, 0);
    s->d_hh16 = cpu_take16(cb, T, GH, 0);
    s->h_prev16 = cpu_take16(cb, T, cb->hidden, 0);
    cb->weights16 = cpu_take16(cb, (int64_t)cb->base.layout->numel, 1, 0);
  }
  cb->head->allocate(cb);
  if (cb->segment) allocate_segment_states(cb);
  allocate_weight_dropout(cb);
}

/* bf16 storage computes its products in bf16 through oneDNN where the build
 * has it; everything else goes through the BLAS in fp32. */
static void choose_products(cpu_backend *cb) {
  const char *core;
  cpu_blas_advice(&core);
  if (cb->storage == RNND_DTYPE_BF16) cb->dnnl = cpu_dnnl_create();
  if (!cb->dnnl) { /* fp32 products through the BLAS: the start-up line names its core already */
    if (cb->storage != RNND_DTYPE_F32)
      snprintf(cb->compute_note, sizeof cb->compute_note, "%s stores 16 bits and computes in fp32 (BLAS core %s)%s",
               rnnd_dtype_name(cb->storage), core,
               cb->storage == RNND_DTYPE_BF16 ? ": no oneDNN in this build, so bf16 is no faster than fp32" : "");
    return;
  }
  char engine[128];
  int native = 0;
  cpu_dnnl_describe(cb->dnnl, engine, sizeof engine, &native);
  snprintf(cb->compute_note, sizeof cb->compute_note, "bf16 products through %s%s", engine,
           native ? "" : ": emulated without bf16 instructions, slower than fp32");
}

rnnd_backend *cpu_backend_create(const rnnd_layout *layout, const rnnd_backend_capacity *cap) {
  cpu_backend *cb = RNND_ALLOC(cpu_backend, 1, "CPU backend");
  const rnnd_model_shape *s = &layout->shape;
  cb->base.ops = &cpu_ops;
  cb->base.layout = layout;
  cb->cap = *cap;
  cb->layers = s->layers;
  cb->directions = s->directions;
  cb->hidden = s->hidden;
  cb->embed = s->embed;
  cb->vocab = s->vocab_size;
  cb->top = s->hidden * s->directions;
  cb->gates = layout->gates;
  cb->storage = cap->storage;
  cb->head = cpu_head_for(s);
  cb->input = cpu_input_for(s);
  cb->n_classes = s->n_classes;
  cb->n_features = s->n_features;
  cb->rows = cap->max_tokens;
  if (cap->bptt_segment > 0 && cap->bptt_segment < cap->max_steps) {
    RNND_ASSERT(s->directions == 1); /* the config refuses segments for bidirectional models */
    cb->segment = cap->bptt_segment;
    int64_t segment_rows = (int64_t)cb->segment * cap->max_pieces;
    if (segment_rows < cb->rows) cb->rows = segment_rows;
  }
  cpu_set_threads(cap->threads);
  choose_products(cb);
  allocate_buffers(cb);
  return &cb->base;
}
