/* prep.h — rnn_prep: turns whitespace-tokenised text (WikiText layout, one
 * paragraph per line) into the HDF5 data sets of docs/formats.md.
 *
 * The vocabulary comes from the training text only: <eos> = 0, <unk> = 1,
 * then words by descending count, ties by first occurrence in the training
 * text. Every non-blank line becomes one sequence "w1 .. wn <eos>". With
 * labels (classification), a line is "LABEL<TAB>w1 .. wn"; class ids are
 * the training set's distinct labels in byte order, and a label the
 * training set lacks is an error.
 * Bad input (options, unreadable or empty text) exits with code 2. */
#ifndef RNND_PREP_H
#define RNND_PREP_H

#include <stdint.h>

typedef struct {
  const char *train; /* required */
  const char *valid; /* required */
  const char *test;  /* optional (NULL) */
  const char *out_dir;
  int64_t min_count; /* words seen fewer times in train become <unk>; >= 1 */
  int64_t max_vocab; /* total entries including <eos>/<unk>; 0 = unlimited, else >= 2 */
  int lowercase;     /* ASCII-lowercase all text before counting */
  int deflate;       /* zlib level for /tokens, /offsets, /labels; 0 = none */
  int labels;        /* lines are "LABEL<TAB>w1 .. wn": also write /labels and /label_names */
  int csv;           /* the files are CSV time series: write rnn_dist-series data sets */
} rnnd_prep_options;

/* Parses the command line (argv[0] is the program). Returns 1 when --help was
 * printed and the program should exit successfully, 0 otherwise. The strings
 * in OPT point into argv. */
int prep_parse_args(rnnd_prep_options *opt, int argc, char **argv);

/* Writes OUT_DIR/train.h5, valid.h5 and (if set) test.h5 and prints a summary. */
void prep_run(const rnnd_prep_options *opt);
/* The same for --csv (prep_csv.c): a header of column names, a row per
 * step, every column a feature except an optional series_id. */
void prep_csv_run(const rnnd_prep_options *opt);

#endif
