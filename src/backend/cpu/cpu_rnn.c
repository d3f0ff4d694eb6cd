/* cpu_rnn.c — packed GRU/LSTM direction, forward and backward (cpu_rnn.h).
 *
 * Gate formulas are PyTorch's (and cuDNN's):
 *   GRU:  r = s(Wir x + bir + Whr h + bhr)   z = s(Wiz x + biz + Whz h + bhz)
 *         n = tanh(Win x + bin + r * (Whn h + bhn))   h' = (1 - z) n + z h
 *   LSTM: i,f,o = s(.), g = tanh(.), c' = f c + i g, h' = o tanh(c')
 * Pieces are sorted longest first, so the rows that have a state from the
 * previous step of a direction are always a prefix of the current step.
 *
 * The time loop runs inside one OpenMP team: each member owns a slice of the
 * hidden units, computes the recurrent product for its units' gate rows of
 * W_hh (single-threaded BLAS) and their gate arithmetic, then waits at one
 * barrier per step. The whole-batch products before and after the loop use
 * the team through gemm_*_par.
 *
 * With bf16 products (cpu_rnn_dir.dnnl) every product takes bf16 operands
 * through oneDNN with fp32 accumulation: the layer input and output are the
 * caller's bf16 copies, each step's h is rounded into out16 as it is made
 * (the next step's product reads it), and the gate gradients are rounded
 * into bf16 copies beside their fp32 values (the bias gradients and the
 * gate arithmetic stay fp32). */
#include "cpu_rnn.h"

#include <math.h>
#include <string.h>

#include "cpu_blas.h"
#include "cpu_math.h"
#include "rnnd/config.h"
#include "rnnd/half.h"

/* Unit slices are multiples of 8 floats: whole vectors for the gate loops. */
#define UNIT_ALIGN 8

typedef struct {
  int begin, end; /* hidden units owned by this team member */
} unit_slice;

static unit_slice my_units(int hidden) {
  unit_slice u = {0, hidden};
#ifdef _OPENMP
  split_range(hidden, omp_get_thread_num(), omp_get_num_threads(), UNIT_ALIGN, &u.begin, &u.end);
#endif
  return u;
}

/* Team size for a layer: one member per UNIT_ALIGN units at most. */
static int team_size(int hidden) {
#ifdef _OPENMP
  int n = omp_get_max_threads(), most = (hidden + UNIT_ALIGN - 1) / UNIT_ALIGN;
  return n < most ? n : most;
#else
  (void)hidden;
  return 1;
#endif
}

/* The state that step t continues: its first `rows` rows carry on from
 * row i of h (stride ldh) and, for an LSTM, of c (stride H). That is the
 * direction's previous step, or the given initial state at a forward
 * direction's first step. */
typedef struct {
  int rows;
  const float *h, *c;
  int ldh, ldc;
  const uint16_t *h16; /* bf16 products: the same rows of h in bf16 (stride ldh) */
} prior_state;

static prior_state state_before(const cpu_rnn_dir *d, const rnnd_batch *b, int t, const float *out, int ldo,
                                const float *extra) {
  const int H = d->hidden;
  prior_state p = {0, NULL, NULL, 0, 0, NULL};
  if (!d->reverse && t == 0) {
    int ld0 = d->ld0 ? d->ld0 : H;
    if (d->h0) p = (prior_state){b->batch_sizes[0], d->h0, d->c0, ld0, ld0, NULL};
  } else if (d->reverse ? t != b->n_steps - 1 : 1) {
    int prev = d->reverse ? t + 1 : t - 1;
    int64_t prev0 = b->step_offsets[prev];
    p.rows = b->batch_sizes[d->reverse ? t + 1 : t];
    p.h = out ? out + prev0 * ldo : NULL;
    p.c = extra ? extra + prev0 * H : NULL;
    p.ldh = ldo;
    p.ldc = H;
    p.h16 = d->out16 ? d->out16 + prev0 * ldo : NULL;
  }
  return p;
}

/* Time step that a direction visits k-th in its forward order. */
static int step_at(const cpu_rnn_dir *d, const rnnd_batch *b, int k) {
  return d->reverse ? b->n_steps - 1 - k : k;
}

/* bf16 products: the previous state in bf16 for step t's product: the
 * previous step's rows of out16, or the initial state converted into h0_16. */
static const uint16_t *state16(const prior_state *p, const cpu_rnn_scratch *s, int hidden, int *ld) {
  *ld = p->h16 ? p->ldh : hidden;
  return p->h16 ? p->h16 : s->h0_16;
}

/* For the member's units u, all gates q: gates[:, q*H + u] = b_hh +
 * h_prev W_hh^T (GRU's separate recurrent part, start_with_bias), or
 * gates[:, q*H + u] += h_prev W_hh^T (LSTM, whose gates already hold both
 * biases). */
static void recurrent_product(const cpu_rnn_dir *d, int gates, int rows, const prior_state *p,
                              const cpu_rnn_scratch *s, float *out, int ldo, int start_with_bias, unit_slice u) {
  const int H = d->hidden, width = u.end - u.begin;
  int ld16 = 0;
  const uint16_t *h16 = d->dnnl ? state16(p, s, H, &ld16) : NULL;
  for (int q = 0; q < gates; q++) {
    float *col = out + q * H + u.begin;
    if (start_with_bias) {
      const float *bias = d->b_hh + q * H + u.begin;
      for (int i = 0; i < rows; i++) memcpy(col + (int64_t)i * ldo, bias, (size_t)width * sizeof *col);
    }
    if (!p->rows) continue;
    if (d->dnnl)
      bf16_gemm_nt(d->dnnl, p->rows, width, H, h16, ld16, d->w_hh16 + (int64_t)(q * H + u.begin) * H, H, col, ldo,
                   1.0f);
    else
      gemm_nt(p->rows, width, H, p->h, p->ldh, d->w_hh + (int64_t)(q * H + u.begin) * H, H, col, ldo, 1.0f);
  }
}

/* Rounds h[begin, end) into its bf16 copy (the next step's product reads it). */
static void round_row16(const float *h, uint16_t *h16, int begin, int end) {
  for (int j = begin; j < end; j++) h16[j] = rnnd_f32_to_bf16(h[j]);
}

/* One row of GRU gate arithmetic over units [begin, end): g holds the input
 * part of the gates and receives r, z, n; gh is the recurrent part. The
 * pointers never overlap (restrict lets the loop vectorise). */
static inline void gru_forward_row(int H, int begin, int end, float *restrict g, const float *restrict gh,
                                   const float *restrict hp, float *restrict h, float *restrict hn_saved) {
  for (int j = begin; j < end; j++) {
    float r = fast_sigmoidf(g[j] + gh[j]);
    float z = fast_sigmoidf(g[H + j] + gh[H + j]);
    float hn = gh[2 * H + j];
    float n = fast_tanhf(g[2 * H + j] + r * hn);
    h[j] = n + z * (hp[j] - n);
    g[j] = r;
    g[H + j] = z;
    g[2 * H + j] = n;
    hn_saved[j] = hn;
  }
}

static void gru_forward_step(const cpu_rnn_dir *d, const rnnd_batch *b, int t, float *out, int ldo,
                             cpu_rnn_saved *sv, cpu_rnn_scratch *s, unit_slice u) {
  const int H = d->hidden, G = 3 * H, bs = b->batch_sizes[t];
  const int64_t row0 = b->step_offsets[t];
  const prior_state p = state_before(d, b, t, out, ldo, NULL);
  float *gh = s->step_gates;
  recurrent_product(d, 3, bs, &p, s, gh, G, 1, u);
  for (int i = 0; i < bs; i++) {
    const float *hp = i < p.rows ? p.h + (int64_t)i * p.ldh : s->zeros;
    float *h = out + (row0 + i) * ldo;
    gru_forward_row(H, u.begin, u.end, sv->gates + (row0 + i) * G, gh + (int64_t)i * G, hp, h,
                    sv->extra + (row0 + i) * H);
    if (d->out16) round_row16(h, d->out16 + (row0 + i) * ldo, u.begin, u.end);
  }
}

/* One row of LSTM gate arithmetic over units [begin, end): g holds the gate
 * pre-activations and receives i, f, g, o; cp is the previous cell. */
static inline void lstm_forward_row(int H, int begin, int end, float *restrict g, const float *restrict cp,
                                    float *restrict c, float *restrict h) {
  for (int j = begin; j < end; j++) {
    float ig = fast_sigmoidf(g[j]), fg = fast_sigmoidf(g[H + j]);
    float gg = fast_tanhf(g[2 * H + j]), og = fast_sigmoidf(g[3 * H + j]);
    float cell = ig * gg + fg * cp[j];
    c[j] = cell;
    h[j] = og * fast_tanhf(cell);
    g[j] = ig;
    g[H + j] = fg;
    g[2 * H + j] = gg;
    g[3 * H + j] = og;
  }
}

static void lstm_forward_step(const cpu_rnn_dir *d, const rnnd_batch *b, int t, float *out, int ldo,
                              cpu_rnn_saved *sv, const cpu_rnn_scratch *s, unit_slice u) {
  const int H = d->hidden, G = 4 * H, bs = b->batch_sizes[t];
  const int64_t row0 = b->step_offsets[t];
  const prior_state p = state_before(d, b, t, out, ldo, sv->extra);
  float *gates = sv->gates + row0 * G;
  recurrent_product(d, 4, bs, &p, s, gates, G, 0, u);
  for (int i = 0; i < bs; i++) {
    const float *cp = i < p.rows ? p.c + (int64_t)i * p.ldc : s->zeros;
    float *h = out + (row0 + i) * ldo;
    lstm_forward_row(H, u.begin, u.end, gates + (int64_t)i * G, cp, sv->extra + (row0 + i) * H, h);
    if (d->out16) round_row16(h, d->out16 + (row0 + i) * ldo, u.begin, u.end);
  }
}


/* bf16 products: the initial state of a forward direction in bf16, for its first step. */
static void initial_state16(const cpu_rnn_dir *d, const rnnd_batch *b, cpu_rnn_scratch *s) {
  if (!d->dnnl || d->reverse || !d->h0) return;
  const int H = d->hidden, ld0 = d->ld0 ? d->ld0 : H;
  for (int i = 0; i < b->batch_sizes[0]; i++)
    for (int j = 0; j < H; j++) s->h0_16[(int64_t)i * H + j] = rnnd_f32_to_bf16(d->h0[(int64_t)i * ld0 + j]);
}

void cpu_rnn_forward(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, float *out, int ldo,
                     cpu_rnn_saved *saved, cpu_rnn_scratch *s) {
  const int lstm = d->cell == RNND_CELL_LSTM, G = (lstm ? 4 : 3) * d->hidden;
  /* An LSTM's b_hh joins b_ih here, once, rather than being added to each
   * step's gate rows in the time loop, where they are not yet in cache. */
  if (lstm)
    for (int j = 0; j < G; j++) s->gate_bias[j] = d->b_ih[j] + d->b_hh[j];
  fill_rows(saved->gates, b->n_tokens, G, lstm ? s->gate_bias : d->b_ih);
  if (d->dnnl)
    bf16_gemm_nt(d->dnnl, (int)b->n_tokens, G, d->input_size, d->x16, ldx, d->w_ih16, d->input_size, saved->gates, G,
                 1.0f);
  else
    gemm_nt_par((int)b->n_tokens, G, d->input_size, x, ldx, d->w_ih, d->input_size, saved->gates, G, 1.0f);
  initial_state16(d, b, s);
#pragma omp parallel num_threads(team_size(d->hidden))
  {
    unit_slice u = my_units(d->hidden);
    for (int k = 0; k < b->n_steps; k++) {
      int t = step_at(d, b, k);
      if (lstm) lstm_forward_step(d, b, t, out, ldo, saved, s, u);
      else gru_forward_step(d, b, t, out, ldo, saved, s, u);
      /* the next step's recurrent product reads every unit of this one */
#pragma omp barrier
    }
  }
}

/* The carry a row's gate arithmetic updates in place over units
 * [begin, end): the row's own carry when the row has an earlier state,
 * else its sink row (written and never read). Either way it starts as the
 * row's incoming carry: the carry itself for the first `carried` rows, zero
 * for the rest. One in-place pointer lets the gate loops vectorise. */
static float *carry_row(float *carry, float *sink, int i, int H, int carried, int with_state, int begin, int end) {
  float *own = carry + (int64_t)i * H, *row = i < with_state ? own : sink + (int64_t)i * H;
  if (i >= carried) memset(row + begin, 0, (size_t)(end - begin) * sizeof *row);
  else if (row != own) memcpy(row + begin, own + begin, (size_t)(end - begin) * sizeof *row);
  return row;
}

/* bf16 products: rounds gates [0, gates) of a gradient row, units [begin, end). */
static void round_gates16(const float *row, uint16_t *row16, int gates, int H, int begin, int end) {
  for (int q = 0; q < gates; q++) round_row16(row + q * H, row16 + q * H, begin, end);
}

/* One row of GRU gate gradients: dgi (input side) and dgh (recurrent side);
 * carry holds dL/dh from the later step and receives the direct part dh * z. */
static inline void gru_backward_row(int H, int begin, int end, const float *restrict g, const float *restrict hn,
                                    const float *restrict hp, const float *restrict dh_out, float *restrict carry,
                                    float *restrict dgi, float *restrict dgh) {
  for (int j = begin; j < end; j++) {
    float dh = dh_out[j] + carry[j];
    float r = g[j], z = g[H + j], n = g[2 * H + j];
    float dn_pre = dh * (1.0f - z) * (1.0f - n * n);
    float dz_pre = dh * (hp[j] - n) * z * (1.0f - z);
    float dr_pre = dn_pre * hn[j] * r * (1.0f - r);
    dgi[j] = dgh[j] = dr_pre;
    dgi[H + j] = dgh[H + j] = dz_pre;
    dgi[2 * H + j] = dn_pre;
    dgh[2 * H + j] = dn_pre * r;
    carry[j] = dh * z;
  }
}

/* One GRU step of backpropagation through time for the member's units.
 * carry_h holds dL/dh for the first `carried` rows (from the step visited
 * before this one); afterwards it holds the direct part dh * z. */
static void gru_backward_gates(const cpu_rnn_dir *d, const rnnd_batch *b, int t, const float *out, int ldo,
                               const float *dout, int lddo, const cpu_rnn_saved *sv, cpu_rnn_scratch *s, int carried,
                               unit_slice u) {
  const int H = d->hidden, G = 3 * H, bs = b->batch_sizes[t];
  const int64_t row0 = b->step_offsets[t];
  const prior_state p = state_before(d, b, t, out, ldo, NULL);
  for (int i = 0; i < bs; i++) {
    const float *hp = i < p.rows ? p.h + (int64_t)i * p.ldh : s->zeros;
    float *carry = carry_row(s->carry_h, s->sink, i, H, carried, p.rows, u.begin, u.end);
    float *dgi = s->d_gates_ih + (row0 + i) * G, *dgh = s->d_gates_hh + (row0 + i) * G;
    gru_backward_row(H, u.begin, u.end, sv->gates + (row0 + i) * G, sv->extra + (row0 + i) * H, hp,
                     dout + (row0 + i) * lddo, carry, dgi, dgh);
    if (d->dnnl) {
      round_gates16(dgi, s->d_ih16 + (row0 + i) * G, 3, H, u.begin, u.end);
      round_gates16(dgh, s->d_hh16 + (row0 + i) * G, 3, H, u.begin, u.end);
    }
  }
}

/* One row of LSTM gate gradients into dg; carry_h is dL/dh from the later
 * step, carry_c holds dL/dc from it and receives dc * f. */
static inline void lstm_backward_row(int H, int begin, int end, const float *restrict g, const float *restrict c,
                                     const float *restrict cp, const float *restrict dh_out,
                                     const float *restrict carry_h, float *restrict carry_c, float *restrict dg) {
  for (int j = begin; j < end; j++) {
    float ig = g[j], fg = g[H + j], gg = g[2 * H + j], og = g[3 * H + j];
    float tc = fast_tanhf(c[j]);
    float dh = dh_out[j] + carry_h[j];
    float dc = carry_c[j] + dh * og * (1.0f - tc * tc);
    dg[j] = dc * gg * ig * (1.0f - ig);
    dg[H + j] = dc * cp[j] * fg * (1.0f - fg);
    dg[2 * H + j] = dc * ig * (1.0f - gg * gg);
    dg[3 * H + j] = dh * tc * og * (1.0f - og);
    carry_c[j] = dc * fg;
  }
}

/* carry_c is private to each unit; carry_h is rebuilt by the product after. */
static void lstm_backward_gates(const cpu_rnn_dir *d, const rnnd_batch *b, int t, const float *dout, int lddo,
                                const cpu_rnn_saved *sv, cpu_rnn_scratch *s, int carried, unit_slice u) {
  const int H = d->hidden, G = 4 * H, bs = b->batch_sizes[t];
  const int64_t row0 = b->step_offsets[t];
  const prior_state p = state_before(d, b, t, NULL, 0, sv->extra);
  for (int i = 0; i < bs; i++) {
    const float *cp = i < p.rows ? p.c + (int64_t)i * p.ldc : s->zeros;
    const float *carry_h = i < carried ? s->carry_h + (int64_t)i * H : s->zeros;
    float *carry_c = carry_row(s->carry_c, s->sink, i, H, carried, p.rows, u.begin, u.end);
    float *dg = s->d_gates_ih + (row0 + i) * G;
    lstm_backward_row(H, u.begin, u.end, sv->gates + (row0 + i) * G, sv->extra + (row0 + i) * H, cp,
                      dout + (row0 + i) * lddo, carry_h, carry_c, dg);
    if (d->dnnl) round_gates16(dg, s->d_ih16 + (row0 + i) * G, 4, H, u.begin, u.end);
  }
}

/* The time loop of backpropagation. Per step: gate gradients for own units,
 * a barrier (the product needs every unit's gate gradient), then
 * dL/dh_prev for own units = (direct part) + d_gates_hh W_hh[:, units]. */
static void backward_through_time(const cpu_rnn_dir *d, const rnnd_batch *b, const float *out, int ldo,
                                  const float *dout, int lddo, const cpu_rnn_saved *sv, cpu_rnn_scratch *s) {
  const int H = d->hidden, lstm = d->cell == RNND_CELL_LSTM, G = (lstm ? 4 : 3) * H;
  const float *d_hh = lstm ? s->d_gates_ih : s->d_gates_hh;
  const uint16_t *d_hh16 = lstm ? s->d_ih16 : s->d_hh16;
  /* a later segment's gradient enters as the carry into the last step */
  const int last_rows = d->dh_last ? d->last_rows : 0;
  if (last_rows) {
    memcpy(s->carry_h, d->dh_last, (size_t)last_rows * H * sizeof(float));
    if (lstm) memcpy(s->carry_c, d->dc_last, (size_t)last_rows * H * sizeof(float));
  }
#pragma omp parallel num_threads(team_size(H))
  {
    unit_slice u = my_units(H);
    int carried = last_rows;
    for (int k = b->n_steps - 1; k >= 0; k--) {
      int t = step_at(d, b, k);
      if (lstm) lstm_backward_gates(d, b, t, dout, lddo, sv, s, carried, u);
      else gru_backward_gates(d, b, t, out, ldo, dout, lddo, sv, s, carried, u);
#pragma omp barrier
      int with_state = state_before(d, b, t, NULL, 0, NULL).rows;
      if (with_state && d->dnnl)
        bf16_gemm_nn(d->dnnl, with_state, u.end - u.begin, G, d_hh16 + b->step_offsets[t] * G, G, d->w_hh16 + u.begin,
                     H, s->carry_h + u.begin, H, lstm ? 0.0f : 1.0f);
      else if (with_state)
        gemm_nn(with_state, u.end - u.begin, G, d_hh + b->step_offsets[t] * G, G, d->w_hh + u.begin, H,
                s->carry_h + u.begin, H, lstm ? 0.0f : 1.0f);
      carried = with_state;
    }
  }
  /* after the first step the carries are the initial state's gradients */
  if (d->h0 && d->dh0) memcpy(d->dh0, s->carry_h, (size_t)b->batch_sizes[0] * H * sizeof(float));
  if (d->h0 && lstm && d->dc0) memcpy(d->dc0, s->carry_c, (size_t)b->batch_sizes[0] * H * sizeof(float));
}

/* Gathers every row's previous hidden state (zero where a piece starts) so
 * the recurrent weight gradient is one GEMM over the whole batch. */
static void gather_previous_states(const cpu_rnn_dir *d, const rnnd_batch *b, const float *out, int ldo,
                                   float *h_prev) {
  const int H = d->hidden;
  for (int t = 0; t < b->n_steps; t++) {
    const int64_t row0 = b->step_offsets[t];
    const prior_state p = state_before(d, b, t, out, ldo, NULL);
    for (int i = 0; i < p.rows; i++)
      memcpy(h_prev + (row0 + i) * H, p.h + (int64_t)i * p.ldh, (size_t)H * sizeof *h_prev);
    memset(h_prev + (row0 + p.rows) * H, 0, (size_t)(b->batch_sizes[t] - p.rows) * H * sizeof *h_prev);
  }
}


/* The same in bf16 from out16 (the initial state converted from h0). */
static void gather_previous_states16(const cpu_rnn_dir *d, const rnnd_batch *b, int ldo, uint16_t *h_prev) {
  const int H = d->hidden;
  for (int t = 0; t < b->n_steps; t++) {
    const int64_t row0 = b->step_offsets[t];
    const prior_state p = state_before(d, b, t, NULL, ldo, NULL);
    for (int i = 0; i < p.rows; i++) {
      uint16_t *dst = h_prev + (row0 + i) * H;
      if (p.h16) memcpy(dst, p.h16 + (int64_t)i * p.ldh, (size_t)H * sizeof *dst);
      else
        for (int j = 0; j < H; j++) dst[j] = rnnd_f32_to_bf16(d->h0[(int64_t)i * p.ldh + j]);
    }
    memset(h_prev + (row0 + p.rows) * H, 0, (size_t)(b->batch_sizes[t] - p.rows) * H * sizeof *h_prev);
  }
}

/* The weight gradients and dx as whole-batch products. */
static void batch_products(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, const float *out,
                           int ldo, float *dx, int lddx, float dx_beta, cpu_rnn_scratch *s) {
  const int H = d->hidden, lstm = d->cell == RNND_CELL_LSTM, G = (lstm ? 4 : 3) * H, in = d->input_size;
  const int T = (int)b->n_tokens;
  if (d->dnnl) {
    const uint16_t *d_ih16 = s->d_ih16, *d_hh16 = lstm ? s->d_ih16 : s->d_hh16;
    gather_previous_states16(d, b, ldo, s->h_prev16);
    bf16_gemm_tn(d->dnnl, G, H, T, d_hh16, G, s->h_prev16, H, d->gw_hh, H, 1.0f);
    bf16_gemm_tn(d->dnnl, G, in, T, d_ih16, G, d->x16, ldx, d->gw_ih, in, 1.0f);
    bf16_gemm_nn(d->dnnl, T, in, G, d_ih16, G, d->w_ih16, in, dx, lddx, dx_beta);
    return;
  }
  const float *d_ih = s->d_gates_ih, *d_hh = lstm ? s->d_gates_ih : s->d_gates_hh;
  gather_previous_states(d, b, out, ldo, s->h_prev);
  gemm_tn_par(G, H, T, d_hh, G, s->h_prev, H, d->gw_hh, H, 1.0f);
  gemm_tn_par(G, in, T, d_ih, G, x, ldx, d->gw_ih, in, 1.0f);
  gemm_nn_par(T, in, G, d_ih, G, d->w_ih, in, dx, lddx, dx_beta);
}

void cpu_rnn_backward(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, const float *out,
                      int ldo, const float *dout, int lddo, const cpu_rnn_saved *saved, float *dx, int lddx,
                      float dx_beta, cpu_rnn_scratch *s) {
  const int lstm = d->cell == RNND_CELL_LSTM, G = (lstm ? 4 : 3) * d->hidden;
  const int T = (int)b->n_tokens;
  backward_through_time(d, b, out, ldo, dout, lddo, saved, s);
  batch_products(d, b, x, ldx, out, ldo, dx, lddx, dx_beta, s);
  add_column_sums(d->gb_ih, s->d_gates_ih, T, G);
  add_column_sums(d->gb_hh, lstm ? s->d_gates_ih : s->d_gates_hh, T, G);
}
