/* half.c — bulk fp16/bf16 conversions (half.h). */
#include "rnnd/half.h"

void rnnd_f32_to_half_array(rnnd_dtype t, uint16_t *dst, const float *src, size_t n) {
  if (t == RNND_DTYPE_BF16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = rnnd_f32_to_bf16(src[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = rnnd_f32_to_f16(src[i]);
  }
}

void rnnd_half_to_f32_array(rnnd_dtype t, float *dst, const uint16_t *src, size_t n) {
  if (t == RNND_DTYPE_BF16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = rnnd_bf16_to_f32(src[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = rnnd_f16_to_f32(src[i]);
  }
}

/* Each loop below is written once per format (the format tested outside
 * the loop), which lets the compiler vectorise it. */
void rnnd_round_through_half_array(rnnd_dtype t, float *dst, const float *src, size_t n) {
  if (t == RNND_DTYPE_BF16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = rnnd_bf16_to_f32(rnnd_f32_to_bf16(src[i]));
  } else {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = rnnd_f16_to_f32(rnnd_f32_to_f16(src[i]));
  }
}

void rnnd_store_half_array(rnnd_dtype t, uint16_t *dst, float *x, size_t n) {
  if (t == RNND_DTYPE_BF16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
      uint16_t h = rnnd_f32_to_bf16(x[i]);
      dst[i] = h;
      x[i] = rnnd_bf16_to_f32(h);
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
      uint16_t h = rnnd_f32_to_f16(x[i]);
      dst[i] = h;
      x[i] = rnnd_f16_to_f32(h);
    }
  }
}

const char *rnnd_dtype_name(rnnd_dtype t) {
  switch (t) {
    case RNND_DTYPE_F16: return "fp16";
    case RNND_DTYPE_BF16: return "bf16";
    default: return "fp32";
  }
}
