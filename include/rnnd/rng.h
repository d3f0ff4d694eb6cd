/* rng.h — counter-based random numbers: every draw is a pure function of its
 * key (seed, step, piece, layer, position, unit), so dropout masks and
 * initial weights never depend on thread count, batching or world size. */
#ifndef RNND_RNG_H
#define RNND_RNG_H

#include <stdint.h>

/* SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche. */
static inline uint64_t rng_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline uint64_t rng_key2(uint64_t a, uint64_t b) { return rng_mix64(a ^ rng_mix64(b)); }

/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float rng_uniform_from(uint64_t key) { return (float)(key >> 40) * (1.0f / 16777216.0f); }

#endif
