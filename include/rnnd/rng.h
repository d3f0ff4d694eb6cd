/* rng.h — counter-based random numbers: every draw is a pure function of its
 * key (seed, step, piece, layer, position, unit), so dropout masks and
 * initial weights never depend on thread count, batching or world size. */
#ifndef RNND_RNG_H
#define RNND_RNG_H

#include <stdint.h>

/* The CUDA kernels draw the same dropout masks from these same functions. */
#ifdef __CUDACC__
#define RNND_HOST_DEVICE __host__ __device__
#else
#define RNND_HOST_DEVICE
#endif

/* SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche. */
RNND_HOST_DEVICE static inline uint64_t rng_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

RNND_HOST_DEVICE static inline uint64_t rng_key2(uint64_t a, uint64_t b) { return rng_mix64(a ^ rng_mix64(b)); }

/* Uniform in [0, 1) with 24 random bits (exact in float). */
RNND_HOST_DEVICE static inline float rng_uniform_from(uint64_t key) { return (float)(key >> 40) * (1.0f / 16777216.0f); }

/* Dropout masks (both backends): the key of one mask (step, slot), of one
 * row of it (piece id, position in the piece), and the uniform draw of one
 * unit of that row; the unit is dropped when the draw is below p. */
RNND_HOST_DEVICE static inline uint64_t rng_dropout_slot_key(uint64_t seed, int64_t step, int slot) {
  return rng_key2(rng_key2(seed ^ 0xD50Full, (uint64_t)step), (uint64_t)slot);
}
RNND_HOST_DEVICE static inline uint64_t rng_dropout_row_key(uint64_t slot_key, int64_t piece_id, int64_t position) {
  return rng_key2(slot_key, ((uint64_t)piece_id << 20) ^ (uint64_t)position);
}
RNND_HOST_DEVICE static inline float rng_dropout_uniform(uint64_t row_key, int unit) {
  return rng_uniform_from(rng_mix64(row_key + (uint64_t)unit));
}

/* Weight dropout (both backends): element (row, col) of hidden-to-hidden
 * matrix `matrix` (2 x layer + direction) is dropped for the batch of
 * (seed, step) when this draw is below p. */
#define RNND_WEIGHT_DROPOUT_SLOT (1 << 21)
RNND_HOST_DEVICE static inline float rng_weight_dropout_uniform(uint64_t seed, int64_t step, int matrix, int64_t row,
                                                                int col) {
  return rng_dropout_uniform(
      rng_dropout_row_key(rng_dropout_slot_key(seed, step, RNND_WEIGHT_DROPOUT_SLOT + matrix), row, 0), col);
}

/* Embedding dropout (both backends): word `id` loses its vector for the
 * batch of (seed, step) when this draw is below p. */
#define RNND_EMBEDDING_DROPOUT_SLOT (1 << 20) /* beyond every layer slot */
RNND_HOST_DEVICE static inline float rng_embedding_dropout_uniform(uint64_t seed, int64_t step, int64_t id) {
  return rng_dropout_uniform(rng_dropout_row_key(rng_dropout_slot_key(seed, step, RNND_EMBEDDING_DROPOUT_SLOT), id, 0),
                             0);
}

#endif
