/* dataset.h — a tokenised corpus as written by rnn_prep (docs/formats.md):
 * all sequences concatenated in `tokens`, sequence i spanning
 * tokens[offsets[i] .. offsets[i+1]), each ending with <eos>.
 *
 * dataset_load() validates everything a trainer relies on (offsets start at
 * 0, strictly increase and end at the token count; every id < vocab_size;
 * eos/unk ids in range; at least one sequence; for classification sets one
 * label per sequence below n_classes) and reports bad files with one
 * line naming the file and the offending dataset, index or attribute (exit 2).
 * The caller owns the result and releases it with dataset_free(). */
#ifndef RNND_DATASET_H
#define RNND_DATASET_H

#include <stdint.h>

typedef struct {
  char *path;
  int32_t *tokens;   /* n_tokens ids */
  int64_t *offsets;  /* n_sequences + 1 */
  int64_t n_tokens;
  int64_t n_sequences;
  int32_t vocab_size;
  int32_t eos_id;
  int32_t unk_id;
  char **vocab;      /* vocab_size words in id order; NULL unless loaded with words */
  int32_t *labels;   /* classification sets: one class id per sequence; NULL otherwise */
  int32_t n_classes; /* classes named by /label_names (0 without labels) */
} rnnd_dataset;

/* Loads and validates PATH. With load_vocab != 0 the /vocab strings are read too. */
void dataset_load(rnnd_dataset *ds, const char *path, int load_vocab);
void dataset_free(rnnd_dataset *ds);

/* Length (tokens, including the final <eos>) of sequence i. */
static inline int64_t dataset_sequence_length(const rnnd_dataset *ds, int64_t i) {
  return ds->offsets[i + 1] - ds->offsets[i];
}

#endif
