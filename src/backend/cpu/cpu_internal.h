/* cpu_internal.h — the CPU backend's state, shared by cpu_backend.c (the
 * layers, segments and streams) and cpu_heads.c (what the task and the
 * decoder put on the layers: the heads and the first layer's input). Not
 * part of the public interface. Every buffer is taken with cpu_take (below)
 * and freed by cpu_backend.c's destroy. */
#ifndef RNND_CPU_INTERNAL_H
#define RNND_CPU_INTERNAL_H

#include <stdint.h>

#include "cpu_dnnl.h"
#include "cpu_rnn.h"
#include "rnnd/backend.h"
#include "rnnd/common.h"

/* Rows of logits per decoder block: large enough that each GEMM amortises
 * packing the [vocab x top] weight (64 MiB of logits at most). */
#define DECODER_BLOCK_FLOATS (1 << 24)
#define DECODER_MIN_ROWS 64
#define SOFTMAX_CHUNK_ROWS 32

/* How the segment being run connects to its neighbours (all NULL/0 when a
 * batch runs whole): per layer the state it starts from, and the gradient
 * buffer that brings dL/d(final state) from the later segment and takes
 * dL/d(initial state) to the earlier one. */
typedef struct {
  const float *h0[RNND_MAX_LAYERS], *c0[RNND_MAX_LAYERS];
  int ld0;       /* row stride of h0 and c0 (0: hidden) */
  float *dh[RNND_MAX_LAYERS], *dc[RNND_MAX_LAYERS];
  int last_rows; /* pieces that go on after this segment's last step */
} segment_link;

typedef struct cpu_backend cpu_backend;

/* What sits on the top layer (model.task and model.decoder): the full
 * softmax, the adaptive softmax, the classifier or the forecaster. One
 * constant table each; cpu_head_for picks it once, at creation. */
typedef struct {
  const char *name;
  /* The head's buffers (cpu_take), sized by the backend's capacity. */
  void (*allocate)(cpu_backend *cb);
  /* The loss sum of batch (or segment view) b from the top layer's output y.
   * With grads: adds weight * the head's gradients into them and writes
   * dL/dy into dy; grads NULL: evaluation (dy unused). */
  double (*loss)(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy, const rnnd_batch *b,
                 float weight);
  /* Inference (predict_batch): for each piece of view b whose last step
   * lies in it, its output row (rnnd_output_width floats) into row i of
   * out, i the piece's place in b. */
  void (*outputs)(cpu_backend *cb, const float *params, const float *y, const rnnd_batch *b, float *out);
  /* 1: the head reads the top layer before the dropout above it (the
   * classifier reads the final states, what nn.GRU returns as h_n). */
  int reads_before_dropout;
  /* Optional (NULL: the head computes in fp32): the head's weights that its
   * bf16 products read from cb->weights16, as *count floats from *offset
   * of the flat buffer; only these and the layers' matrices are rounded
   * into weights16 for each batch. */
  void (*bf16_weights)(const cpu_backend *cb, size_t *offset, size_t *count);
} cpu_head_ops;

/* What feeds the first layer: the embedding of the inputs, or (regress) the
 * input projection of the series values. dr: the batch's regularisers
 * (NULL: none); the embedding applies its embedding dropout. */
typedef struct {
  const char *name;
  void (*forward)(const cpu_backend *cb, const float *params, const rnnd_batch *b, const rnnd_dropout *dr, float *x0);
  /* Adds dL/d(x0) into the gradients of the parameters that made x0. */
  void (*backward)(const cpu_backend *cb, float *grads, const rnnd_batch *b, const rnnd_dropout *dr,
                   const float *d_x0);
} cpu_input_ops;

struct cpu_backend {
  rnnd_backend base;
  rnnd_backend_capacity cap;
  int layers, directions, hidden, embed, vocab, top, gates;
  float *layer_in[RNND_MAX_LAYERS + 1]; /* own buffers; [layers] feeds the decoder */
  float *layer_out[RNND_MAX_LAYERS];
  cpu_rnn_saved saved[RNND_MAX_LAYERS][2];
  cpu_rnn_scratch scratch;
  float *grad_a, *grad_b; /* [tokens, max(embed, top)] ping-pong */
  float *logits;          /* [decoder_rows, vocab] */
  double *row_nll;        /* [decoder_rows] */
  float *bias_partials;   /* [decoder_rows / SOFTMAX_CHUNK_ROWS (rounded up), vocab] */
  float *softmax_exps;    /* same shape: each chunk's row of exponentials */
  int decoder_rows;
  /* adaptive decoder: one cluster's rows of a block at a time */
  int head_size, widest_cluster, widest_tail;
  int32_t *tail_rows;                /* [decoder_rows] block rows whose target is in the cluster */
  float *tail_y, *tail_dy;           /* [decoder_rows, top] */
  float *tail_p, *tail_dp;           /* [decoder_rows, widest_tail] */
  float *tail_logits;                /* [decoder_rows, widest_cluster] */
  int64_t last_train_tokens; /* rows of the last train_batch, for gate histograms */
  rnnd_dtype storage;
  /* 16-bit storage only: every layer's saved activations. The fp32 buffers
   * above then exist for one layer (layer_in[0], layer_out[0], saved[0]). */
  uint16_t *in16[RNND_MAX_LAYERS + 1], *out16[RNND_MAX_LAYERS];
  uint16_t *gates16[RNND_MAX_LAYERS][2], *extra16[RNND_MAX_LAYERS][2];
  /* bf16 products (storage bf16 with oneDNN in the build; else NULL): the
   * weights of the current batch in bf16 (converted once per batch), the
   * decoder input in bf16 (in16[layers]) and the decoder's gradient rows in
   * bf16 ([decoder_rows, vocab]). */
  cpu_dnnl *dnnl;
  uint16_t *weights16;
  const uint16_t *decoder_input16;
  uint16_t *dlogits16;
  char compute_note[256]; /* what the products run on, for the start-up line */
  size_t activation_bytes, workspace_bytes;
  /* Segmented backpropagation (capacity.bptt_segment = K > 0): batches are
   * run K steps at a time, so the buffers above hold one segment. */
  int segment;
  int64_t rows;                             /* activation rows: a whole batch, or one segment */
  int64_t *segment_offsets;                 /* [K + 1] step offsets of the current view */
  float *boundary_h[RNND_MAX_LAYERS];       /* [segments, max_pieces, hidden]: state entering each segment */
  float *boundary_c[RNND_MAX_LAYERS];       /* LSTM cell state, same shape */
  float *carry_dh[RNND_MAX_LAYERS];         /* [max_pieces, hidden]: dL/d(state) into the previous segment */
  float *carry_dc[RNND_MAX_LAYERS];
  segment_link link;                        /* what the layers of the current segment connect to */
  const cpu_head_ops *head;
  const cpu_input_ops *input;
  /* model.task = classify: the head on each piece's final hidden state */
  int n_classes;
  float *features, *d_features; /* [max_pieces, top] */
  float *class_logits;          /* [max_pieces, n_classes] */
  int32_t *class_pieces;        /* [max_pieces] */
  /* model.task = regress: input projection and next-step head */
  int n_features;
  float *prediction;            /* [rows, n_features], then d(loss)/d(prediction) */
  rnnd_head_stats stats;        /* of the last batch (classify, regress) */
  /* weight dropout (capacity.weight_dropout): every hidden-to-hidden
   * matrix dropped for the current training batch, its gradient, and (bf16
   * products) its bf16 copy, at hh_at[layer][dir]; hh_dropped says the
   * layers read them. */
  float *hh_copy, *hh_grad;
  uint16_t *hh_copy16;
  int64_t hh_at[RNND_MAX_LAYERS][2];
  int hh_dropped;
  /* carry_state for the next batch (borrowed; NULL: zero state) */
  const float *stream_in;
  float *stream_out;
};

/* The tables of a model's shape (cpu_heads.c). */
const cpu_head_ops *cpu_head_for(const rnnd_model_shape *s);
const cpu_input_ops *cpu_input_for(const rnnd_model_shape *s);

/* A buffer of rows x cols floats (16-bit words), counted as activations
 * (kept for backward) or workspace in the memory report. */
static inline float *cpu_take(cpu_backend *cb, int64_t rows, int64_t cols, int activation) {
  size_t bytes = (size_t)(rows * cols) * sizeof(float);
  if (activation) cb->activation_bytes += bytes;
  else cb->workspace_bytes += bytes;
  return rnnd_malloc(bytes, "CPU backend buffer");
}
static inline uint16_t *cpu_take16(cpu_backend *cb, int64_t rows, int64_t cols, int activation) {
  size_t bytes = (size_t)(rows * cols) * sizeof(uint16_t);
  if (activation) cb->activation_bytes += bytes;
  else cb->workspace_bytes += bytes;
  return rnnd_malloc(bytes, "CPU backend 16-bit buffer");
}

#endif
