/* runner.c — a model loaded for inference (runner.h). */
#include "runner.h"

#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/model_file.h"
#include "rnnd/words.h"

#define FIRST_STEPS 256 /* capacity at first; grows for longer inputs */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static void build_index(rnnd_runner *r) {
  const rnnd_model_meta *m = &r->meta;
  uint64_t slots = 16;
  while (slots < 2 * (uint64_t)m->vocab_size) slots *= 2;
  r->index = RNND_ALLOC(int32_t, slots, "vocabulary index");
  memset(r->index, 0xff, slots * sizeof *r->index);
  r->index_mask = slots - 1;
  for (int32_t id = 0; id < m->vocab_size; id++) {
    uint64_t k = hash_bytes(m->vocab[id], strlen(m->vocab[id])) & r->index_mask;
    while (r->index[k] >= 0 && strcmp(m->vocab[r->index[k]], m->vocab[id])) k = (k + 1) & r->index_mask;
    if (r->index[k] < 0) r->index[k] = id; /* a duplicate word keeps its first id */
  }
}

int32_t runner_word_id(const rnnd_runner *r, const char *word, size_t n) {
  if (n == 5 && !memcmp(word, "<unk>", 5)) return r->meta.unk_id;
  if (n == 5 && !memcmp(word, "<eos>", 5)) return r->meta.eos_id;
  for (uint64_t k = hash_bytes(word, n) & r->index_mask; r->index[k] >= 0; k = (k + 1) & r->index_mask) {
    const char *w = r->meta.vocab[r->index[k]];
    if (strlen(w) == n && !memcmp(w, word, n)) return r->index[k];
  }
  return -1;
}

int runner_tokenise(const rnnd_runner *r, char *text, int32_t *ids, int max_ids, int *unknown) {
  const size_t length = strlen(text);
  if (r->meta.lowercase) words_lowercase_ascii(text, text + length);
  rnnd_text_cursor line = {text, text + length};
  const char *w;
  size_t n;
  int count = 0;
  *unknown = 0;
  while (count < max_ids && words_next(&line, &w, &n)) {
    int32_t id = runner_word_id(r, w, n);
    if (id < 0 || (id == r->meta.unk_id)) ++*unknown;
    ids[count++] = id < 0 ? r->meta.unk_id : id;
  }
  return count;
}

/* What the verb needs of the file besides the weights. */
static void check_meta(const rnnd_runner *r, const char *meta_from) {
  const rnnd_model_shape *s = &r->layout.shape;
  const rnnd_model_meta *m = &r->meta;
  const char *source = meta_from ? meta_from : r->path;
  const char *hint = meta_from ? "" : " (a model file from before rnn_dist stored it: pass --vocab-from DATA.h5, "
                                      "the data set it was trained on)";
  if (s->task != RNND_TASK_REGRESS && !m->vocab_size)
    rnnd_input_error("%s: no vocabulary (/vocab)%s", source, hint);
  if (s->task != RNND_TASK_REGRESS && m->vocab_size != s->vocab_size)
    rnnd_input_error("%s: vocabulary of %d words but the model %s has vocab_size %d", source, (int)m->vocab_size,
                     r->path, s->vocab_size);
  if (s->task == RNND_TASK_CLASSIFY && m->n_classes != s->n_classes)
    rnnd_input_error("%s: %s%d class names but the model %s has %d classes%s", source, m->n_classes ? "" : "no /label_names: ",
                     (int)m->n_classes, r->path, s->n_classes, m->n_classes ? "" : hint);
  if (s->task == RNND_TASK_REGRESS && m->n_features != s->n_features)
    rnnd_input_error("%s: %s%d features but the model %s has %d%s", source, m->n_features ? "" : "no /mean and /std: ",
                     (int)m->n_features, r->path, s->n_features, m->n_features ? "" : hint);
}

static void open_backend(rnnd_runner *r, int steps) {
  if (r->be) {
    r->be->ops->destroy(r->be);
    batch_free(&r->batch);
  }
  r->steps = steps;
  rnnd_backend_capacity cap = {.max_pieces = 1, .max_steps = steps, .max_tokens = steps, .threads = r->threads,
                               .storage = RNND_DTYPE_F32};
  r->be = cpu_backend_create(&r->layout, &cap);
  if (!r->be->ops->predict_batch) RNND_FAIL("the CPU backend has no predict_batch");
  batch_init(&r->batch, 1, steps, steps);
  if (r->layout.shape.n_features) batch_init_series(&r->batch, r->layout.shape.n_features);
}

static void check_task(const char *model, const rnnd_model_shape *s, const char *verb, unsigned tasks) {
  if (tasks & (1u << s->task)) return;
  rnnd_input_error("%s: a %s model (model.task = %s); rnn_dist %s takes %s", model,
                   s->task == RNND_TASK_LM ? "language" : s->task == RNND_TASK_CLASSIFY ? "classifier" : "forecasting",
                   model_task_name(s->task), verb,
                   tasks == (1u << RNND_TASK_LM) ? "a language model (lm)" : "a classifier or a forecaster");
}

void runner_open(rnnd_runner *r, const char *model, const char *meta_from, const char *verb, unsigned tasks,
                 int threads) {
  memset(r, 0, sizeof *r);
  r->path = model;
  r->threads = threads;
  rnnd_model_shape shape;
  int trained_max_len;
  model_file_read_shape(model, &shape, &trained_max_len);
  check_task(model, &shape, verb, tasks);
  model_meta_read(&r->meta, meta_from ? meta_from : model);
  model_layout_init(&r->layout, &shape);
  check_meta(r, meta_from);
  r->params = RNND_ALLOC(float, r->layout.numel, "parameters");
  model_file_load_inference_params(model, &r->layout, r->params);
  if (r->meta.vocab_size) build_index(r);
  r->width = rnnd_output_width(&shape);
  r->out = RNND_ALLOC(float, r->width, "model outputs");
  r->carries = shape.directions == 1;
  r->state = RNND_ALLOC(float, rnnd_state_width(&shape), "carried state");
  r->next_state = RNND_ALLOC(float, rnnd_state_width(&shape), "carried state");
  open_backend(r, FIRST_STEPS);
  runner_reset(r);
}

void runner_reset(rnnd_runner *r) {
  memset(r->state, 0, (size_t)rnnd_state_width(&r->layout.shape) * sizeof *r->state);
}

void runner_feed(rnnd_runner *r, const int32_t *ids, const float *rows, int n) {
  RNND_ASSERT(n >= 1);
  if (n > r->steps) {
    int steps = r->steps;
    while (steps < n) steps *= 2;
    open_backend(r, steps);
  }
  batch_fill_inputs(&r->batch, ids, rows, n);
  if (r->carries) r->be->ops->carry_state(r->be, r->state, r->next_state);
  r->be->ops->predict_batch(r->be, r->params, &r->batch, r->out);
  if (!r->carries) return;
  float *t = r->state;
  r->state = r->next_state;
  r->next_state = t;
}

void runner_close(rnnd_runner *r) {
  if (r->be) r->be->ops->destroy(r->be);
  batch_free(&r->batch);
  free(r->params);
  free(r->out);
  free(r->state);
  free(r->next_state);
  free(r->index);
  model_meta_free(&r->meta);
  memset(r, 0, sizeof *r);
}
