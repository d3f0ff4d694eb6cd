/* infer.h — using a trained model from its file alone (model_meta.h):
 * `rnn_dist generate` samples text from a language model; `rnn_dist
 * predict` labels lines of text with a classifier or forecasts the next
 * steps of series with a forecaster. One sequence at a time on the CPU
 * backend (predict_batch), the model loaded once; with from_stdin every line
 * of standard input is a request, answered (and flushed) as it arrives, so
 * a process can serve a pipe. Answers go to stdout and nothing else does.
 * Bad input (the model of another task, an empty prompt, a prompt of only
 * unknown words, a temperature below 0, a horizon of 0, a CSV with the
 * wrong columns) is one line naming it, exit 2. */
#ifndef RNND_INFER_H
#define RNND_INFER_H

#include <stdint.h>

typedef struct {
  const char *checkpoint;  /* model file or checkpoint */
  const char *vocab_from;  /* a data set to take the vocabulary (class names, normalisation) from; NULL: the model file's */
  int threads;             /* 0: all cores */
  int from_stdin;          /* one request per line of stdin */
  /* generate */
  const char *prompt;      /* NULL: start from <eos> alone */
  int has_prompt;          /* --prompt was given (an empty one is an error) */
  int tokens;              /* tokens sampled after the prompt */
  double temperature;      /* 0: greedy (argmax) */
  int top_k;               /* 0: the whole vocabulary */
  uint64_t seed;
  /* predict */
  const char *input;       /* text lines (classifier) or CSV (forecaster) */
  int horizon;             /* forecaster: steps predicted per series */
} rnnd_infer_options;

int infer_generate(const rnnd_infer_options *o);
int infer_predict(const rnnd_infer_options *o);

#endif
