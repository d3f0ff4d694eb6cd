/* test_bias_init.c — model.decoder_bias_init = unigram: dataset_count_tokens
 * counts every id, and model_init_decoder_bias_unigram sets decoder.bias to
 * the add-one smoothed log frequencies (a proper distribution: the
 * exponentials sum to 1) and touches no other parameter, tied or not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/dataset.h"
#include "rnnd/model.h"

static int failures;

static void expect(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    failures++;
  }
}

/* Six tokens over a vocabulary of 5 (id 3 never occurs). */
static void check_counts(int64_t *counts) {
  int32_t tokens[] = {0, 1, 1, 4, 2, 1};
  int64_t offsets[] = {0, 4, 6};
  rnnd_dataset ds = {.tokens = tokens, .offsets = offsets, .n_tokens = 6, .n_sequences = 2, .vocab_size = 5};
  dataset_count_tokens(&ds, counts);
  const int64_t want[] = {1, 3, 1, 0, 1};
  for (int v = 0; v < 5; v++) expect(counts[v] == want[v], "dataset_count_tokens: count of one id");
}

static void check_bias(int tie, const int64_t *counts) {
  rnnd_model_shape shape = {.cell = RNND_CELL_GRU, .layers = 1, .embed = 4, .hidden = 4, .vocab_size = 5,
                            .directions = 1, .tie_weights = tie, .task = RNND_TASK_LM};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  float *before = malloc(layout.numel * sizeof *before), *after = malloc(layout.numel * sizeof *after);
  model_init_params(&layout, before, 7);
  memcpy(after, before, layout.numel * sizeof *after);
  model_init_decoder_bias_unigram(&layout, after, counts);
  const rnnd_param_view *bias = model_find_view(&layout, "decoder.bias");
  double sum = 0;
  for (int v = 0; v < 5; v++) {
    double want = log((counts[v] + 1) / (6.0 + 5.0)); /* N = 6 tokens, V = 5 */
    expect(fabs(after[bias->offset + v] - want) < 1e-6, "decoder.bias[v] = log((count + 1) / (N + V))");
    sum += exp(after[bias->offset + v]);
  }
  expect(fabs(sum - 1.0) < 1e-6, "exp(decoder.bias) sums to 1");
  for (size_t i = 0; i < layout.numel; i++)
    if (i < bias->offset || i >= bias->offset + bias->numel)
      expect(after[i] == before[i], "a parameter outside decoder.bias changed");
  free(before);
  free(after);
}

int main(void) {
  int64_t counts[5];
  check_counts(counts);
  check_bias(0, counts);
  check_bias(1, counts);
  if (failures) return 1;
  printf("bias init: counts and unigram decoder.bias (tied and untied) as expected\n");
  return 0;
}
