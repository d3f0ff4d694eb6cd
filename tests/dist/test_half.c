/* test_half.c — fp16/bf16 conversions (half.h) against the compiler's own
 * _Float16 (IEEE binary16, round to nearest even) and against the defining
 * properties of bf16: every 16-bit pattern survives 16 -> 32 -> 16; every
 * fp32 input rounds to the nearest representable value, ties to even;
 * overflow gives infinity, NaN stays NaN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "rnnd/half.h"
#include "rnnd/rng.h"

static int failures = 0, checks = 0;

static void expect(int ok, const char *what, uint32_t input, unsigned got, unsigned want) {
  checks++;
  if (ok) return;
  if (failures++ < 20) printf("FAIL %s: input %08x got %04x want %04x\n", what, input, got, want);
}

/* Every half pattern: to fp32 and back is the identity (NaN stays NaN). */
static void round_trips(void) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = rnnd_f16_to_f32((uint16_t)h);
    uint16_t back = rnnd_f32_to_f16(f);
    int nan = (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu);
    expect(nan ? isnan(f) && (back & 0x7C00u) == 0x7C00u && (back & 0x3FFu) : back == h, "f16 round trip", h,
           back, h);
    float g = rnnd_bf16_to_f32((uint16_t)h);
    uint16_t back_b = rnnd_f32_to_bf16(g);
    int nan_b = (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu);
    expect(nan_b ? isnan(g) && isnan(rnnd_bf16_to_f32(back_b)) : back_b == h, "bf16 round trip", h, back_b, h);
  }
}

#if defined(__FLT16_MAX__)
static void against_float16(uint32_t bits) {
  float f = rnnd_f32_from_bits(bits);
  _Float16 ref = (_Float16)f;
  uint16_t want;
  memcpy(&want, &ref, sizeof want);
  uint16_t got = rnnd_f32_to_f16(f);
  if (isnan(f)) expect((got & 0x7C00u) == 0x7C00u && (got & 0x3FFu), "f16 NaN", bits, got, want);
  else expect(got == want, "f16 vs _Float16", bits, got, want);
}
#endif

/* bf16 reference: the nearest of the two candidates by exact double
 * arithmetic, ties to the even one. */
static uint16_t bf16_reference(float f) {
  if (isnan(f)) return 0x7FC0u;
  uint32_t u = rnnd_f32_bits(f);
  uint16_t down = (uint16_t)(u >> 16), up = (uint16_t)(down + 1);
  double x = f, a = rnnd_bf16_to_f32(down), b = rnnd_bf16_to_f32(up);
  if ((u & 0xFFFFu) == 0) return down;
  if ((down & 0x7F80u) == 0x7F00u && (down & 0x7Fu) == 0x7Fu && fabs(x) >= 0x1.FFp127) return up; /* to inf */
  double da = fabs(x - a), db = fabs(x - b);
  if (da < db) return down;
  if (db < da) return up;
  return (down & 1u) ? up : down;
}

static void random_inputs(void) {
  for (uint64_t i = 0; i < 4000000; i++) {
    uint32_t bits = (uint32_t)rng_mix64(i);
    if (i % 4 == 1) bits = (bits & 0x807FFFFFu) | ((uint32_t)(100 + (i >> 2) % 45) << 23); /* near fp16's range */
    if (i % 4 == 2) bits = (bits & 0xFFFFE000u) | 0x1000u; /* exact fp16 ties */
#if defined(__FLT16_MAX__)
    against_float16(bits);
#endif
    float f = rnnd_f32_from_bits(bits);
    uint16_t got = rnnd_f32_to_bf16(f), want = bf16_reference(f);
    expect(isnan(f) ? isnan(rnnd_bf16_to_f32(got)) : got == want, "bf16 rounding", bits, got, want);
  }
}

static void edges(void) {
  struct { float in; uint16_t f16; } cases[] = {
      {65504.0f, 0x7BFF}, {65519.99f, 0x7BFF}, {65520.0f, 0x7C00}, {1e10f, 0x7C00}, {-1e10f, 0xFC00},
      {5.9604645e-8f, 0x0001}, {2.9802322e-8f, 0x0000}, {2.9802326e-8f, 0x0001}, {6.1035156e-5f, 0x0400},
      {-0.0f, 0x8000}, {1.0f, 0x3C00}, {INFINITY, 0x7C00}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect(rnnd_f32_to_f16(cases[i].in) == cases[i].f16, "f16 edge", rnnd_f32_bits(cases[i].in),
           rnnd_f32_to_f16(cases[i].in), cases[i].f16);
  expect(rnnd_f32_to_bf16(3.4e38f) == 0x7F80, "bf16 overflow", rnnd_f32_bits(3.4e38f), rnnd_f32_to_bf16(3.4e38f),
         0x7F80);
  expect(rnnd_f32_to_bf16(1.0f) == 0x3F80, "bf16 one", 0, rnnd_f32_to_bf16(1.0f), 0x3F80);
}

int main(void) {
  round_trips();
  edges();
  random_inputs();
#if !defined(__FLT16_MAX__)
  printf("note: this compiler has no _Float16; fp16 rounding checked by round trips and edge cases only\n");
#endif
  printf("%d checks, %d failures\n", checks, failures);
  return failures != 0;
}
