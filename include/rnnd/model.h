/* model.h — the model's shape and its parameters: one flat fp32 buffer with
 * named views laid out exactly as PyTorch's state_dict of
 *   embedding = nn.Embedding(V, E)
 *   rnn       = nn.GRU / nn.LSTM(E, H, num_layers=L, bidirectional=B)
 *   decoder   = nn.Linear(H * dirs, V), or
 *               nn.AdaptiveLogSoftmaxWithLoss(H * dirs, V, cutoffs, div_value)
 * (row-major, gate order r,z,n for GRU and i,f,g,o for LSTM, the same as
 * cuDNN's). With tied weights decoder.weight is a view of the same storage as
 * embedding.weight, so its gradient accumulates both uses.
 *
 * The flat buffer is what the optimizer, the gradient all-reduce and the
 * checkpoint see; backends address it through rnnd_layout offsets only. */
#ifndef RNND_MODEL_H
#define RNND_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/config.h"

#define RNND_MAX_LAYERS 8
#define RNND_MAX_CLUSTERS 8 /* tail clusters of the adaptive decoder */
#define RNND_MAX_VIEWS (2 + RNND_MAX_LAYERS * 2 * 4 + 2 + 2 * RNND_MAX_CLUSTERS)

typedef struct {
  int cell;          /* rnnd_cell */
  int layers;
  int embed;
  int hidden;
  int vocab_size;
  int directions;    /* 1 or 2 */
  int tie_weights;
  /* rnnd_task. classify: classifier = nn.Linear(H * dirs, n_classes) on
   * the final hidden state, in place of the decoder. */
  int task;
  int n_classes;
  /* regress: input = nn.Linear(n_features, E) in place of the embedding
   * (vocab_size 0) and decoder = nn.Linear(H * dirs, n_features). */
  int n_features;
  /* The output layer (rnnd_decoder). Adaptive (torch.nn.AdaptiveLogSoftmaxWithLoss,
   * head_bias = False): the head scores the cutoffs[0] most frequent ids and
   * one entry per tail cluster; cluster i holds ids cutoffs[i] ..
   * cutoffs[i+1] - 1 (cutoffs[n_clusters] = vocab_size) through a
   * projection to tail_hidden[i] units and an output layer. */
  int decoder;
  int n_clusters;
  int cutoffs[RNND_MAX_CLUSTERS + 1];
  int tail_hidden[RNND_MAX_CLUSTERS];
} rnnd_model_shape;

typedef struct {
  char name[48];     /* PyTorch state_dict name */
  int ndim;          /* 1 or 2 */
  int64_t rows, cols;/* cols = 1 for vectors */
  size_t offset;     /* in floats, into the flat buffer */
  size_t numel;
  int alias;         /* 1 if it shares storage with an earlier view (tied) */
} rnnd_param_view;

/* Offsets of one direction of one recurrent layer. */
typedef struct {
  size_t weight_ih, weight_hh, bias_ih, bias_hh;
  int input_size;
} rnnd_rnn_offsets;

typedef struct {
  rnnd_model_shape shape;
  int gates;                       /* 3 for GRU, 4 for LSTM */
  size_t numel;                    /* floats in the flat buffer (unique storage) */
  size_t embedding_weight;         /* offsets */
  size_t decoder_weight, decoder_bias; /* full softmax */
  size_t classifier_weight, classifier_bias; /* classify: [n_classes, top], [n_classes] */
  size_t input_weight, input_bias;           /* regress: [embed, n_features], [embed] */
  size_t head_weight;                 /* adaptive: decoder.head.weight [cutoffs[0] + n_clusters, top] */
  size_t tail_proj[RNND_MAX_CLUSTERS]; /* decoder.tail.i.0.weight [tail_hidden[i], top] */
  size_t tail_out[RNND_MAX_CLUSTERS];  /* decoder.tail.i.1.weight [cluster size, tail_hidden[i]] */
  rnnd_rnn_offsets rnn[RNND_MAX_LAYERS][2];
  int n_views;
  rnnd_param_view views[RNND_MAX_VIEWS];
} rnnd_layout;

/* Exits with a config error naming model.cutoffs / model.div_value when the
 * adaptive decoder does not fit the vocabulary. */
void model_shape_from_config(rnnd_model_shape *shape, const rnnd_model_config *cfg, int vocab_size);
/* "lm", "classify" or "regress". */
const char *model_task_name(int task);
/* Adaptive decoder: fills cutoffs, n_clusters and tail_hidden from the
 * cutoffs text ("2000,10000") and div_value; returns NULL or what is wrong. */
const char *model_set_adaptive(rnnd_model_shape *shape, const char *cutoffs, double div_value);
/* Computes the layout; the shape must already be valid (config_finalize). */
void model_layout_init(rnnd_layout *layout, const rnnd_model_shape *shape);
const rnnd_param_view *model_find_view(const rnnd_layout *layout, const char *name);
/* PyTorch-style initialisation: embedding and decoder weight U(-0.1, 0.1),
 * decoder bias 0, recurrent weights and biases U(-1/sqrt(H), 1/sqrt(H)),
 * drawn from a counter-based generator keyed by seed, so it is the same on
 * every rank and every backend. */
void model_init_params(const rnnd_layout *layout, float *params, uint64_t seed);
/* model.decoder_bias_init = unigram: decoder.bias[v] = log((counts[v] + 1) /
 * (N + V)), the add-one smoothed log frequency of token v over the N
 * training tokens, so the untrained model predicts the base rates. Adam
 * moves a bias by about lr a step, so from zero it would need thousands of
 * steps to span WikiText-2's 10 nats of log frequencies. */
void model_init_decoder_bias_unigram(const rnnd_layout *layout, float *params, const int64_t *counts);
const char *model_cell_name(int cell);
/* Training FLOPs per target token (forward + backward = 3x forward), for
 * throughput reports; adaptive: the head only. */
double model_train_flops_per_token(const rnnd_model_shape *shape);

#endif
