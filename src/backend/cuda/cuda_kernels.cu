/* cuda_kernels.cu — the CUDA backend's own kernels (see cuda_kernels.h).
 * Templates over the activation type keep one body per kernel; the C
 * launchers pick the instance from rnnd_dtype. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "rnnd/rng.h"

namespace {

const int kThreads = 256;

__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(__half x) { return __half2float(x); }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ inline T from_f32(float x);
template <> __device__ inline float from_f32<float>(float x) { return x; }
template <> __device__ inline __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return (unsigned)(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

/* Embedding dropout's factor for word id (the CPU backend's embedding_scale). */
__device__ static float embedding_scale(int32_t id, uint64_t seed, int64_t step, float p) {
  if (p <= 0.0f) return 1.0f;
  return rng_embedding_dropout_uniform(seed, step, id) < p ? 0.0f : 1.0f / (1.0f - p);
}

template <typename T>
__global__ void gather_embedding(T *x, const T *table, const int32_t *ids, int64_t rows, int width, uint64_t seed,
                                 int64_t step, float p) {
  int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / width;
    T v = table[(int64_t)ids[r] * width + (i - r * width)];
    x[i] = p > 0.0f ? from_f32<T>(to_f32(v) * embedding_scale(ids[r], seed, step, p)) : v;
  }
}

template <typename T>
__global__ void scatter_add_embedding(float *grad, const T *dx, const int32_t *ids, int64_t rows, int width,
                                      uint64_t seed, int64_t step, float p) {
  int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / width;
    atomicAdd(&grad[(int64_t)ids[r] * width + (i - r * width)], to_f32(dx[i]) * embedding_scale(ids[r], seed, step, p));
  }
}

/* AR: dy += k y, elementwise. */
template <typename T>
__global__ void add_scaled(T *dy, const T *y, int64_t n, float k) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dy[i] = from_f32<T>(to_f32(dy[i]) + k * to_f32(y[i]));
}

/* TAR: dh[r] += k (h[r] - h[prev[r]]) - k (h[next[r]] - h[r]), rows without
 * a step before or after (prev/next -1) taking only the other term. */
template <typename T>
__global__ void add_temporal(T *dh, const T *h, const int64_t *prev, const int64_t *next, int64_t rows, int width,
                             float k) {
  int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / width, j = i - r * width;
    float here = to_f32(h[i]), g = 0.0f;
    if (prev[r] >= 0) g += k * (here - to_f32(h[prev[r] * width + j]));
    if (next[r] >= 0) g -= k * (to_f32(h[next[r] * width + j]) - here);
    dh[i] = from_f32<T>(to_f32(dh[i]) + g);
  }
}

template <typename T>
__global__ void dropout(T *dst, const T *src, int64_t rows, int width, const int64_t *row_piece,
                        const int32_t *row_position, uint64_t slot_key, float p, int locked) {
  const float scale = 1.0f / (1.0f - p);
  int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / width;
    int unit = (int)(i - r * width);
    uint64_t row_key = rng_dropout_row_key(slot_key, row_piece[r], locked ? 0 : row_position[r]);
    float u = rng_dropout_uniform(row_key, unit);
    dst[i] = from_f32<T>(u < p ? 0.0f : to_f32(src[i]) * scale);
  }
}

/* Block-wide reductions through shared memory (blockDim.x == kThreads). */
__device__ float block_max(float v, float *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  float result = shared[0];
  __syncthreads();
  return result;
}

__device__ float block_sum(float v, float *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  float result = shared[0];
  __syncthreads();
  return result;
}

/* One block per row: bias, max, sum of exp, NLL, then the gradient. */
template <typename T>
__global__ void softmax_xent(float *logits, T *grad16, const T *bias, const int32_t *targets, int vocab,
                             float weight, double *row_nll) {
  __shared__ float shared[kThreads];
  float *row = logits + (int64_t)blockIdx.x * vocab;
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    float v = row[j] + to_f32(bias[j]);
    row[j] = v;
    local_max = fmaxf(local_max, v);
  }
  float max = block_max(local_max, shared);
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += kThreads) local_sum += expf(row[j] - max);
  float sum = block_sum(local_sum, shared);
  int target = targets[blockIdx.x];
  if (threadIdx.x == 0) row_nll[blockIdx.x] = (double)logf(sum) + (double)max - (double)row[target];
  __syncthreads(); /* row[target] is read above before it is overwritten below */
  if (weight <= 0.0f) return;
  float scale = weight / sum;
  T *out16 = grad16 ? grad16 + (int64_t)blockIdx.x * vocab : nullptr;
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    float g = expf(row[j] - max) * scale - (j == target ? weight : 0.0f);
    row[j] = g;
    if (out16) out16[j] = from_f32<T>(g);
  }
}

__global__ void sum_f64(const double *x, int64_t n, double *out) {
  __shared__ double shared[kThreads];
  double local = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) local += x[i];
  shared[threadIdx.x] = local;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = shared[0];
}

__global__ void fill_f32(float *x, float value, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = value;
}

template <typename T> __global__ void cast_from_f32(T *dst, const float *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = from_f32<T>(src[i]);
}

/* blockIdx.y picks the segment; the x dimension strides over its elements. */
template <typename T>
__global__ void canonical_to_space(char *space, const float *canonical, const cuda_weight_segment *segments) {
  cuda_weight_segment s = segments[blockIdx.y];
  T *dst = (T *)(space + s.space_offset);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < s.count; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = from_f32<T>(canonical[s.canonical_offset + i]);
}

template <typename T>
__global__ void space_add_to_canonical(float *canonical, const char *space, const cuda_weight_segment *segments) {
  cuda_weight_segment s = segments[blockIdx.y];
  const T *src = (const T *)(space + s.space_offset);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < s.count; i += (int64_t)gridDim.x * blockDim.x)
    canonical[s.canonical_offset + i] += to_f32(src[i]);
}

/* Weight dropout's factor of element i of block b (rng.h; p 0: 1). */
__device__ static float hh_factor(const cuda_hh_block &b, int64_t i, uint64_t seed, int64_t step, float p) {
  if (p <= 0.0f) return 1.0f;
  int64_t row = b.first_row + i / b.width;
  int col = (int)(i % b.width);
  return rng_weight_dropout_uniform(seed, step, b.matrix, row, col) < p ? 0.0f : 1.0f / (1.0f - p);
}

/* blockIdx.y picks the block, as canonical_to_space. */
template <typename T>
__global__ void hh_dropout_to_space(char *space, const float *canonical, const cuda_hh_block *blocks, uint64_t seed,
                                    int64_t step, float p) {
  cuda_hh_block b = blocks[blockIdx.y];
  T *dst = (T *)(space + b.space_offset);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < b.count; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = from_f32<T>(canonical[b.canonical_offset + i] * hh_factor(b, i, seed, step, p));
}

template <typename T>
__global__ void hh_dropout_scale_gradient(char *space, const cuda_hh_block *blocks, uint64_t seed, int64_t step,
                                          float p) {
  cuda_hh_block b = blocks[blockIdx.y];
  T *g = (T *)(space + b.grad_offset);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < b.count; i += (int64_t)gridDim.x * blockDim.x)
    g[i] = from_f32<T>(to_f32(g[i]) * hh_factor(b, i, seed, step, p));
}

__global__ void to_wire_kernel_f16(__half *wire, const float *g, int64_t n, unsigned long long *counts) {
  unsigned long long nonzero = 0, lost = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    __half h = __float2half_rn(g[i]);
    wire[i] = h;
    nonzero += g[i] != 0.0f;
    lost += g[i] != 0.0f && __half2float(h) == 0.0f;
  }
  if (nonzero) atomicAdd(&counts[0], nonzero);
  if (lost) atomicAdd(&counts[1], lost);
}

__global__ void to_wire_kernel_bf16(__nv_bfloat16 *wire, const float *g, int64_t n, unsigned long long *counts) {
  unsigned long long nonzero = 0, lost = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    __nv_bfloat16 h = __float2bfloat16_rn(g[i]);
    wire[i] = h;
    nonzero += g[i] != 0.0f;
    lost += g[i] != 0.0f && __bfloat162float(h) == 0.0f;
  }
  if (nonzero) atomicAdd(&counts[0], nonzero);
  if (lost) atomicAdd(&counts[1], lost);
}

template <typename T> __global__ void from_wire_kernel(float *g, const T *wire, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    g[i] = to_f32(wire[i]);
}

/* Tree sum of one double per thread into shared[0] (blockDim.x == kThreads). */
__device__ double block_sum_f64(double v, double *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  double result = shared[0];
  __syncthreads();
  return result;
}

__global__ void scale_and_square(float *x, int64_t n, float scale, double *partials) {
  __shared__ double shared[kThreads];
  double local = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = scale != 1.0f ? x[i] * scale : x[i];
    x[i] = v;
    local += (double)v * v;
  }
  double total = block_sum_f64(local, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/* optim.c's arithmetic operation for operation: the _rn intrinsics keep
 * nvcc from contracting a multiply and an add into one FMA (the host code is
 * built without contraction), so the same gradient gives bitwise the same
 * update on both sides. */
__global__ void optimizer_update(float *params, const float *grads, float *m, float *v, int64_t n,
                                 cuda_update_args a, double *update_partials, double *param_partials) {
  __shared__ double shared[kThreads];
  double updates = 0.0, weights = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float p = params[i];
    float clipped = a.clip != 1.0f ? __fmul_rn(grads[i], a.clip) : grads[i];
    float g = __fadd_rn(clipped, __fmul_rn(a.weight_decay, p));
    float update;
    if (a.adam) {
      float mi = __fadd_rn(__fmul_rn(a.beta1, m[i]), __fmul_rn(1.0f - a.beta1, g));
      float vi = __fadd_rn(__fmul_rn(a.beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - a.beta2, g), g));
      m[i] = mi;
      v[i] = vi;
      float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.correction2_sqrt), a.eps);
      update = __fmul_rn(a.step_size, __fdiv_rn(mi, denom));
    } else {
      if (a.momentum != 0.0f) {
        float buf = a.first_step ? g : __fadd_rn(__fmul_rn(a.momentum, m[i]), g);
        m[i] = buf;
        g = buf;
      }
      update = __fmul_rn(a.step_size, g);
    }
    p = __fsub_rn(p, update);
    params[i] = p;
    updates += (double)update * update;
    weights += (double)p * p;
  }
  double u = block_sum_f64(updates, shared), w = block_sum_f64(weights, shared);
  if (threadIdx.x == 0) {
    update_partials[blockIdx.x] = u;
    param_partials[blockIdx.x] = w;
  }
}

/* --- the task heads and carried state (cuda_heads.c, cuda_segments.c) --- */

/* One thread per element of the [pieces, hidden] state of `layer`. */
template <typename T>
__global__ void state_split(T *h, T *c, const float *state, int pieces, int width, int layer, int hidden) {
  int64_t n = (int64_t)pieces * hidden;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t piece = i / hidden, k = i - piece * hidden;
    const float *row = state + piece * width + (int64_t)2 * layer * hidden;
    h[i] = from_f32<T>(row[k]);
    if (c) c[i] = from_f32<T>(row[hidden + k]);
  }
}

template <typename T>
__global__ void state_join(float *state, const T *h, const T *c, int pieces, int width, int layer, int hidden) {
  int64_t n = (int64_t)pieces * hidden;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t piece = i / hidden, k = i - piece * hidden;
    float *row = state + piece * width + (int64_t)2 * layer * hidden;
    row[k] = to_f32(h[i]);
    row[hidden + k] = c ? to_f32(c[i]) : 0.0f;
  }
}

/* features[k] = [y[fwd_rows[k], 0:H] | y[bwd_rows[k], H:2H]] (or back). */
template <typename T>
__global__ void final_rows(T *features, T *y, const int32_t *fwd_rows, const int32_t *bwd_rows, int n, int hidden,
                           int directions, int to_features) {
  const int top = hidden * directions;
  int64_t total = (int64_t)n * top;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t k = i / top;
    int unit = (int)(i - k * top);
    int64_t row = unit < hidden ? fwd_rows[k] : bwd_rows[k];
    T *at = y + row * top + unit;
    if (to_features) features[i] = *at;
    else *at = features[i];
  }
}

/* correct[r] = 1 when the highest of logits[r] + bias is labels[r] (the
 * first highest, as the CPU's row_argmax). One thread per row. */
template <typename T>
__global__ void count_correct(const float *logits, const T *bias, const int32_t *labels, int rows, int classes,
                              int32_t *correct) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float *row = logits + (int64_t)r * classes;
  int best = 0;
  float best_value = row[0] + to_f32(bias[0]);
  for (int j = 1; j < classes; j++) {
    float v = row[j] + to_f32(bias[j]);
    if (v > best_value) {
      best_value = v;
      best = j;
    }
  }
  correct[r] = best == labels[r];
}

/* One thread per row: prediction = pred + bias; the row's loss is its mean
 * squared error over the features when scored; pred becomes
 * weight * 2 (prediction - target) / F on scored rows, 0 elsewhere. */
template <typename T>
__global__ void mse_rows(float *pred, T *grad16, const T *bias, const float *target, const uint8_t *scored,
                         const float *std, int rows, int features, float weight, double *row_loss, double *row_sq,
                         double *row_abs) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float *p = pred + (int64_t)r * features;
  const float *t = target + (int64_t)r * features;
  double loss = 0.0, sq = 0.0, abs_sum = 0.0;
  for (int f = 0; f < features; f++) {
    float e = p[f] + to_f32(bias[f]) - t[f];
    if (scored[r]) {
      double original = (double)e * std[f];
      loss += (double)e * e;
      sq += original * original;
      abs_sum += fabs(original);
    }
    float g = scored[r] ? weight * 2.0f * e / (float)features : 0.0f;
    p[f] = g;
    if (grad16) grad16[(int64_t)r * features + f] = from_f32<T>(g);
  }
  row_loss[r] = loss / features;
  row_sq[r] = sq;
  row_abs[r] = abs_sum;
}

template <typename T> __global__ void fill_rows(T *dst, const T *row, int64_t rows, int width) {
  int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = row[i % width];
}

/* dst[j] += sum over rows of src[r, j]: one thread per column, rows in
 * order, so the sum does not depend on the launch. */
template <typename T> __global__ void add_column_sums(float *dst, const T *src, int64_t rows, int width) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= width) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; r++) sum += to_f32(src[r * width + j]);
  dst[j] += sum;
}

__global__ void add_f64(double *acc, const double *x) { *acc += *x; }

} // namespace

/* Calls F<float>, F<__half> or F<__nv_bfloat16> for the activation type. */
#define DISPATCH(d, CALL)                                                      \
  do {                                                                         \
    if ((d) == RNND_DTYPE_F16) { typedef __half T; CALL; }                     \
    else if ((d) == RNND_DTYPE_BF16) { typedef __nv_bfloat16 T; CALL; }        \
    else { typedef float T; CALL; }                                            \
    CUDA_CHECK_LAUNCH();                                                       \
  } while (0)

extern "C" void cuda_gather_embedding(void *x, rnnd_dtype d, const void *table, const int32_t *ids, int64_t rows,
                                      int width, uint64_t seed, int64_t step, float p, cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (gather_embedding<T><<<grid_for(rows * width), kThreads, 0, stream>>>((T *)x, (const T *)table, ids, rows,
                                                                                 width, seed, step, p)));
}

extern "C" void cuda_scatter_add_embedding(float *grad_table, const void *dx, rnnd_dtype d, const int32_t *ids,
                                           int64_t rows, int width, uint64_t seed, int64_t step, float p,
                                           cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (scatter_add_embedding<T><<<grid_for(rows * width), kThreads, 0, stream>>>(grad_table, (const T *)dx,
                                                                                       ids, rows, width, seed, step, p)));
}

extern "C" void cuda_dropout(void *dst, const void *src, rnnd_dtype d, int64_t rows, int width,
                             const int64_t *row_piece, const int32_t *row_position, uint64_t slot_key, float p,
                             int locked, cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (dropout<T><<<grid_for(rows * width), kThreads, 0, stream>>>((T *)dst, (const T *)src, rows, width,
                                                                         row_piece, row_position, slot_key, p, locked)));
}

extern "C" void cuda_add_scaled(void *dy, const void *y, rnnd_dtype d, int64_t n, float k, cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (add_scaled<T><<<grid_for(n), kThreads, 0, stream>>>((T *)dy, (const T *)y, n, k)));
}

extern "C" void cuda_add_temporal(void *dh, const void *h, rnnd_dtype d, const int64_t *prev, const int64_t *next,
                                  int64_t rows, int width, float k, cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (add_temporal<T><<<grid_for(rows * width), kThreads, 0, stream>>>((T *)dh, (const T *)h, prev, next,
                                                                               rows, width, k)));
}

extern "C" void cuda_softmax_xent(float *logits, void *grad16, rnnd_dtype d, const void *bias,
                                  const int32_t *targets, int rows, int vocab, float weight, double *row_nll,
                                  cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (softmax_xent<T><<<rows, kThreads, 0, stream>>>(logits, (T *)grad16, (const T *)bias, targets, vocab, weight,
                                                              row_nll)));
}

extern "C" void cuda_sum_f64(const double *x, int64_t n, double *out, cudaStream_t stream) {
  sum_f64<<<1, kThreads, 0, stream>>>(x, n, out);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_fill_f32(float *x, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill_f32<<<grid_for(n), kThreads, 0, stream>>>(x, value, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_cast_from_f32(void *dst, rnnd_dtype d, const float *src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (cast_from_f32<T><<<grid_for(n), kThreads, 0, stream>>>((T *)dst, src, n)));
}

static dim3 segment_grid(int n, int64_t longest) {
  unsigned x = grid_for(longest);
  return dim3(x < 256 ? x : 256, (unsigned)n);
}

extern "C" void cuda_canonical_to_space(void *space, rnnd_dtype d, const float *canonical,
                                        const cuda_weight_segment *segments, int n, int64_t longest,
                                        cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (canonical_to_space<T><<<segment_grid(n, longest), kThreads, 0, stream>>>((char *)space, canonical,
                                                                                       segments)));
}

extern "C" void cuda_space_add_to_canonical(float *canonical, const void *space, rnnd_dtype d,
                                            const cuda_weight_segment *segments, int n, int64_t longest,
                                            cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (space_add_to_canonical<T><<<segment_grid(n, longest), kThreads, 0, stream>>>(
                  canonical, (const char *)space, segments)));
}

extern "C" void cuda_hh_dropout_to_space(void *space, rnnd_dtype d, const float *canonical, const cuda_hh_block *blocks,
                                         int n, int64_t longest, uint64_t seed, int64_t step, float p,
                                         cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (hh_dropout_to_space<T><<<segment_grid(n, longest), kThreads, 0, stream>>>((char *)space, canonical,
                                                                                        blocks, seed, step, p)));
}

extern "C" void cuda_hh_dropout_scale_gradient(void *space, rnnd_dtype d, const cuda_hh_block *blocks, int n,
                                               int64_t longest, uint64_t seed, int64_t step, float p,
                                               cudaStream_t stream) {
  if (n <= 0 || p <= 0.0f) return;
  DISPATCH(d, (hh_dropout_scale_gradient<T><<<segment_grid(n, longest), kThreads, 0, stream>>>((char *)space, blocks,
                                                                                              seed, step, p)));
}

extern "C" void cuda_to_wire(void *wire, rnnd_dtype w, const float *g, int64_t n, unsigned long long *counts,
                             cudaStream_t stream) {
  if (n <= 0) return;
  if (w == RNND_DTYPE_BF16) to_wire_kernel_bf16<<<grid_for(n), kThreads, 0, stream>>>((__nv_bfloat16 *)wire, g, n,
                                                                                        counts);
  else to_wire_kernel_f16<<<grid_for(n), kThreads, 0, stream>>>((__half *)wire, g, n, counts);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_from_wire(float *g, const void *wire, rnnd_dtype w, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (w == RNND_DTYPE_BF16)
    from_wire_kernel<__nv_bfloat16><<<grid_for(n), kThreads, 0, stream>>>(g, (const __nv_bfloat16 *)wire, n);
  else from_wire_kernel<__half><<<grid_for(n), kThreads, 0, stream>>>(g, (const __half *)wire, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_scale_and_square(float *x, int64_t n, float scale, double *partials, cudaStream_t stream) {
  scale_and_square<<<CUDA_NORM_BLOCKS, kThreads, 0, stream>>>(x, n, scale, partials);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_optimizer_update(float *params, const float *grads, float *m, float *v, int64_t n,
                                      const cuda_update_args *args, double *update_partials,
                                      double *param_partials, cudaStream_t stream) {
  optimizer_update<<<CUDA_NORM_BLOCKS, kThreads, 0, stream>>>(params, grads, m, v, n, *args, update_partials,
                                                              param_partials);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_state_split(void *h, void *c, rnnd_dtype d, const float *state, int pieces, int width, int layer,
                                 int hidden, cudaStream_t stream) {
  if (pieces <= 0) return;
  DISPATCH(d, (state_split<T><<<grid_for((int64_t)pieces * hidden), kThreads, 0, stream>>>((T *)h, (T *)c, state,
                                                                                      pieces, width, layer, hidden)));
}

extern "C" void cuda_state_join(float *state, const void *h, const void *c, rnnd_dtype d, int pieces, int width,
                                int layer, int hidden, cudaStream_t stream) {
  if (pieces <= 0) return;
  DISPATCH(d, (state_join<T><<<grid_for((int64_t)pieces * hidden), kThreads, 0, stream>>>(
                  state, (const T *)h, (const T *)c, pieces, width, layer, hidden)));
}

extern "C" void cuda_gather_final(void *features, const void *y, rnnd_dtype d, const int32_t *fwd_rows,
                                  const int32_t *bwd_rows, int n, int hidden, int directions, cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (final_rows<T><<<grid_for((int64_t)n * hidden * directions), kThreads, 0, stream>>>(
                  (T *)features, (T *)y, fwd_rows, bwd_rows, n, hidden, directions, 1)));
}

extern "C" void cuda_scatter_final(void *dy, const void *d_features, rnnd_dtype d, const int32_t *fwd_rows,
                                   const int32_t *bwd_rows, int n, int hidden, int directions, cudaStream_t stream) {
  if (n <= 0) return;
  DISPATCH(d, (final_rows<T><<<grid_for((int64_t)n * hidden * directions), kThreads, 0, stream>>>(
                  (T *)d_features, (T *)dy, fwd_rows, bwd_rows, n, hidden, directions, 0)));
}

extern "C" void cuda_count_correct(const float *logits, const void *bias, rnnd_dtype d, const int32_t *labels,
                                   int rows, int classes, int32_t *correct, cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (count_correct<T><<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
                  logits, (const T *)bias, labels, rows, classes, correct)));
}

extern "C" void cuda_mse(float *pred, void *grad16, rnnd_dtype d, const void *bias, const float *target,
                         const uint8_t *scored, const float *std, int rows, int features, float weight,
                         double *row_loss, double *row_sq, double *row_abs, cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (mse_rows<T><<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
                  pred, (T *)grad16, (const T *)bias, target, scored, std, rows, features, weight, row_loss, row_sq,
                  row_abs)));
}

extern "C" void cuda_fill_rows(void *dst, rnnd_dtype d, const void *row, int64_t rows, int width,
                               cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (fill_rows<T><<<grid_for(rows * width), kThreads, 0, stream>>>((T *)dst, (const T *)row, rows, width)));
}

extern "C" void cuda_add_column_sums(float *dst, const void *src, rnnd_dtype d, int64_t rows, int width,
                                     cudaStream_t stream) {
  if (rows <= 0) return;
  DISPATCH(d, (add_column_sums<T><<<(width + kThreads - 1) / kThreads, kThreads, 0, stream>>>(dst, (const T *)src,
                                                                                              rows, width)));
}

extern "C" void cuda_add_f64(double *acc, const double *x, cudaStream_t stream) {
  add_f64<<<1, 1, 0, stream>>>(acc, x);
  CUDA_CHECK_LAUNCH();
}
