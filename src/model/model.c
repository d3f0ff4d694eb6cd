/* model.c — parameter layout in PyTorch state_dict order and initialisation. */
#include "rnnd/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/rng.h"

const char *model_cell_name(int cell) { return cell == RNND_CELL_LSTM ? "lstm" : "gru"; }
const char *model_task_name(int task) {
  return task == RNND_TASK_CLASSIFY ? "classify" : task == RNND_TASK_REGRESS ? "regress" : "lm";
}

void model_shape_from_config(rnnd_model_shape *shape, const rnnd_model_config *cfg, int vocab_size) {
  shape->cell = cfg->cell;
  shape->layers = cfg->layers;
  shape->embed = cfg->embed;
  shape->hidden = cfg->hidden;
  shape->vocab_size = vocab_size;
  shape->directions = cfg->bidirectional ? 2 : 1;
  shape->tie_weights = cfg->tie_weights;
  shape->task = cfg->task;
  shape->decoder = RNND_DECODER_SOFTMAX;
  shape->n_clusters = 0;
  if (cfg->decoder == RNND_DECODER_ADAPTIVE) {
    const char *why = model_set_adaptive(shape, cfg->cutoffs, cfg->div_value);
    if (why) rnnd_input_error("config: model.cutoffs = '%s', model.div_value = %g: %s", cfg->cutoffs, cfg->div_value, why);
  }
}

const char *model_set_adaptive(rnnd_model_shape *shape, const char *cutoffs, double div_value) {
  static char why[160];
  const int top = shape->hidden * shape->directions;
  const char *p = cutoffs;
  int n = 0, previous = 0;
  shape->decoder = RNND_DECODER_ADAPTIVE;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',')) return "expected comma-separated integers";
    if (v <= previous || v >= shape->vocab_size) {
      snprintf(why, sizeof why, "cutoffs must ascend and lie in 1..%d (vocab size - 1); %ld does not",
               shape->vocab_size - 1, v);
      return why;
    }
    if (n == RNND_MAX_CLUSTERS) return "more than 8 tail clusters";
    shape->cutoffs[n++] = (int)v;
    previous = (int)v;
    p = *end ? end + 1 : end;
  }
  if (n == 0) return "at least one cutoff is needed";
  shape->n_clusters = n;
  shape->cutoffs[n] = shape->vocab_size;
  for (int i = 0; i < n; i++) {
    /* int(in_features // div_value ** (i + 1)), as PyTorch computes it */
    shape->tail_hidden[i] = (int)floor((double)top / pow(div_value, i + 1));
    if (shape->tail_hidden[i] < 1) {
      snprintf(why, sizeof why, "tail cluster %d would project to %d units (input %d / %g^%d)", i,
               shape->tail_hidden[i], top, div_value, i + 1);
      return why;
    }
  }
  return NULL;
}

static size_t add_view(rnnd_layout *l, const char *name, int64_t rows, int64_t cols, int ndim) {
  RNND_ASSERT(l->n_views < RNND_MAX_VIEWS);
  rnnd_param_view *v = &l->views[l->n_views++];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->ndim = ndim;
  v->rows = rows;
  v->cols = cols;
  v->numel = (size_t)(rows * cols);
  v->offset = l->numel;
  v->alias = 0;
  l->numel += v->numel;
  return v->offset;
}

void model_layout_init(rnnd_layout *l, const rnnd_model_shape *s) {
  memset(l, 0, sizeof *l);
  l->shape = *s;
  l->gates = s->cell == RNND_CELL_LSTM ? 4 : 3;
  RNND_ASSERT(s->layers >= 1 && s->layers <= RNND_MAX_LAYERS);
  int64_t gh = (int64_t)l->gates * s->hidden;
  if (s->task == RNND_TASK_REGRESS) {
    RNND_ASSERT(s->n_features >= 1 && !s->tie_weights);
    l->input_weight = add_view(l, "input.weight", s->embed, s->n_features, 2);
    l->input_bias = add_view(l, "input.bias", s->embed, 1, 1);
  } else {
    l->embedding_weight = add_view(l, "embedding.weight", s->vocab_size, s->embed, 2);
  }
  for (int layer = 0; layer < s->layers; layer++) {
    int input_size = layer == 0 ? s->embed : s->hidden * s->directions;
    for (int dir = 0; dir < s->directions; dir++) {
      const char *suffix = dir ? "_reverse" : "";
      char name[48];
      rnnd_rnn_offsets *o = &l->rnn[layer][dir];
      o->input_size = input_size;
      snprintf(name, sizeof name, "rnn.weight_ih_l%d%s", layer, suffix);
      o->weight_ih = add_view(l, name, gh, input_size, 2);
      snprintf(name, sizeof name, "rnn.weight_hh_l%d%s", layer, suffix);
      o->weight_hh = add_view(l, name, gh, s->hidden, 2);
      snprintf(name, sizeof name, "rnn.bias_ih_l%d%s", layer, suffix);
      o->bias_ih = add_view(l, name, gh, 1, 1);
      snprintf(name, sizeof name, "rnn.bias_hh_l%d%s", layer, suffix);
      o->bias_hh = add_view(l, name, gh, 1, 1);
    }
  }
  int64_t top = (int64_t)s->hidden * s->directions;
  if (s->task == RNND_TASK_REGRESS) {
    l->decoder_weight = add_view(l, "decoder.weight", s->n_features, top, 2);
    l->decoder_bias = add_view(l, "decoder.bias", s->n_features, 1, 1);
    return;
  }
  if (s->task == RNND_TASK_CLASSIFY) {
    RNND_ASSERT(!s->tie_weights && s->n_classes >= 1);
    l->classifier_weight = add_view(l, "classifier.weight", s->n_classes, top, 2);
    l->classifier_bias = add_view(l, "classifier.bias", s->n_classes, 1, 1);
    return;
  }
  if (s->decoder == RNND_DECODER_ADAPTIVE) {
    RNND_ASSERT(!s->tie_weights && s->n_clusters >= 1 && s->n_clusters <= RNND_MAX_CLUSTERS);
    l->head_weight = add_view(l, "decoder.head.weight", s->cutoffs[0] + s->n_clusters, top, 2);
    for (int i = 0; i < s->n_clusters; i++) {
      char name[48];
      snprintf(name, sizeof name, "decoder.tail.%d.0.weight", i);
      l->tail_proj[i] = add_view(l, name, s->tail_hidden[i], top, 2);
      snprintf(name, sizeof name, "decoder.tail.%d.1.weight", i);
      l->tail_out[i] = add_view(l, name, s->cutoffs[i + 1] - s->cutoffs[i], s->tail_hidden[i], 2);
    }
    return;
  }
  if (s->tie_weights) {
    RNND_ASSERT(top == s->embed);
    rnnd_param_view *v = &l->views[l->n_views++];
    *v = l->views[0];
    snprintf(v->name, sizeof v->name, "decoder.weight");
    v->alias = 1;
    l->decoder_weight = l->embedding_weight;
  } else {
    l->decoder_weight = add_view(l, "decoder.weight", s->vocab_size, top, 2);
  }
  l->decoder_bias = add_view(l, "decoder.bias", s->vocab_size, 1, 1);
}

const rnnd_param_view *model_find_view(const rnnd_layout *l, const char *name) {
  for (int i = 0; i < l->n_views; i++)
    if (!strcmp(l->views[i].name, name)) return &l->views[i];
  return NULL;
}

static void fill_uniform(float *p, size_t n, float bound, uint64_t key) {
  for (size_t i = 0; i < n; i++) p[i] = bound * (2.0f * rng_uniform_from(rng_key2(key, i)) - 1.0f);
}

void model_init_params(const rnnd_layout *l, float *params, uint64_t seed) {
  float rnn_bound = 1.0f / sqrtf((float)l->shape.hidden);
  for (int i = 0; i < l->n_views; i++) {
    const rnnd_param_view *v = &l->views[i];
    if (v->alias) continue;
    uint64_t key = rng_key2(seed ^ 0x1A17ull, (uint64_t)i);
    float *p = params + v->offset;
    if (l->shape.task == RNND_TASK_REGRESS && strncmp(v->name, "rnn.", 4)) {
      /* nn.Linear's U(-1/sqrt(in), 1/sqrt(in)) for weights and biases */
      int64_t in = !strncmp(v->name, "input.", 6) ? l->shape.n_features : l->shape.hidden * l->shape.directions;
      fill_uniform(p, v->numel, 1.0f / sqrtf((float)in), key);
    } else if (!strcmp(v->name, "decoder.bias")) memset(p, 0, v->numel * sizeof *p);
    else if (!strncmp(v->name, "decoder.head.", 13) || !strncmp(v->name, "decoder.tail.", 13) ||
             !strncmp(v->name, "classifier.", 11))
      fill_uniform(p, v->numel, 1.0f / sqrtf((float)v->cols), key); /* nn.Linear's U(-1/sqrt(in), 1/sqrt(in)) */
    else if (!strncmp(v->name, "rnn.", 4)) fill_uniform(p, v->numel, rnn_bound, key);
    else fill_uniform(p, v->numel, 0.1f, key);
  }
}

void model_init_decoder_bias_unigram(const rnnd_layout *l, float *params, const int64_t *counts) {
  const rnnd_param_view *bias = model_find_view(l, "decoder.bias");
  int64_t vocab = l->shape.vocab_size, total = 0;
  for (int64_t v = 0; v < vocab; v++) total += counts[v];
  for (int64_t v = 0; v < vocab; v++)
    params[bias->offset + v] = (float)log((double)(counts[v] + 1) / (double)(total + vocab));
}

double model_train_flops_per_token(const rnnd_model_shape *s) {
  double gates = s->cell == RNND_CELL_LSTM ? 4 : 3, forward = 0;
  for (int layer = 0; layer < s->layers; layer++) {
    double input = layer == 0 ? s->embed : (double)s->hidden * s->directions;
    forward += s->directions * 2.0 * gates * s->hidden * (input + s->hidden);
  }
  if (s->task == RNND_TASK_CLASSIFY) return 3.0 * forward; /* the head is one row a sequence */
  if (s->task == RNND_TASK_REGRESS)
    return 3.0 * (forward + 2.0 * s->n_features * (double)(s->embed + s->hidden * s->directions));
  if (s->decoder == RNND_DECODER_ADAPTIVE)
    /* the head only: a tail's cost falls on the tokens of its cluster, which
     * depends on the data, not the shape */
    forward += 2.0 * (s->cutoffs[0] + s->n_clusters) * (double)s->hidden * s->directions;
  else
    forward += 2.0 * s->vocab_size * (double)s->hidden * s->directions;
  return 3.0 * forward;
}
