/* cpu_internal.h — the CPU backend's state, shared by cpu_backend.c (the
 * layers, the full-softmax decoder, segments and streams) and cpu_heads.c
 * (adaptive softmax, classifier and forecaster heads). Not part of the
 * public interface; ownership of every buffer is cpu_backend.c's. */
#ifndef RNND_CPU_INTERNAL_H
#define RNND_CPU_INTERNAL_H

#include <stdint.h>

#include "cpu_rnn.h"
#include "rnnd/backend.h"

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

typedef struct {
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
  /* model.task = classify: the head on each piece's final hidden state */
  int classify, n_classes;
  float *features, *d_features; /* [max_pieces, top] */
  float *class_logits;          /* [max_pieces, n_classes] */
  int32_t *class_pieces;        /* [max_pieces] */
  /* model.task = regress: input projection and next-step head */
  int regress, n_features;
  float *prediction;            /* [rows, n_features], then d(loss)/d(prediction) */
  rnnd_head_stats stats;        /* of the last batch (classify, regress) */
  /* carry_state for the next batch (borrowed; NULL: zero state) */
  const float *stream_in;
  float *stream_out;
} cpu_backend;

/* The heads in place of the full-softmax decoder (cpu_heads.c). Each takes
 * the decoder input y (the classifier: the top layer before dropout, from
 * cb), returns the batch's loss sum, and with grads adds weight * its
 * gradient into them and writes dL/dy into dy. */
double cpu_adaptive_decoder(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                            const rnnd_batch *b, float weight);
double cpu_classifier(cpu_backend *cb, const float *params, float *grads, const rnnd_batch *v, float *dy,
                      float weight);
double cpu_regression_head(cpu_backend *cb, const float *params, float *grads, const float *y, float *dy,
                           const rnnd_batch *b, float weight);

#endif
