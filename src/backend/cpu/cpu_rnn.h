/* cpu_rnn.h — one direction of one GRU or LSTM layer over a packed batch,
 * forward and backward, on the CPU (the reference implementation).
 *
 * Input projections of all time steps are one GEMM; the per-step work is the
 * recurrent product over the running prefix of the batch plus the gate
 * arithmetic; weight gradients are one GEMM each over the whole sequence.
 * Buffers are owned by the caller (cpu_backend.c sizes them once). */
#ifndef RNND_CPU_RNN_H
#define RNND_CPU_RNN_H

#include "cpu_dnnl.h"
#include "rnnd/batch.h"

typedef struct {
  int cell;        /* rnnd_cell */
  int hidden;
  int input_size;
  int reverse;     /* 1: runs from each piece's end to its start */
  const float *w_ih, *w_hh, *b_ih, *b_hh;
  float *gw_ih, *gw_hh, *gb_ih, *gb_hh; /* gradients, accumulated */
  /* Segmented backpropagation (forward direction only; all NULL/0 for a
   * batch that starts and ends its pieces). h0/c0 [batch_sizes[0], H]: the
   * state the pieces carry into the first step instead of zeros. dh_last/
   * dc_last [last_rows, H]: dL/d(state after the last step) of the first
   * last_rows pieces, which go on in a later segment. dh0/dc0 receive
   * dL/dh0 and dL/dc0 (needs h0). ld0: row stride of h0 and c0 (0: hidden). */
  const float *h0, *c0;
  int ld0;
  const float *dh_last, *dc_last;
  int last_rows;
  float *dh0, *dc0;
  /* bf16 products (all NULL: fp32 through the BLAS): oneDNN, the weights
   * in bf16, and the layer's input and output in bf16 words with the same
   * leading dimensions as x and out (out16 at this direction's first
   * column). Forward writes each step's h into out16 as it goes, which the
   * next step's recurrent product reads; backward reads both. The gate
   * arithmetic stays fp32. */
  cpu_dnnl *dnnl;
  const uint16_t *w_ih16, *w_hh16;
  const uint16_t *x16;
  uint16_t *out16;
} cpu_rnn_dir;

/* Activations one direction keeps for its backward pass. */
typedef struct {
  float *gates;    /* [tokens, gates*H] after the nonlinearities */
  float *extra;    /* [tokens, H]: GRU's W_hn h + b_hn, LSTM's cell state */
} cpu_rnn_saved;

/* Scratch shared by all layers (sizes in floats). */
typedef struct {
  float *step_gates;  /* [max_pieces, gates*H] GRU recurrent product */
  float *carry_h;     /* [max_pieces, H] */
  float *carry_c;     /* [max_pieces, H] */
  float *d_gates_ih;  /* [tokens, gates*H] */
  float *d_gates_hh;  /* [tokens, gates*H] (GRU only; LSTM uses d_gates_ih) */
  float *h_prev;      /* [tokens, H] */
  float *zeros;       /* [H] all zero: the state before a piece starts */
  float *gate_bias;   /* [gates*H] LSTM: b_ih + b_hh, where the input product starts */
  float *sink;        /* [max_pieces, H] write target for carries nobody reads */
  /* bf16 products only (else NULL) */
  uint16_t *h0_16;    /* [max_pieces, H] the initial state, for the first step's product */
  uint16_t *d_ih16;   /* [tokens, gates*H] the gate gradients in bf16 */
  uint16_t *d_hh16;   /* [tokens, gates*H] (GRU only) */
  uint16_t *h_prev16; /* [tokens, H] */
} cpu_rnn_scratch;

/* out points at this direction's first column; ld* are row strides. */
void cpu_rnn_forward(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, float *out, int ldo,
                     cpu_rnn_saved *saved, cpu_rnn_scratch *s);
/* Accumulates weight gradients and writes dx = beta*dx + d(loss)/dx. */
void cpu_rnn_backward(const cpu_rnn_dir *d, const rnnd_batch *b, const float *x, int ldx, const float *out,
                      int ldo, const float *dout, int lddo, const cpu_rnn_saved *saved, float *dx, int lddx,
                      float dx_beta, cpu_rnn_scratch *s);

#endif
