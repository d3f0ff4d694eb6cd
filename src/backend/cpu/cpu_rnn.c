/* cpu_rnn.c — packed GRU/LSTM direction, forward and backward (cpu_rnn.h).
 *
 * Gate formulas are PyTorch's (and cuDNN's):
 *   GRU:  r = s(Wir x + bir + Whr h + bhr)   z = s(Wiz x + biz + Whz h + bhz)
 *         n = tanh(Win x + bin + r * (Whn h + bhn))   h' = (1 - z) n + z h
 *   LSTM: i,f,o = s(.), g = tanh(.), c' = f c + i g, h' = o tanh(c')
 * Pieces are sorted longest first, so the rows that have a state from the
 * previous step of a direction are always a prefix of the current step. */
#include "cpu_rnn.h"

#include <math.h>
#include <string.h>

#include "cpu_blas.h"
#include "rnnd/config.h"

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Rows of step t that continue a state from this direction's previous step;
 * *prev_row0 is where that previous step starts. */
static int rows_with_state(const cpu_rnn_dir *d, const rnnd_batch *b, int t, int64_t *prev_row0) {
  if (!d->reverse) {
    if (t == 0) return 0;
    *prev_row0 = b->step_offsets[t - 1];
    return b->batch_sizes[t];
  }
  if (t == b->n_steps - 1) return 0;
  *prev_row0 = b->step_offsets[t + 1];
  return b->batch_sizes[t + 1];
}

/* Time step that a direction visits k-th in its forward order. */
static int step_at(const cpu_rnn_dir *d, const rnnd_batch *b, int k) {
  return d->reverse ? b->n_steps - 1 - k : k;
}

static void fill_rows(float *dst, int64_t rows, int width, const float *row) {
  for (int64_t i = 0; i < rows; i++) memcpy(dst + i * width, row, (size_t)width * sizeof *dst);
}

static void gru_forward_step(const cpu_rnn_dir *d, const rnnd_batch *b, int t, float *out, int ldo,
                             cpu_rnn_saved *sv, cpu_rnn_scratch *s) {
  const int H = d->hidden, G = 3 * H, bs = b->batch_sizes[t];
  int64_t row0 = b->step_offsets[t], prev0 = 0;
  int with_state = rows_with_state(d, b, t, &prev0);
  float *gh = s->step_gates;
  fill_rows(gh, bs, G, d->b_hh);
  if (with_state) gemm_nt(with_state, G, H, out + prev0 * ldo, ldo, d->w_hh, H, gh, G, 1.0f);
  for (int i = 0; i < bs; i++) {
    float *g = sv->gates + (row0 + i) * G, *hn_saved = sv->extra + (row0 + i) * H;
    float *h = out + (row0 + i) * ldo;
    const float *hp = i < with_state ? out + (prev0 + i) * ldo : NULL, *ghi = gh + (int64_t)i * G;
    for (int j = 0; j < H; j++) {
      float r = sigmoid(g[j] + ghi[j]);
      float z = sigmoid(g[H + j] + ghi[H + j]);
      float hn = ghi[2 * H + j];
      float n = tanhf(g[2 * H + j] + r * hn);
      float prev = hp ? hp[j] : 0.0f;
      h[j] = n + z * (prev - n);
      g[j] = r;
      g[H + j] = z;
      g[2 * H + j] = n;
      hn_saved[j] = hn;
    }
  }
}

static void lstm_forward_step(const cpu_rnn_dir *d, const rnnd_batch *b, int t, float *out, int ldo,
                              cpu_rnn_saved *sv) {
  const int H = d->hidden, G = 4 * H, bs = b->batch_sizes[t];
  int64_t row0 = b->step_offsets[t], prev0 = 0;
  int with_state = rows_with_state(d, b, t, &prev0);
  float *gates = sv->gates + row0 * G;
  for (int i = 0; i < bs; i++)
    for (int j = 0; j < G; j++) gates[(int64_t)i * G + j] += d->b_hh[j];
  if (with_state) gemm_nt(with_state, G, H, out + prev0 * ldo, ldo, d->w_hh, H, gates, G, 1.0f);
  for (int i = 0; i < bs; i++) {
    float *g = gates + (int64_t)i * G, *c = sv->extra + (row0 + i) * H, *h = out + (row0 + i) * ldo;
    const float *cp = i < with_state ? sv->extra + (prev0 + i) * H : NULL;
    for (int j = 0; j < H; j++) {
      float ig = sigmoid(g[j]), fg = sigmoid(g[H + j]);
      float gg = tanhf(g[2 * H + j]), og = sigmoid(g[3 * H + j]);
      float cell = ig * gg + (cp ? fg * cp[j] : 0.0f);
      c[j] = cell;
      h[j] = og * tanhf(cell);
      g[j] = ig;
      g[H + j] = fg;
      g[2 * H + j] = gg;
      g[3 * H + j] = og;
    }
  }
}

void cpu_rnn_forward(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, float *out, int ldo,
                     cpu_rnn_saved *saved, cpu_rnn_scratch *s) {
  const int G = (d->cell == RNND_CELL_LSTM ? 4 : 3) * d->hidden;
  fill_rows(saved->gates, b->n_tokens, G, d->b_ih);
  gemm_nt((int)b->n_tokens, G, d->input_size, x, ldx, d->w_ih, d->input_size, saved->gates, G, 1.0f);
  for (int k = 0; k < b->n_steps; k++) {
    int t = step_at(d, b, k);
    if (d->cell == RNND_CELL_LSTM) lstm_forward_step(d, b, t, out, ldo, saved);
    else gru_forward_step(d, b, t, out, ldo, saved, s);
  }
}

/* One GRU step of backpropagation through time. carry_h holds dL/dh for the
 * first *carried rows (from the step visited before this one). */
static void gru_backward_step(const cpu_rnn_dir *d, const rnnd_batch *b, int t, const float *out, int ldo,
                              const float *dout, int lddo, const cpu_rnn_saved *sv, cpu_rnn_scratch *s,
                              int *carried) {
  const int H = d->hidden, G = 3 * H, bs = b->batch_sizes[t];
  int64_t row0 = b->step_offsets[t], prev0 = 0;
  int with_state = rows_with_state(d, b, t, &prev0);
  float *dgi = s->d_gates_ih + row0 * G, *dgh = s->d_gates_hh + row0 * G;
  for (int i = 0; i < bs; i++) {
    const float *g = sv->gates + (row0 + i) * G, *hn = sv->extra + (row0 + i) * H;
    const float *hp = i < with_state ? out + (prev0 + i) * ldo : NULL, *dh_out = dout + (row0 + i) * lddo;
    float *carry = s->carry_h + (int64_t)i * H, *dgi_row = dgi + (int64_t)i * G, *dgh_row = dgh + (int64_t)i * G;
    for (int j = 0; j < H; j++) {
      float dh = dh_out[j] + (i < *carried ? carry[j] : 0.0f);
      float r = g[j], z = g[H + j], n = g[2 * H + j], prev = hp ? hp[j] : 0.0f;
      float dn_pre = dh * (1.0f - z) * (1.0f - n * n);
      float dz_pre = dh * (prev - n) * z * (1.0f - z);
      float dr_pre = dn_pre * hn[j] * r * (1.0f - r);
      dgi_row[j] = dgh_row[j] = dr_pre;
      dgi_row[H + j] = dgh_row[H + j] = dz_pre;
      dgi_row[2 * H + j] = dn_pre;
      dgh_row[2 * H + j] = dn_pre * r;
      if (i < with_state) carry[j] = dh * z;
    }
  }
  if (with_state) gemm_nn(with_state, H, G, dgh, G, d->w_hh, H, s->carry_h, H, 1.0f);
  *carried = with_state;
}

static void lstm_backward_step(const cpu_rnn_dir *d, const rnnd_batch *b, int t, const float *dout, int lddo,
                               const cpu_rnn_saved *sv, cpu_rnn_scratch *s, int *carried) {
  const int H = d->hidden, G = 4 * H, bs = b->batch_sizes[t];
  int64_t row0 = b->step_offsets[t], prev0 = 0;
  int with_state = rows_with_state(d, b, t, &prev0);
  float *dg = s->d_gates_ih + row0 * G;
  for (int i = 0; i < bs; i++) {
    const float *g = sv->gates + (row0 + i) * G, *c = sv->extra + (row0 + i) * H;
    const float *cp = i < with_state ? sv->extra + (prev0 + i) * H : NULL, *dh_out = dout + (row0 + i) * lddo;
    float *carry_h = s->carry_h + (int64_t)i * H, *carry_c = s->carry_c + (int64_t)i * H;
    float *dg_row = dg + (int64_t)i * G;
    for (int j = 0; j < H; j++) {
      int has_carry = i < *carried;
      float ig = g[j], fg = g[H + j], gg = g[2 * H + j], og = g[3 * H + j];
      float tc = tanhf(c[j]);
      float dh = dh_out[j] + (has_carry ? carry_h[j] : 0.0f);
      float dc = (has_carry ? carry_c[j] : 0.0f) + dh * og * (1.0f - tc * tc);
      dg_row[j] = dc * gg * ig * (1.0f - ig);
      dg_row[H + j] = (cp ? dc * cp[j] : 0.0f) * fg * (1.0f - fg);
      dg_row[2 * H + j] = dc * ig * (1.0f - gg * gg);
      dg_row[3 * H + j] = dh * tc * og * (1.0f - og);
      if (i < with_state) carry_c[j] = dc * fg;
    }
  }
  if (with_state) gemm_nn(with_state, H, G, dg, G, d->w_hh, H, s->carry_h, H, 0.0f);
  *carried = with_state;
}

/* Gathers every row's previous hidden state (zero where a piece starts) so
 * the recurrent weight gradient is one GEMM over the whole batch. */
static void gather_previous_states(const cpu_rnn_dir *d, const rnnd_batch *b, const float *out, int ldo,
                                   float *h_prev) {
  const int H = d->hidden;
  for (int t = 0; t < b->n_steps; t++) {
    int64_t row0 = b->step_offsets[t], prev0 = 0;
    int with_state = rows_with_state(d, b, t, &prev0);
    for (int i = 0; i < with_state; i++)
      memcpy(h_prev + (row0 + i) * H, out + (prev0 + i) * ldo, (size_t)H * sizeof *h_prev);
    memset(h_prev + (row0 + with_state) * H, 0, (size_t)(b->batch_sizes[t] - with_state) * H * sizeof *h_prev);
  }
}

static void add_column_sums(float *dst, const float *m, int64_t rows, int cols) {
  for (int64_t i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) dst[j] += m[i * cols + j];
}

void cpu_rnn_backward(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, const float *out,
                      int ldo, const float *dout, int lddo, const cpu_rnn_saved *saved, float *dx, int lddx,
                      float dx_beta, cpu_rnn_scratch *s) {
  const int H = d->hidden, lstm = d->cell == RNND_CELL_LSTM, G = (lstm ? 4 : 3) * H;
  const int T = (int)b->n_tokens;
  int carried = 0;
  for (int k = b->n_steps - 1; k >= 0; k--) {
    int t = step_at(d, b, k);
    if (lstm) lstm_backward_step(d, b, t, dout, lddo, saved, s, &carried);
    else gru_backward_step(d, b, t, out, ldo, dout, lddo, saved, s, &carried);
  }
  const float *d_ih = s->d_gates_ih, *d_hh = lstm ? s->d_gates_ih : s->d_gates_hh;
  gather_previous_states(d, b, out, ldo, s->h_prev);
  gemm_tn(G, H, T, d_hh, G, s->h_prev, H, d->gw_hh, H, 1.0f);
  gemm_tn(G, d->input_size, T, d_ih, G, x, ldx, d->gw_ih, d->input_size, 1.0f);
  add_column_sums(d->gb_ih, d_ih, T, G);
  add_column_sums(d->gb_hh, d_hh, T, G);
  gemm_nn(T, d->input_size, G, d_ih, G, d->w_ih, d->input_size, dx, lddx, dx_beta);
}
