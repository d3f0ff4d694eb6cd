/* half.h — IEEE binary16 (fp16) and bfloat16 (bf16) storage formats and
 * their conversions to and from fp32, bit-exact with what GPUs do:
 * round to nearest even, subnormals kept (fp16), overflow to infinity, NaN
 * stays NaN (quiet). Both formats are carried as uint16_t words; arithmetic
 * always happens in fp32. Header-only so the hot loops inline them. */
#ifndef RNND_HALF_H
#define RNND_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { RNND_DTYPE_F32 = 0, RNND_DTYPE_F16 = 1, RNND_DTYPE_BF16 = 2 } rnnd_dtype;

static inline uint32_t rnnd_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float rnnd_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float rnnd_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return rnnd_f32_from_bits(sign | 0x7F800000u | (mantissa << 13)); /* inf, NaN */
  if (exponent == 0) {
    /* zero or subnormal: mantissa * 2^-24, exact in fp32 */
    float magnitude = (float)mantissa * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return rnnd_f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static inline uint16_t rnnd_f32_to_f16(float f) {
  uint32_t u = rnnd_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) /* inf stays inf; NaN becomes a quiet NaN */
    return (uint16_t)(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0u));
  if (abs >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: infinity */
  if (abs < 0x38800000u) {
    /* below 2^-14: a subnormal (or zero). Adding 0.5 shifts the value so
     * that the FPU's own round-to-nearest-even lands on the 2^-24 grid. */
    float shifted = rnnd_f32_from_bits(abs) + 0.5f;
    return (uint16_t)(sign | (uint16_t)(rnnd_f32_bits(shifted) - 0x3F000000u));
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xC8000FFFu + mantissa_odd; /* rebias exponent (-112 << 23) and round to nearest even */
  return (uint16_t)(sign | (abs >> 13));
}

static inline float rnnd_bf16_to_f32(uint16_t b) { return rnnd_f32_from_bits((uint32_t)b << 16); }

static inline uint16_t rnnd_f32_to_bf16(float f) {
  uint32_t u = rnnd_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even; overflow carries into inf */
  return (uint16_t)(u >> 16);
}

static inline float rnnd_half_to_f32(rnnd_dtype t, uint16_t h) {
  return t == RNND_DTYPE_BF16 ? rnnd_bf16_to_f32(h) : rnnd_f16_to_f32(h);
}

static inline uint16_t rnnd_f32_to_half(rnnd_dtype t, float f) {
  return t == RNND_DTYPE_BF16 ? rnnd_f32_to_bf16(f) : rnnd_f32_to_f16(f);
}

/* Bulk conversions for wire buffers (t is RNND_DTYPE_F16 or RNND_DTYPE_BF16). */
void rnnd_f32_to_half_array(rnnd_dtype t, uint16_t *dst, const float *src, size_t n);
void rnnd_half_to_f32_array(rnnd_dtype t, float *dst, const uint16_t *src, size_t n);
/* dst = src rounded through format t: what a 16-bit copy of src would give
 * back (dst == src rounds in place). */
void rnnd_round_through_half_array(rnnd_dtype t, float *dst, const float *src, size_t n);
/* dst = x in format t, and x rounded in place to exactly what dst holds. */
void rnnd_store_half_array(rnnd_dtype t, uint16_t *dst, float *x, size_t n);
const char *rnnd_dtype_name(rnnd_dtype t);

#endif
