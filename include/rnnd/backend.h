/* backend.h — the compute interface the trainer drives: forward + backward
 * of the whole model on one packed batch, and evaluation. The CPU backend is
 * the reference; the CUDA backend (cuda_backend.h) implements the same ops
 * and must compute the same function. The training step that drives a
 * backend (gradient all-reduce, clip, optimizer) is step.h.
 *
 * Parameters and gradients are flat fp32 buffers in rnnd_layout order. A
 * backend is created for a capacity (largest batch the sampler can produce)
 * and allocates all its memory then; train/eval never allocate. */
#ifndef RNND_BACKEND_H
#define RNND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/batch.h"
#include "rnnd/half.h"
#include "rnnd/model.h"

/* The regularisers of one training batch (NULL or all zero: none, as in
 * evaluation). Dropout masks are a pure function of seed and step plus the
 * piece id, layer slot, position in the piece (not when locked) and unit
 * index; the embedding dropout's of the word id: the same for any batching,
 * thread count or world size. Loss terms are per target like the NLL (the
 * backend adds their gradient times loss_weight; the loss it returns is
 * the NLL alone). */
typedef struct {
  uint64_t seed;
  int64_t step;
  float p;           /* dropout on the embedding output, between layers and on the top layer's output; 0 disables */
  int locked;        /* variational ("locked") dropout: one mask per piece and unit, the same at every step */
  float p_embedding; /* embedding dropout: a word's whole vector dropped for the batch, else scaled 1/(1 - p) */
  float ar_alpha;    /* activation regularisation: ar_alpha * sum of y^2 / width over the decoder input rows y */
  float tar_beta;    /* temporal AR: tar_beta * sum of (h_t - h_{t-1})^2 / width, the top layer's raw output
                        at consecutive steps of each piece */
  float p_weight;    /* weight dropout (DropConnect) on every hidden-to-hidden matrix, one mask per batch
                        (AWD-LSTM's WeightDrop); needs capacity.weight_dropout */
} rnnd_dropout;

typedef struct rnnd_backend rnnd_backend;

/* Head measurements of a batch, summed over its pieces. */
typedef struct {
  int64_t correct;     /* classify: pieces whose label scored highest */
  double sq_error;     /* regress: sum of squared errors in original units */
  double abs_error;    /* regress: sum of absolute errors in original units */
  int64_t values;      /* regress: scored rows x features */
} rnnd_head_stats;

typedef struct {
  const char *name;
  /* Adds loss_weight * d(sum of target NLL)/d(params) into grads and returns
   * the sum of target NLL (in double). model.task = classify: the targets
   * are the pieces' labels (batch.labels), one per piece. regress: the
   * "NLL" of a scored row is its squared error averaged over the features
   * (normalised units), so the loss is the MSE. */
  double (*train_batch)(rnnd_backend *be, const float *params, float *grads, const rnnd_batch *b,
                        const rnnd_dropout *dropout, float loss_weight);
  /* Sum of target NLL without dropout. */
  double (*eval_batch)(rnnd_backend *be, const float *params, const rnnd_batch *b);
  /* Bytes held for the activations saved for backward (in the storage
   * format), and for everything else the backend allocated (workspace). */
  size_t (*activation_bytes)(const rnnd_backend *be);
  size_t (*workspace_bytes)(const rnnd_backend *be);
  /* Histogram of one gate's values (after its sigmoid/tanh) over layer
   * `layer`, both directions, for the last train_batch: `bins` equal bins
   * on [-1, 1], counts added into counts[bins]. */
  void (*gate_histogram)(const rnnd_backend *be, int layer, int gate, int bins, int64_t *counts);
  void (*destroy)(rnnd_backend *be);
  /* Streams (data.mode = stream); NULL where not supported. The next
   * train_batch or eval_batch starts piece i from row i of state_in instead
   * of zeros, and writes to row i of state_out the state after its last
   * step, for the pieces that run to the batch's last step. A row is
   * rnnd_state_width floats: per layer h then c (c unused by a GRU). The
   * gradient stops at state_in (truncated backpropagation). One call covers
   * one batch; unidirectional models only. */
  void (*carry_state)(rnnd_backend *be, const float *state_in, float *state_out);
  /* What the last train/eval batch's head measured besides the loss
   * (NULL where the tasks that need it are not supported). */
  void (*last_stats)(const rnnd_backend *be, rnnd_head_stats *out);
  /* How many times the workspace grew after creation because a batch
   * shape needed more than the capacity's sizing (cuDNN's temp spaces are
   * not monotonic in the shape). NULL: a backend whose workspace never
   * grows (backend_workspace_growths then says 0). */
  int64_t (*workspace_growths)(const rnnd_backend *be);
  /* What the products run on, for the start-up line ("bf16 products
   * through oneDNN 2.6.3 on avx512_core_bf16"). NULL: nothing to add
   * (backend_describe then says ""). */
  const char *(*describe)(const rnnd_backend *be);
  /* Inference (`rnn_dist generate`, `predict`): runs b forward without
   * dropout (from the carried state when carry_state armed one, leaving
   * the end state there) and writes for each piece, in b's packed order,
   * what the head says after the piece's last step, rnnd_output_width
   * floats: lm, the log-probabilities of the next token (either decoder:
   * the adaptive softmax's full distribution); classify, the classes'
   * log-probabilities; regress, the predicted next step in normalised
   * units. NULL: the backend cannot (the CUDA backend: inference runs on
   * the CPU backend). */
  void (*predict_batch)(rnnd_backend *be, const float *params, const rnnd_batch *b, float *out);
} rnnd_backend_ops;


/* Floats predict_batch writes per piece. */
static inline int rnnd_output_width(const rnnd_model_shape *s) {
  return s->task == RNND_TASK_CLASSIFY ? s->n_classes : s->task == RNND_TASK_REGRESS ? s->n_features : s->vocab_size;
}

/* Floats in one piece's carried state (see carry_state). */
static inline int rnnd_state_width(const rnnd_model_shape *s) { return s->layers * 2 * s->hidden; }

struct rnnd_backend {
  const rnnd_backend_ops *ops;
  const rnnd_layout *layout; /* borrowed; must outlive the backend */
};

/* The optional entries with their fallbacks. */
static inline int64_t backend_workspace_growths(const rnnd_backend *be) {
  return be->ops->workspace_growths ? be->ops->workspace_growths(be) : 0;
}
static inline const char *backend_describe(const rnnd_backend *be) {
  return be->ops->describe ? be->ops->describe(be) : "";
}

typedef struct {
  int max_pieces;
  int max_steps;
  int64_t max_tokens;
  int threads; /* 0 = all cores */
  /* Format of the activations kept between layers and for backward. With
   * fp16/bf16 every layer input and output, saved gate value and
   * activation gradient is rounded to it (and the saved ones stored in it),
   * so overflow and underflow happen as on a GPU; arithmetic is fp32.
   * Weights arrive already rounded (the trainer's compute copy). */
  rnnd_dtype storage;
  /* train.bptt_segment: > 0 runs batches longer than this many steps
   * through checkpointed, segmented backpropagation (unidirectional
   * models); activation buffers then hold one segment. */
  int bptt_segment;
  /* 1: training batches may drop hidden-to-hidden weights (rnnd_dropout
   * p_weight): the backend keeps a dropped copy of those matrices and their
   * gradient. */
  int weight_dropout;
} rnnd_backend_capacity;

/* CPU reference backend; free with be->ops->destroy(be). */
rnnd_backend *cpu_backend_create(const rnnd_layout *layout, const rnnd_backend_capacity *cap);

/* Detects a BLAS that silently fell back to slow generic kernels (OpenBLAS
 * 0.3.21 on CPUs it does not recognise) and returns a one-line advice, or
 * NULL if all is well. Also returns the BLAS core name in *core. */
const char *cpu_blas_advice(const char **core);
void cpu_set_threads(int threads);

#endif
