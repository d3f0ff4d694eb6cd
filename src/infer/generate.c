/* generate.c — `rnn_dist generate` (infer.h): the prompt, tokenised as
 * rnn_prep tokenised the training text, is fed after <eos> (the start of
 * every training sequence); then tokens are drawn one at a time from the
 * model's next-token distribution, each fed back. Temperature 0 takes the
 * most likely token (the first of equals, as torch.argmax); otherwise
 * p_i ~ exp(log p_i / T), restricted to the top_k most likely with
 * top_k > 0. Draws are keyed by (seed, request, token), so a seed gives
 * the same text. <eos> prints a newline (with --stdin the word <eos>, so
 * an answer stays one line). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/infer.h"
#include "rnnd/rng.h"
#include "runner.h"

#define MAX_PROMPT_WORDS (1 << 20)

typedef struct {
  const rnnd_infer_options *o;
  rnnd_runner runner;
  int32_t *ids;     /* [MAX_PROMPT_WORDS + 1]: <eos>, then the prompt */
  int32_t *top;     /* [top_k] heap of candidate ids */
  double *weights;  /* [vocab] or [top_k] */
} generator;

static int32_t argmax_id(const float *logp, int n) {
  int32_t best = 0;
  for (int32_t j = 1; j < n; j++)
    if (logp[j] > logp[best]) best = j;
  return best;
}

/* Sifts down the min-heap (by logp) of the k ids in heap. */
static void sift_down(int32_t *heap, int k, int at, const float *logp) {
  for (;;) {
    int least = at, l = 2 * at + 1, r = l + 1;
    if (l < k && logp[heap[l]] < logp[heap[least]]) least = l;
    if (r < k && logp[heap[r]] < logp[heap[least]]) least = r;
    if (least == at) return;
    int32_t t = heap[at];
    heap[at] = heap[least];
    heap[least] = t;
    at = least;
  }
}

/* The k most likely ids into g->top (any order); returns k. */
static int top_ids(generator *g, const float *logp, int n, int k) {
  int32_t *heap = g->top;
  for (int j = 0; j < k; j++) heap[j] = j;
  for (int at = k / 2 - 1; at >= 0; at--) sift_down(heap, k, at, logp);
  for (int32_t j = k; j < n; j++)
    if (logp[j] > logp[heap[0]]) {
      heap[0] = j;
      sift_down(heap, k, 0, logp);
    }
  return k;
}

/* One draw from p_i ~ exp(logp_i / T) over candidates (ids, or all n when ids is NULL). */
static int32_t draw(generator *g, const float *logp, const int32_t *ids, int n, double u) {
  double max = -INFINITY, total = 0.0;
  for (int j = 0; j < n; j++) max = fmax(max, logp[ids ? ids[j] : j]);
  for (int j = 0; j < n; j++) total += g->weights[j] = exp(((double)logp[ids ? ids[j] : j] - max) / g->o->temperature);
  double target = u * total, run = 0.0;
  for (int j = 0; j < n; j++) {
    run += g->weights[j];
    if (run > target) return ids ? ids[j] : j;
  }
  return ids ? ids[n - 1] : n - 1;
}

static int32_t next_token(generator *g, uint64_t request, int index) {
  const float *logp = g->runner.out;
  const int V = g->runner.width, k = g->o->top_k;
  if (g->o->temperature == 0.0) return argmax_id(logp, V);
  double u = rng_uniform_from(rng_mix64(rng_key2(rng_key2(g->o->seed, request), (uint64_t)index)));
  if (k > 0 && k < V) return draw(g, logp, g->top, top_ids(g, logp, V, k), u);
  return draw(g, logp, NULL, V, u);
}

/* Feeds <eos> and the prompt's words (text NULL: <eos> alone); `where`
 * names the prompt in errors. */
static void feed_prompt(generator *g, char *text, const char *where) {
  int n = 0, unknown = 0;
  g->ids[0] = g->runner.meta.eos_id;
  if (text) {
    n = runner_tokenise(&g->runner, text, g->ids + 1, MAX_PROMPT_WORDS, &unknown);
    if (n == 0) rnnd_input_error("%s: the prompt is empty (no words)", where);
    if (unknown == n)
      rnnd_input_error("%s: every word of the prompt is unknown to the model's vocabulary (%d words, all <unk>)",
                       where, n);
  }
  runner_reset(&g->runner);
  runner_feed(&g->runner, g->ids, NULL, n + 1);
}

/* Samples the tokens of one request and prints them. */
static void sample(generator *g, uint64_t request) {
  const rnnd_model_meta *m = &g->runner.meta;
  int at_line_start = 1;
  for (int i = 0; i < g->o->tokens; i++) {
    int32_t id = next_token(g, request, i);
    if (id == m->eos_id && !g->o->from_stdin) {
      fputc('\n', stdout);
      at_line_start = 1;
    } else {
      printf("%s%s", at_line_start ? "" : " ", m->vocab[id]);
      at_line_start = 0;
    }
    if (i + 1 < g->o->tokens) runner_feed(&g->runner, &id, NULL, 1);
  }
  if (!at_line_start || g->o->from_stdin) fputc('\n', stdout);
  fflush(stdout);
}

static void serve_stdin(generator *g) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  for (uint64_t request = 0; (len = getline(&line, &cap, stdin)) >= 0; request++) {
    if (len > 0 && line[len - 1] == '\n') line[len - 1] = '\0';
    char where[64];
    snprintf(where, sizeof where, "stdin line %llu", (unsigned long long)request + 1);
    feed_prompt(g, line, where);
    sample(g, request);
  }
  free(line);
}

int infer_generate(const rnnd_infer_options *o) {
  if (o->temperature < 0.0 || !isfinite(o->temperature))
    rnnd_input_error("--temperature: %g is below 0 (0 is greedy decoding)", o->temperature);
  if (o->has_prompt && o->from_stdin) rnnd_input_error("--prompt and --stdin exclude each other (--stdin reads the prompts)");
  generator g = {.o = o};
  runner_open(&g.runner, o->checkpoint, o->vocab_from, "generate", 1u << RNND_TASK_LM, o->threads);
  if (!g.runner.carries)
    rnnd_input_error("%s: a bidirectional model sees the future; generating needs a unidirectional language model",
                     o->checkpoint);
  g.ids = RNND_ALLOC(int32_t, MAX_PROMPT_WORDS + 1, "prompt ids");
  g.top = RNND_ALLOC(int32_t, o->top_k > 0 ? o->top_k : 1, "top-k ids");
  g.weights = RNND_ALLOC(double, g.runner.width, "sampling weights");
  if (o->top_k > g.runner.width)
    rnnd_input_error("--top-k: %d is more than the vocabulary's %d words", o->top_k, g.runner.width);
  if (o->from_stdin) {
    serve_stdin(&g);
  } else {
    char *prompt = o->has_prompt ? rnnd_strdup(o->prompt) : NULL;
    feed_prompt(&g, prompt, "--prompt");
    sample(&g, 0);
    free(prompt);
  }
  free(g.ids);
  free(g.top);
  free(g.weights);
  runner_close(&g.runner);
  return 0;
}
