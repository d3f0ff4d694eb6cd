/* test_dataset.c — unit test of dataset_load() on the files rnn_prep made
 * from tests/data/small_*.txt. The expected ids are worked out by hand from
 * the corpus (see check_prep.py for the derivation), not taken from the code
 * under test. Usage: test_dataset DIR (holding train.h5 and valid.h5). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/dataset.h"

static int failures = 0;

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static const char *const train_vocab[] = {"<eos>", "<unk>", "the", ".",     "cat", "=",
                                          "sat",   "mat",   "The", "dog",   "Title", "on",
                                          "saw",   "a",     "and", "is",    "Zebra", "end"};
static const int32_t train_tokens[] = {5, 10, 5, 0,                 /* = Title =         */
                                       2, 4,  6, 11, 2, 7, 3, 0,    /* the cat sat on .. */
                                       8, 9,  6, 3,  0,             /* The dog sat .     */
                                       2, 4,  12, 1, 3, 0,          /* the cat saw <unk> */
                                       13, 9, 14, 8, 4, 0,          /* a dog and The cat */
                                       2, 7,  15, 1, 0,             /* the mat is <unk>  */
                                       16, 0,                       /* Zebra             */
                                       17, 3, 0};                   /* end . (CRLF)      */
static const int64_t train_lengths[] = {4, 8, 5, 6, 6, 5, 2, 3};

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = rnnd_malloc(n, "path");
  snprintf(path, n, "%s/%s", dir, name);
  return path;
}

static void check_train(const char *dir) {
  char *path = join(dir, "train.h5");
  rnnd_dataset ds;
  dataset_load(&ds, path, 1);
  EXPECT(strcmp(ds.path, path) == 0);
  EXPECT(ds.vocab_size == 18 && ds.eos_id == 0 && ds.unk_id == 1);
  EXPECT(ds.n_sequences == 8);
  EXPECT(ds.n_tokens == (int64_t)(sizeof train_tokens / sizeof train_tokens[0]));
  EXPECT(ds.offsets[0] == 0 && ds.offsets[ds.n_sequences] == ds.n_tokens);
  for (int64_t i = 0; i < ds.n_sequences && i < 8; i++) {
    EXPECT(dataset_sequence_length(&ds, i) == train_lengths[i]);
    EXPECT(ds.tokens[ds.offsets[i + 1] - 1] == ds.eos_id);
  }
  for (int64_t i = 0; i < ds.n_tokens && i < 39; i++) EXPECT(ds.tokens[i] == train_tokens[i]);
  EXPECT(ds.vocab != NULL);
  for (int i = 0; ds.vocab && i < 18 && i < ds.vocab_size; i++)
    EXPECT(strcmp(ds.vocab[i], train_vocab[i]) == 0);
  dataset_free(&ds);
  EXPECT(ds.tokens == NULL && ds.offsets == NULL && ds.vocab == NULL && ds.path == NULL);
  free(path);
}

/* valid: "the cat sat on a zebra ." / blank / "<unk> dog Dog"; lowercase
 * "zebra" and "Dog" are not in the (case-sensitive) vocabulary. */
static void check_valid(const char *dir) {
  static const int32_t tokens[] = {2, 4, 6, 11, 13, 1, 3, 0, 1, 9, 1, 0};
  char *path = join(dir, "valid.h5");
  rnnd_dataset ds;
  dataset_load(&ds, path, 0);
  EXPECT(ds.vocab == NULL);
  EXPECT(ds.vocab_size == 18);
  EXPECT(ds.n_sequences == 2 && ds.n_tokens == 12);
  EXPECT(ds.n_sequences == 2 && dataset_sequence_length(&ds, 0) == 8 &&
         dataset_sequence_length(&ds, 1) == 4);
  for (int64_t i = 0; i < ds.n_tokens && i < 12; i++) EXPECT(ds.tokens[i] == tokens[i]);
  dataset_free(&ds);
  free(path);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_dataset DIR\n");
    return 2;
  }
  check_train(argv[1]);
  check_valid(argv[1]);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_dataset: all checks passed\n");
  return 0;
}
