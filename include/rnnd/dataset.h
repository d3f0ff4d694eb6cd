/* dataset.h — a tokenised corpus as written by rnn_prep (docs/formats.md):
 * all sequences concatenated in `tokens`, sequence i spanning
 * tokens[offsets[i] .. offsets[i+1]), each ending with <eos>.
 *
 * dataset_load() validates everything a trainer relies on (offsets start at
 * 0, strictly increase and end at the token count; every id < vocab_size;
 * eos/unk ids in range; at least one sequence; for classification sets one
 * label per sequence below n_classes) and reports bad files with one
 * line naming the file and the offending dataset, index or attribute (exit 2).
 * Time series (rnn_dist-series, docs/formats.md) load into the same struct
 * (see n_features). The caller owns the result and releases it with
 * dataset_free().
 *
 * dataset_open() is dataset_load() for training and evaluation: where the
 * file stores /tokens in a layout token_store.h reads (what rnn_prep
 * writes), the tokens stay on disk (tokens is NULL) and are read by chunk as
 * batches need them, validated as they are read; only the offsets (and
 * labels) live in memory. Read tokens with dataset_read_tokens, which works
 * for both. */
#ifndef RNND_DATASET_H
#define RNND_DATASET_H

#include <stddef.h>
#include <stdint.h>

struct rnnd_token_store;

typedef struct {
  char *path;
  int32_t *tokens;   /* n_tokens ids; NULL when they stay on disk (store) */
  struct rnnd_token_store *store; /* dataset_open: the tokens on disk; NULL when in memory */
  int64_t *offsets;  /* n_sequences + 1 */
  int64_t n_tokens;
  int64_t n_sequences;
  int32_t vocab_size;
  int32_t eos_id;
  int32_t unk_id;
  char **vocab;      /* vocab_size words in id order; NULL unless loaded with words */
  int32_t *labels;   /* classification sets: one class id per sequence; NULL otherwise */
  int32_t n_classes; /* classes named by /label_names (0 without labels) */
  /* Time series (format rnn_dist-series, model.task = regress): n_steps
   * rows of n_features values, series i spanning rows
   * series_offsets[i] .. series_offsets[i+1]. The trainer works on
   * (input, target) pairs, row s -> row s + 1 within a series: then
   * n_tokens counts pairs, offsets are the series' pair offsets, tokens is
   * NULL and pair p's input row is input_row[p]. mean/std: per feature,
   * from the training set (rnn_prep --csv); inputs and targets are
   * normalised with them. */
  int32_t n_features; /* 0: a token data set */
  int64_t n_steps;
  float *values;      /* [n_steps, n_features] in original units */
  int64_t *series_offsets;
  int64_t *input_row; /* [n_tokens] */
  float *mean, *std;  /* [n_features] */
} rnnd_dataset;

/* Loads and validates PATH. With load_vocab != 0 the /vocab strings are read too. */
void dataset_load(rnnd_dataset *ds, const char *path, int load_vocab);
/* As dataset_load, leaving the tokens on disk where the file allows. */
void dataset_open(rnnd_dataset *ds, const char *path, int load_vocab);
/* out[i] = token begin + i, i < count (begin + count <= n_tokens). */
void dataset_read_tokens(const rnnd_dataset *ds, int64_t begin, int64_t count, int32_t *out);
/* Hints that tokens [begin, begin + count) are read soon (on disk: the
 * kernel starts reading their chunks; in memory: nothing). */
void dataset_prefetch(const rnnd_dataset *ds, int64_t begin, int64_t count);
/* Bytes the data set holds in memory. */
size_t dataset_bytes(const rnnd_dataset *ds);
void dataset_free(rnnd_dataset *ds);
/* counts[id] = how often token id occurs in a token set; counts is the
 * caller's array of vocab_size entries. */
void dataset_count_tokens(const rnnd_dataset *ds, int64_t *counts);

/* Length (tokens, including the final <eos>) of sequence i. */
static inline int64_t dataset_sequence_length(const rnnd_dataset *ds, int64_t i) {
  return ds->offsets[i + 1] - ds->offsets[i];
}

#endif
