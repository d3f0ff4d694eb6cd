/* config.h — the run configuration: INI sections [model] [data] [train]
 * [amp] [comm] [metrics] [output], their documented defaults, parsing of a file plus --set
 * section.key=value overrides, and printing of the resolved configuration.
 *
 * The table of keys lives in config.c; docs/config.md is generated from the
 * same table (the key list of rnn_dist --help), so documentation and parser cannot
 * drift apart. Strings inside the struct are owned by it: config_free(). */
#ifndef RNND_CONFIG_H
#define RNND_CONFIG_H

#include <stdio.h>

typedef enum { RNND_CELL_GRU = 0, RNND_CELL_LSTM = 1 } rnnd_cell;
typedef enum { RNND_OPT_ADAM = 0, RNND_OPT_SGD = 1 } rnnd_optimizer_kind;
typedef enum {
  RNND_LR_CONSTANT = 0,
  RNND_LR_LINEAR = 1,
  RNND_LR_COSINE = 2,
  RNND_LR_STEP = 3
} rnnd_lr_schedule;
/* The output layer: a full softmax over the vocabulary (nn.Linear), or the
 * exact adaptive softmax of Grave et al. 2017 (nn.AdaptiveLogSoftmaxWithLoss). */
typedef enum { RNND_DECODER_SOFTMAX = 0, RNND_DECODER_ADAPTIVE = 1 } rnnd_decoder;
/* decoder.bias at the start of training: zero, or each token's log
 * frequency in the training set (model_init_decoder_bias_unigram). */
typedef enum { RNND_BIAS_INIT_ZERO = 0, RNND_BIAS_INIT_UNIGRAM = 1 } rnnd_bias_init;
/* lm: next-token language model; classify: one label per sequence from
 * the final hidden state; regress: next-step forecasting of real-valued
 * features (docs/tasks.md) */
typedef enum { RNND_TASK_LM = 0, RNND_TASK_CLASSIFY = 1, RNND_TASK_REGRESS = 2 } rnnd_task;
/* pieces: sequences from zero states in length buckets; stream: stream.h */
typedef enum { RNND_DATA_PIECES = 0, RNND_DATA_STREAM = 1 } rnnd_data_mode;
typedef enum { RNND_DEVICE_AUTO = 0, RNND_DEVICE_CPU = 1, RNND_DEVICE_CUDA = 2 } rnnd_device;

typedef struct {
  int cell;          /* rnnd_cell */
  int layers;        /* 1..8 */
  int embed;         /* embedding width */
  int hidden;        /* hidden units per direction */
  int bidirectional; /* 0/1 */
  double dropout;    /* on embeddings, between layers, before the decoder */
  int locked_dropout;       /* that dropout variational: one mask per sequence piece, reused at every step */
  double embedding_dropout; /* whole word vectors dropped per batch (AWD-LSTM's dropoute) */
  double ar_alpha;          /* activation regularisation on the decoder input (AWD-LSTM's alpha) */
  double tar_beta;          /* temporal activation regularisation on the top layer's output (beta) */
  double weight_dropout;    /* DropConnect on the hidden-to-hidden matrices, one mask per batch (wdrop) */
  int tie_weights;   /* decoder.weight shares embedding.weight */
  int task;          /* rnnd_task */
  int decoder;       /* rnnd_decoder */
  int decoder_bias_init; /* rnnd_bias_init */
  char *cutoffs;     /* adaptive: ascending vocabulary cutoffs, "2000,10000" */
  double div_value;  /* adaptive: tail cluster i projects to input / div_value^(i+1) units */
} rnnd_model_config;

typedef struct {
  char *dir;   /* if set, default for train/valid/test: DIR/{train,valid,test}.h5 */
  char *train;
  char *valid;
  char *test;
  int max_len;     /* longer sequences are cut into pieces of <= max_len targets */
  char *buckets;   /* "auto" or comma-separated upper bounds of length buckets */
  int num_buckets; /* bucket count for "auto" */
  int mode;        /* rnnd_data_mode */
  int bptt;        /* stream mode: steps per window */
  int target_last; /* regress: score only the last k steps of each piece (0: all) */
} rnnd_data_config;

typedef struct {
  int device;        /* rnnd_device */
  int precision;     /* rnnd_dtype of weights and activations; fp32 master weights always */
  long seed;
  long steps;        /* optimizer steps; 0 = run `epochs` epochs */
  int epochs;
  int global_batch;  /* sequences per optimizer step */
  long global_batch_tokens; /* > 0: a token budget per step instead of global_batch */
  int eval_batch;    /* sequences per evaluation batch */
  int optimizer;     /* rnnd_optimizer_kind */
  double lr;
  int lr_schedule;   /* rnnd_lr_schedule */
  long warmup_steps;
  double min_lr;
  long step_size;
  double gamma;
  double beta1, beta2, eps;
  double weight_decay;
  double momentum;
  double clip_norm;  /* 0 disables clipping */
  double ema_decay;  /* > 0: averaged weights for evaluation, model files and inference (optim.h) */
  long ema_start;    /* the update that starts the average (1 = the first) */
  int bptt_segment;  /* 0 = whole-batch backpropagation; K > 0: by segments of K steps */
  long log_every;
  long eval_every;   /* 0 = only at the end */
  int threads;       /* 0 = all available cores */
  double time_limit_s; /* of this start (a resumed run has it afresh); 0 = no limit; stop (and save) once exceeded */
} rnnd_train_config;

/* Dynamic loss scaling for fp16 (PyTorch GradScaler / apex defaults). */
typedef struct {
  int loss_scaling;       /* 0: fp16 runs with a fixed scale of 1 (shows underflow) */
  double init_scale;
  double growth_factor;
  double backoff_factor;
  long growth_interval;   /* consecutive finite steps before the scale grows */
  double min_scale, max_scale;
} rnnd_amp_config;

#define RNND_GRAD_DTYPE_AUTO 3 /* comm.grad_dtype = auto: the same as train.precision */

typedef struct {
  long hist_every;   /* steps between gate histograms in metrics.h5; 0 = none */
} rnnd_metrics_config;

typedef struct {
  double bucket_mb;  /* gradient all-reduce bucket size */
  int grad_dtype;    /* rnnd_dtype on the wire */
  long check_every;  /* steps between replica checksums; 0 = never */
  double timeout_s;  /* watchdog bound on one collective's wait; 0 = none */
} rnnd_comm_config;

typedef struct {
  char *dir;
  long save_every; /* 0 = only at the end */
  long checkpoint_every; /* 0 = only at the end and on preemption */
  int keep;              /* checkpoints kept in dir */
  int preempt_exit_code; /* exit code after a checkpoint on SIGTERM/SIGUSR1 */
} rnnd_output_config;

typedef struct {
  rnnd_model_config model;
  rnnd_data_config data;
  rnnd_train_config train;
  rnnd_amp_config amp;
  rnnd_comm_config comm;
  rnnd_metrics_config metrics;
  rnnd_output_config output;
} rnnd_config;

/* Fills every field with its documented default. */
void config_init_defaults(rnnd_config *cfg);
/* Parses an INI file on top of the current values; bad input exits (code 2)
 * with "FILE:LINE: ..." naming the key and, for unknown keys, the nearest one. */
void config_load_file(rnnd_config *cfg, const char *path);
/* Applies one "section.key=value" override (from --set). */
void config_apply_override(rnnd_config *cfg, const char *assignment);
/* Cross-field checks and derived defaults (data.dir); call once after loading. */
void config_finalize(rnnd_config *cfg);
/* Writes the resolved configuration as INI text that config_load_file reads. */
void config_write(const rnnd_config *cfg, FILE *out);
/* Lists every key with its type, default and meaning (for --help). */
void config_print_reference(FILE *out);
void config_free(rnnd_config *cfg);

/* Levenshtein distance, used for "did you mean" suggestions. */
int rnnd_edit_distance(const char *a, const char *b);

#endif
