/* cpu_math.h — exp, sigmoid and tanh written so that the compiler can
 * vectorise the loops that call them (glibc's expf is a scalar call), and
 * the row helpers the layers and heads share.
 *
 * exp: Cephes-style range reduction x = n ln2 + r, |r| <= ln2/2, a degree-6
 * polynomial for e^r and 2^n put into the exponent bits; relative error
 * below 2e-7 on [-87, 88]. Inputs are clamped to that range, which only
 * affects values whose exp under- or overflows float anyway. */
#ifndef RNND_CPU_MATH_H
#define RNND_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float fast_expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  /* Adding 1.5 * 2^23 rounds x / ln2 to an integer held in the low mantissa bits. */
  const float shifter = 12582912.0f;
  float t = x * 1.44269504088896341f + shifter;
  float n = t - shifter;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits, n_int;
  memcpy(&bits, &p, sizeof bits);
  memcpy(&n_int, &t, sizeof n_int);
  bits += (n_int - 0x4B400000) * (1 << 23); /* t's integer part, times 2^23 */
  memcpy(&p, &bits, sizeof p);
  return p;
}

static inline float fast_sigmoidf(float x) { return 1.0f / (1.0f + fast_expf(-x)); }

/* tanh(x) = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|): no cancellation
 * for large |x|; near 0 the absolute error stays below 1e-7. */
static inline float fast_tanhf(float x) {
  float ax = x < 0.0f ? -x : x;
  float e = fast_expf(-2.0f * ax);
  float y = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -y : y;
}

/* Every row of dst[rows, width] = row (biases before a GEMM adds to them),
 * over the OpenMP team (a layer's gates are tens of MiB). */
static inline void fill_rows(float *dst, int64_t rows, int width, const float *row) {
#pragma omp parallel for schedule(static) if (rows * width > 65536)
  for (int64_t i = 0; i < rows; i++) memcpy(dst + i * width, row, (size_t)width * sizeof *dst);
}

/* dst[j] += sum over rows of m[i, j] (bias gradients). Blocks of columns
 * go to the OpenMP team; each column adds its rows in order, so the sums
 * are the same for any thread count. */
static inline void add_column_sums(float *dst, const float *m, int64_t rows, int cols) {
  const int block = 64, blocks = (cols + block - 1) / block;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int c = 0; c < blocks; c++) {
    const int j0 = c * block, j1 = j0 + block < cols ? j0 + block : cols;
    for (int64_t i = 0; i < rows; i++)
      for (int j = j0; j < j1; j++) dst[j] += m[i * cols + j];
  }
}

/* Index of the largest value (the first of equals). */
static inline int row_argmax(const float *row, int n) {
  int best = 0;
  for (int j = 1; j < n; j++)
    if (row[j] > row[best]) best = j;
  return best;
}

/* --- softmax rows (the decoders and the heads) --- */

static inline float row_max(const float *row, int n) {
  float lane[16];
  int j = 0;
  for (int k = 0; k < 16; k++) lane[k] = row[0];
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; k++) lane[k] = row[j + k] > lane[k] ? row[j + k] : lane[k];
  float max = lane[0];
  for (int k = 1; k < 16; k++) max = lane[k] > max ? lane[k] : max;
  for (; j < n; j++) max = row[j] > max ? row[j] : max;
  return max;
}

/* Sum in 16 fixed lanes: vectorises without reassociation flags, and the
 * order (so the result) does not depend on the thread count. */
static inline float row_sum(const float *row, int n) {
  float lane[16] = {0};
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; k++) lane[k] += row[j + k];
  float sum = 0.0f;
  for (int k = 0; k < 16; k++) sum += lane[k];
  for (; j < n; j++) sum += row[j];
  return sum;
}

/* Turns one row of logits into exp(logit - max) and returns the row's NLL. */
static inline double softmax_row(float *row, int vocab, int target, float *sum_out) {
  float max = row_max(row, vocab), target_logit = row[target];
  for (int j = 0; j < vocab; j++) row[j] = fast_expf(row[j] - max);
  float sum = row_sum(row, vocab); /* a second pass over a row still in L1/L2 */
  *sum_out = sum;
  return (double)logf(sum) + (double)max - (double)target_logit;
}

/* Turns one row of logits into log-probabilities in place (log-softmax),
 * with libm's exp and log: inference reads them as they are. */
static inline void log_softmax_row(float *row, int n) {
  float max = row_max(row, n);
  double sum = 0.0;
  for (int j = 0; j < n; j++) sum += exp((double)row[j] - (double)max);
  const float shift = (float)((double)max + log(sum));
  for (int j = 0; j < n; j++) row[j] -= shift;
}

#endif
