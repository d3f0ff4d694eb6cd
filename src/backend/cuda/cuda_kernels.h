/* cuda_kernels.h — the few CUDA kernels the CUDA backend needs beside cuDNN
 * and cuBLAS, behind C launchers: embedding gather and scatter-add,
 * counter-keyed dropout (the CPU backend's masks, bit for bit), fused
 * softmax cross-entropy, 16-bit casts, the copies between the canonical
 * (PyTorch-named) parameter buffer and cuDNN's weight space, and a
 * deterministic sum.
 *
 * "Data" buffers hold the activation format D (rnnd_dtype: fp32, fp16 or
 * bf16); parameters, gradients and logits are always fp32. Every launcher
 * enqueues on `stream` and checks the launch. */
#ifndef RNND_CUDA_KERNELS_H
#define RNND_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "rnnd/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One contiguous run of elements of a parameter: canonical[canonical_offset
 * + i] <-> weight space bytes at space_offset as type D, i < count. */
typedef struct {
  int64_t canonical_offset; /* floats into the canonical buffer */
  int64_t space_offset;     /* bytes into the weight-space allocation */
  int64_t count;
} cuda_weight_segment;

/* One gate's block of a hidden-to-hidden matrix in a layer's weight space,
 * for weight dropout: `count` elements, row-major with `width` columns, that
 * are rows first_row.. of matrix `matrix` (2 * layer + direction, rng.h's
 * numbering) and start at canonical_offset in the canonical buffer; the
 * block's weights are at space_offset and its gradient at grad_offset
 * (bytes into the weight-space allocation). */
typedef struct {
  int64_t canonical_offset;
  int64_t space_offset, grad_offset;
  int64_t count, first_row;
  int matrix, width;
} cuda_hh_block;

/* x[r, :] = table[ids[r], :] times word ids[r]'s embedding-dropout factor
 * of (seed, step, p) (rng.h; p 0: none), r < rows; table and x both in D. */
void cuda_gather_embedding(void *x, rnnd_dtype d, const void *table, const int32_t *ids, int64_t rows, int width,
                           uint64_t seed, int64_t step, float p, cudaStream_t stream);
/* grad_table[ids[r], :] += dx[r, :] times the same factor. */
void cuda_scatter_add_embedding(float *grad_table, const void *dx, rnnd_dtype d, const int32_t *ids, int64_t rows,
                                int width, uint64_t seed, int64_t step, float p, cudaStream_t stream);
/* dst = src * mask / (1 - p) in place or not; the mask of row r depends on
 * (slot_key, row_piece[r], row_position[r] (0 when locked), unit) as in rng.h. */
void cuda_dropout(void *dst, const void *src, rnnd_dtype d, int64_t rows, int width, const int64_t *row_piece,
                  const int32_t *row_position, uint64_t slot_key, float p, int locked, cudaStream_t stream);
/* AR's gradient: dy[i] += k y[i], i < n, both in D. */
void cuda_add_scaled(void *dy, const void *y, rnnd_dtype d, int64_t n, float k, cudaStream_t stream);
/* TAR's gradient: dh[r] += k (h[r] - h[prev[r]]) - k (h[next[r]] - h[r]) for
 * the rows of the step before and after in the same piece (-1: none). */
void cuda_add_temporal(void *dh, const void *h, rnnd_dtype d, const int64_t *prev, const int64_t *next, int64_t rows,
                       int width, float k, cudaStream_t stream);
/* Per row: logits += bias (in D); row_nll[r] = logsumexp - logit[target]. With
 * weight > 0 the row becomes weight * (softmax - onehot(target)) in fp32,
 * and also in D into grad16 when grad16 is not NULL. */
void cuda_softmax_xent(float *logits, void *grad16, rnnd_dtype d, const void *bias, const int32_t *targets,
                       int rows, int vocab, float weight, double *row_nll, cudaStream_t stream);
/* *out = sum of x[0..n) in a fixed order (one block). */
void cuda_sum_f64(const double *x, int64_t n, double *out, cudaStream_t stream);
void cuda_fill_f32(float *x, float value, int64_t n, cudaStream_t stream);
/* dst (as D) = src, n elements. */
void cuda_cast_from_f32(void *dst, rnnd_dtype d, const float *src, int64_t n, cudaStream_t stream);
/* Weight space <- canonical parameters (cast to D), and canonical gradient
 * += weight-space gradient, over `n` segments (the table in device memory). */
void cuda_canonical_to_space(void *space, rnnd_dtype d, const float *canonical, const cuda_weight_segment *segments,
                             int n, int64_t longest, cudaStream_t stream);
void cuda_space_add_to_canonical(float *canonical, const void *space, rnnd_dtype d,
                                 const cuda_weight_segment *segments, int n, int64_t longest, cudaStream_t stream);
/* Weight dropout (rng.h's factors of (seed, step, p): 0 or 1 / (1 - p)).
 * to_space: each block's weights in the space = canonical weights times
 * the factors, rounded once to D (p 0: the undropped weights back);
 * scale_gradient: each block's weight-space gradient times the same
 * factors, which turns dL/d(dropped W_hh) into dL/dW_hh. */
void cuda_hh_dropout_to_space(void *space, rnnd_dtype d, const float *canonical, const cuda_hh_block *blocks, int n,
                              int64_t longest, uint64_t seed, int64_t step, float p, cudaStream_t stream);
void cuda_hh_dropout_scale_gradient(void *space, rnnd_dtype d, const cuda_hh_block *blocks, int n, int64_t longest,
                                    uint64_t seed, int64_t step, float p, cudaStream_t stream);

/* --- the task heads and the carried state (cuda_heads.c, cuda_segments.c) --- */

/* Layer `layer`'s h and c (c may be NULL: GRU), [pieces, hidden] in D, from
 * and to rows of a carried state (rnnd_state_width floats a row: per layer
 * h then c; a GRU's c is written as zeros). */
void cuda_state_split(void *h, void *c, rnnd_dtype d, const float *state, int pieces, int width, int layer,
                      int hidden, cudaStream_t stream);
void cuda_state_join(float *state, const void *h, const void *c, rnnd_dtype d, int pieces, int width, int layer,
                     int hidden, cudaStream_t stream);
/* features[k] = [y[fwd_rows[k], 0:H] | y[bwd_rows[k], H:2H]] for k < n (the
 * second half only when bidirectional), y rows H * directions wide; and
 * the scatter back into those places of dy. */
void cuda_gather_final(void *features, const void *y, rnnd_dtype d, const int32_t *fwd_rows, const int32_t *bwd_rows,
                       int n, int hidden, int directions, cudaStream_t stream);
void cuda_scatter_final(void *dy, const void *d_features, rnnd_dtype d, const int32_t *fwd_rows,
                        const int32_t *bwd_rows, int n, int hidden, int directions, cudaStream_t stream);
/* correct[r] = (argmax_j logits[r, j] + bias[j]) == labels[r] (first maximum). */
void cuda_count_correct(const float *logits, const void *bias, rnnd_dtype d, const int32_t *labels, int rows,
                        int classes, int32_t *correct, cudaStream_t stream);
/* The regression head's loss per row (pred + bias against target, mean
 * squared error over the features of a scored row, else 0), its squared
 * and absolute errors in original units (times std), and in pred (and in
 * D into grad16 when not NULL) weight * d(loss)/d(prediction). */
void cuda_mse(float *pred, void *grad16, rnnd_dtype d, const void *bias, const float *target, const uint8_t *scored,
              const float *std, int rows, int features, float weight, double *row_loss, double *row_sq,
              double *row_abs, cudaStream_t stream);
/* dst[r, :] = row[:] for r < rows (both in D). */
void cuda_fill_rows(void *dst, rnnd_dtype d, const void *row, int64_t rows, int width, cudaStream_t stream);
/* dst[j] += sum_r src[r, j] (src in D), summed in row order. */
void cuda_add_column_sums(float *dst, const void *src, rnnd_dtype d, int64_t rows, int width, cudaStream_t stream);
/* *acc += *x on the device. */
void cuda_add_f64(double *acc, const double *x, cudaStream_t stream);

/* --- the device-resident step (cuda_step.c) --- */

/* Blocks of the fixed grid the norm kernels use: their per-block partial
 * sums, added by cuda_sum_f64 in block order, make every norm a
 * deterministic function of the data (the same on every rank). */
#define CUDA_NORM_BLOCKS 512

/* wire[i] = g[i] in the 16-bit format w; counts[0] += non-zero values,
 * counts[1] += those that became zero. */
void cuda_to_wire(void *wire, rnnd_dtype w, const float *g, int64_t n, unsigned long long *counts,
                  cudaStream_t stream);
void cuda_from_wire(float *g, const void *wire, rnnd_dtype w, int64_t n, cudaStream_t stream);
/* x *= scale (skipped when scale == 1) and partials[block] = sum of x^2
 * over the block's elements (CUDA_NORM_BLOCKS blocks). */
void cuda_scale_and_square(float *x, int64_t n, float scale, double *partials, cudaStream_t stream);

/* One optimizer update with the CPU's arithmetic (optim.c): the gradient is
 * first multiplied by clip (1 = no clipping), as grad_clip does. Writes the
 * updated master weights and partials of sum(update^2) and sum(param^2)
 * (CUDA_NORM_BLOCKS each). */
typedef struct {
  float beta1, beta2, eps, weight_decay, momentum;
  float step_size;          /* Adam: lr / (1 - beta1^t); SGD: lr */
  float correction2_sqrt;   /* Adam: sqrt(1 - beta2^t) */
  float clip;
  int adam, first_step;
} cuda_update_args;
void cuda_optimizer_update(float *params, const float *grads, float *m, float *v, int64_t n,
                           const cuda_update_args *args, double *update_partials, double *param_partials,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
