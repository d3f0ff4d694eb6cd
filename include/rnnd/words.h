/* words.h — how text is split into words: rnn_prep's rule, shared with
 * `rnn_dist generate` and `predict` so that new text is tokenised as the
 * training text was. Words are separated by ' ', '\t', '\r', '\v' and '\f';
 * --lowercase lowercases ASCII letters only. Header-only: the scanner is on
 * rnn_prep's hot path. */
#ifndef RNND_WORDS_H
#define RNND_WORDS_H

#include <stddef.h>

/* A half-open byte range [pos, end) that the scanner consumes. */
typedef struct {
  const char *pos, *end;
} rnnd_text_cursor;

/* ' ', '\t', '\r', '\v', '\f' as bits of one word: a test per byte without branches on each. */
#define RNND_SPACE_BITS ((1ull << ' ') | (1ull << '\t') | (1ull << '\r') | (1ull << '\v') | (1ull << '\f'))
static inline int words_is_space(char c) {
  return (unsigned char)c <= ' ' && ((RNND_SPACE_BITS >> (unsigned char)c) & 1);
}

/* Splits off the next word; returns 0 when none is left. */
static inline int words_next(rnnd_text_cursor *line, const char **word, size_t *len) {
  const char *p = line->pos, *end = line->end; /* locals: the loops stay in registers */
  while (p < end && words_is_space(*p)) p++;
  const char *start = p;
  while (p < end && !words_is_space(*p)) p++;
  line->pos = p;
  *word = start, *len = (size_t)(p - start);
  return p > start;
}

/* rnn_prep --lowercase: ASCII letters of [begin, end), in place. */
static inline void words_lowercase_ascii(char *begin, const char *end) {
  for (char *c = begin; c < end; c++)
    if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
}

#endif
