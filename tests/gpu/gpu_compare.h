/* gpu_compare.h — how the GPU tests measure a tensor's disagreement with
 * the CPU reference: max |a - b| over the tensor, relative to max |b|. */
#ifndef RNND_TESTS_GPU_COMPARE_H
#define RNND_TESTS_GPU_COMPARE_H

#include <math.h>
#include <stddef.h>

static inline double tensor_error(const float *a, const float *b, size_t n) {
  double diff = 0.0, scale = 1e-30;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    scale = fmax(scale, fabs((double)b[i]));
  }
  return diff / scale;
}

#endif
