/* runner.h — one trained model loaded for inference (src/infer internal):
 * its layout and weights, what the file carries for inference
 * (model_meta.h), a CPU backend that runs one sequence at a time through
 * predict_batch, the state carried between calls, and the vocabulary's
 * word -> id index. generate.c and predict.c drive it.
 *
 * Ownership: runner_open allocates everything; runner_close frees it. */
#ifndef RNND_INFER_RUNNER_H
#define RNND_INFER_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/backend.h"
#include "rnnd/batch.h"
#include "rnnd/model.h"
#include "rnnd/model_meta.h"

typedef struct {
  const char *path; /* the model file (borrowed) */
  rnnd_layout layout;
  float *params;
  rnnd_model_meta meta;
  int threads;
  rnnd_backend *be;  /* capacity: one piece of up to `steps` steps */
  rnnd_batch batch;
  int steps;
  int width;         /* rnnd_output_width: floats in out */
  float *out;        /* what the head said after the last step fed */
  float *state;      /* [rnnd_state_width]: carried between feeds (unidirectional models) */
  float *next_state;
  int carries;       /* the model can continue from a carried state */
  int32_t *index;    /* open addressing over vocabulary ids (-1 empty); NULL without a vocabulary */
  uint64_t index_mask;
} rnnd_runner;

/* Loads MODEL (a model file or checkpoint) for `verb`, which takes models
 * of the tasks in the mask `tasks` (bit 1 << rnnd_task; another task is
 * one line naming both). The
 * vocabulary, class names or normalisation come from the file, or from
 * meta_from (a data set; NULL: none) for files written before they were
 * stored; a missing one is one line that says to pass --vocab-from. */
void runner_open(rnnd_runner *r, const char *model, const char *meta_from, const char *verb, unsigned tasks,
                 int threads);
void runner_close(rnnd_runner *r);
/* Back to the start state (zeros). */
void runner_reset(rnnd_runner *r);
/* Runs n steps with inputs `ids` (token models) or normalised rows `rows`
 * ([n, n_features], a forecaster), from the carried state when the model
 * carries one (else from zeros, the whole sequence in one call); leaves
 * the head's output after the last step in r->out. */
void runner_feed(rnnd_runner *r, const int32_t *ids, const float *rows, int n);
/* The id of a word of n bytes as the vocabulary has it: the literal
 * "<unk>" and "<eos>" are those ids; -1: not in the vocabulary. */
int32_t runner_word_id(const rnnd_runner *r, const char *word, size_t n);
/* Splits text (modified in place: lowercased when the data was) into ids;
 * unknown words become unk_id. Returns how many, at most max_ids; *unknown
 * counts the words that became <unk>. */
int runner_tokenise(const rnnd_runner *r, char *text, int32_t *ids, int max_ids, int *unknown);

#endif
