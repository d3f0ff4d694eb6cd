/* random_dataset.h — an in-memory data set of random tokens for the C tests
 * that pack batches by hand: sequence i holds lengths[i % n_lengths] tokens,
 * token k is first_id + rng_key2(seed, k) % (vocab - first_id). vocab_size is
 * vocab; eos_id and unk_id stay 0. The caller releases it with dataset_free.
 * Used only by tests (header only, so any test program can include it). */
#ifndef RNND_TEST_RANDOM_DATASET_H
#define RNND_TEST_RANDOM_DATASET_H

#include <stdint.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/dataset.h"
#include "rnnd/rng.h"

static inline void random_dataset(rnnd_dataset *ds, const int *lengths, int n_lengths, int n_sequences, int vocab,
                                  int first_id, uint64_t seed) {
  memset(ds, 0, sizeof *ds);
  ds->path = rnnd_strdup("(random)");
  ds->vocab_size = vocab;
  ds->n_sequences = n_sequences;
  ds->offsets = RNND_ALLOC(int64_t, (size_t)n_sequences + 1, "offsets");
  for (int i = 0; i < n_sequences; i++) ds->offsets[i + 1] = ds->offsets[i] + lengths[i % n_lengths];
  ds->n_tokens = ds->offsets[n_sequences];
  ds->tokens = RNND_ALLOC(int32_t, (size_t)ds->n_tokens, "tokens");
  for (int64_t k = 0; k < ds->n_tokens; k++)
    ds->tokens[k] = first_id + (int32_t)(rng_key2(seed, (uint64_t)k) % (uint64_t)(vocab - first_id));
}

#endif
