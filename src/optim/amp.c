/* amp.c — dynamic loss scaling and gradient rounding (amp.h). */
#include "rnnd/amp.h"

#include <string.h>

void loss_scaler_init(rnnd_loss_scaler *s, const rnnd_amp_config *cfg, rnnd_dtype precision) {
  memset(s, 0, sizeof *s);
  s->dynamic = precision == RNND_DTYPE_F16 && cfg->loss_scaling;
  s->scale = s->dynamic ? cfg->init_scale : 1.0;
  s->growth_factor = cfg->growth_factor;
  s->backoff_factor = cfg->backoff_factor;
  s->min_scale = cfg->min_scale;
  s->max_scale = cfg->max_scale;
  s->growth_interval = cfg->growth_interval;
}

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

int loss_scaler_update(rnnd_loss_scaler *s, int finite) {
  if (!finite) {
    s->skipped++;
    s->growth_tracker = 0;
    if (s->dynamic) s->scale = clamp(s->scale * s->backoff_factor, s->min_scale, s->max_scale);
    return 0;
  }
  if (s->dynamic && ++s->growth_tracker >= s->growth_interval) {
    s->scale = clamp(s->scale * s->growth_factor, s->min_scale, s->max_scale);
    s->growth_tracker = 0;
  }
  return 1;
}

/* amp_round_to_half over x[begin, end), at most 2^32 - 1 values; `t` is a
 * constant at each call, so the rounding inlines without a branch on the
 * format, and the 32-bit counts let the loop vectorise with the floats. */
typedef struct {
  uint32_t nonzero, lost;
} round_counts;

static inline round_counts round_run(rnnd_dtype t, float *restrict x, size_t begin, size_t end) {
  uint32_t live = 0, underflow = 0;
  for (size_t i = begin; i < end; i++) {
    float r = rnnd_half_to_f32(t, rnnd_f32_to_half(t, x[i]));
    live += x[i] != 0.0f;
    underflow += r == 0.0f && x[i] != 0.0f;
    x[i] = r;
  }
  return (round_counts){live, underflow};
}

#define ROUND_CHUNK ((size_t)1 << 16)

size_t amp_round_to_half(rnnd_dtype t, float *x, size_t n, size_t *nonzero) {
  const size_t chunks = (n + ROUND_CHUNK - 1) / ROUND_CHUNK;
  size_t live = 0, underflow = 0;
#pragma omp parallel for schedule(static) reduction(+ : live, underflow)
  for (size_t c = 0; c < chunks; c++) {
    size_t begin = c * ROUND_CHUNK, end = begin + ROUND_CHUNK < n ? begin + ROUND_CHUNK : n;
    round_counts k = t == RNND_DTYPE_BF16 ? round_run(RNND_DTYPE_BF16, x, begin, end)
                                          : round_run(RNND_DTYPE_F16, x, begin, end);
    live += k.nonzero;
    underflow += k.lost;
  }
  if (nonzero) *nonzero = live;
  return underflow;
}
