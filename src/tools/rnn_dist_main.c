/* rnn_dist_main.c — command line of rnn_dist: `train` (the default),
 * `eval`, `generate` and `predict`, each parsed with getopt_long
 * (options.h). Everything else lives in the library; main only parses
 * arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"
#include "rnnd/infer.h"
#include "rnnd/options.h"
#include "rnnd/comm.h"
#include "rnnd/config.h"
#include "rnnd/device.h"
#include "rnnd/model_file.h"
#include "rnnd/task.h"
#include "rnnd/trainer.h"

static void print_help(void) {
  printf(
      "rnn_dist %s — distributed GRU/LSTM trainer\n\n"
      "usage:\n"
      "  rnn_dist [train] --config FILE [--set section.key=value]... [--init MODEL.h5 | --resume CKPT|auto] [--dry-run]\n"
      "  rnn_dist eval --checkpoint MODEL.h5 --data DATA.h5 [--max-len N] [--batch N] [--threads N] [--device D]\n"
      "  rnn_dist generate --checkpoint MODEL.h5 [--prompt TEXT | --stdin] [--tokens N] [--temperature T]\n"
      "                    [--top-k K] [--seed S]\n"
      "  rnn_dist predict --checkpoint MODEL.h5 (--input FILE | --stdin) [--horizon H]\n"
      "  mpirun -np N rnn_dist --config FILE      (one rank per GPU, or per core group on CPUs)\n"
      "  every option takes its value as --opt VALUE or --opt=VALUE\n\n"
      "train options:\n"
      "  --config FILE          INI file with sections [model] [data] [train] [amp] [comm] [metrics] [output]\n"
      "  --set section.key=V    override one key (repeatable; applied after --config, in order)\n"
      "  --init MODEL.h5        start from the parameters of a model file of the same shape\n"
      "  --resume CKPT|auto     continue from a checkpoint (weights, optimizer, loss scale, batch plan position,\n"
      "                         counters) as if never stopped; auto: OUTPUT/latest if there is one, else start fresh\n"
      "                         (SIGTERM/SIGUSR1 make every rank checkpoint at the next step and exit)\n"
      "  --dry-run              check the configuration, print it resolved, and exit\n"
      "eval options:\n"
      "  --checkpoint MODEL.h5  model file written by training\n"
      "  --data DATA.h5         data set from rnn_prep (same vocabulary as the model)\n"
      "  --max-len N            piece length (default: the one the model was trained with; a classifier\n"
      "                         reads whole sequences)\n"
      "  --batch N              sequences per evaluation batch (default 64)\n"
      "  --streams N            a language model or forecaster: read the data set as N streams in windows of\n"
      "                         --max-len steps, the state carried from one window to the next (the\n"
      "                         protocol of data.mode = stream, with N = train.eval_batch and --max-len\n"
      "                         = data.bptt; default 0: pieces, each from a zero state)\n"
      "  --threads N            CPU threads (default: all cores)\n"
      "  --device D             auto (the GPU when this build has the CUDA backend, one is visible and it\n"
      "                         runs the model), cpu or cuda; default auto (as train.device)\n"
      "  --target-last K        forecaster: windows of max-len steps, K apart, each scoring its last K\n"
      "                         (data.target_last; default: pieces scoring every step)\n"
      "  the last line printed is: loss <mean nll> ppl <exp(loss)> tokens <count>\n"
      "  (a classifier: loss <mean nll> accuracy <share right> sequences <count>;\n"
      "   a forecaster: loss <mse> rmse <original units> mae <original units> steps <count>)\n"
      "generate options (a language model; its text on stdout, nothing else there):\n"
      "  --checkpoint MODEL.h5  model file (or checkpoint) of a language model; it carries its vocabulary\n"
      "  --prompt TEXT          words fed after <eos>, tokenised as rnn_prep did (unknown words: <unk>);\n"
      "                         without it the text starts from <eos> alone\n"
      "  --tokens N             tokens sampled after the prompt (default 100); <eos> prints a newline\n"
      "  --temperature T        sample from softmax(logits / T) (default 1); 0: greedy, the most likely token\n"
      "  --top-k K              sample among the K most likely tokens only (default 0: all)\n"
      "  --seed S               the same seed gives the same text (default 1234)\n"
      "  --stdin                one prompt per line of stdin, each answered on one line as it arrives\n"
      "                         (<eos> shown as the word <eos>); the model stays loaded\n"
      "predict options (a classifier or a forecaster):\n"
      "  --checkpoint MODEL.h5  model file of a classifier (model.task = classify) or forecaster (regress)\n"
      "  --input FILE           classifier: one text per line (after a TAB if the line has one, as in\n"
      "                         rnn_prep --labels files); prints label<TAB>probability per line.\n"
      "                         forecaster: CSV of past values in the rnn_prep --csv format; prints CSV\n"
      "                         series_id,step,FEATURE... of the next --horizon steps in original units\n"
      "  --horizon H            forecaster: steps predicted per series, each fed back (default 1)\n"
      "  --stdin                one request per line of stdin, answered as it arrives: a text (classifier),\n"
      "                         or a series as steps separated by ';', features by ',' (forecaster)\n"
      "generate and predict:\n"
      "  --vocab-from DATA.h5   take the vocabulary (class names, normalisation) from the data set the model\n"
      "                         was trained on: for model files written before rnn_dist stored them\n"
      "  --threads N            CPU threads (default: all cores); both run one sequence at a time on the CPU\n"
      "other:\n"
      "  --help, -h             this text\n"
      "  --version              print the version\n\n"
      "configuration keys (section.key  type  default  meaning):\n",
      RNND_VERSION);
  config_print_reference(stdout);
  printf("\nexit codes: 0 success, 1 internal error, 2 bad input (config, data, model file, command line)\n");
}

typedef struct {
  const char *checkpoint, *data;
  int max_len, batch, threads, target_last;
  int streams; /* 0: pieces */
  int device;  /* rnnd_device */
} eval_args;

static int parse_device(const char *text) {
  if (!strcmp(text, "auto")) return RNND_DEVICE_AUTO;
  if (!strcmp(text, "cpu")) return RNND_DEVICE_CPU;
  if (!strcmp(text, "cuda")) return RNND_DEVICE_CUDA;
  rnnd_input_error("--device: '%s' is not one of: auto, cpu, cuda", text);
}

#define MAX_COUNT (1 << 24)

/* Long options only; their val is a letter the switches below name. */
static const struct option eval_options[] = {
    {"checkpoint", required_argument, NULL, 'c'}, {"data", required_argument, NULL, 'd'},
    {"max-len", required_argument, NULL, 'm'},    {"batch", required_argument, NULL, 'b'},
    {"threads", required_argument, NULL, 't'},    {"device", required_argument, NULL, 'D'},
    {"target-last", required_argument, NULL, 'k'}, {"streams", required_argument, NULL, 'S'},
    {NULL, 0, NULL, 0}};

static void parse_eval(int argc, char **argv, eval_args *a) {
  int c;
  while ((c = options_next(argc, argv, ":", eval_options, "rnn_dist")) != -1) {
    switch (c) {
      case 'c': a->checkpoint = optarg; break;
      case 'd': a->data = optarg; break;
      case 'm': a->max_len = options_int("--max-len", optarg, 1, MAX_COUNT); break;
      case 'b': a->batch = options_int("--batch", optarg, 1, MAX_COUNT); break;
      case 't': a->threads = options_int("--threads", optarg, 1, MAX_COUNT); break;
      case 'D': a->device = parse_device(optarg); break;
      case 'k': a->target_last = options_int("--target-last", optarg, 1, MAX_COUNT); break;
      case 'S': a->streams = options_int("--streams", optarg, 1, MAX_COUNT); break;
    }
  }
  if (!a->checkpoint || !a->data) rnnd_input_error("eval: --checkpoint and --data are required (see --help)");
}

/* A classifier's data set needs the model's classes, and whole sequences:
 * max_len grows to the longest one. */
static void check_classes(const rnnd_dataset *ds, const char *data, const rnnd_model_shape *shape,
                          const char *model, int *max_len) {
  if (!ds->labels)
    rnnd_input_error("%s: no /labels, but %s is a classifier (prepare the data with rnn_prep --labels)", data, model);
  if (ds->n_classes != shape->n_classes)
    rnnd_input_error("%s: data set has %d classes but the model %s has %d", data, (int)ds->n_classes, model,
                     shape->n_classes);
  int64_t longest = 0;
  for (int64_t i = 0; i < ds->n_sequences; i++)
    if (dataset_sequence_length(ds, i) - 1 > longest) longest = dataset_sequence_length(ds, i) - 1;
  if (*max_len < longest) *max_len = longest > INT32_MAX ? INT32_MAX : (int)longest;
}

/* The backend (and a batch) for cap on the device --device asks for.
 * The caller destroys the backend and frees the batch. */
static rnnd_backend *open_eval_backend(const eval_args *a, const rnnd_model_shape *shape, const rnnd_layout *layout,
                                       rnnd_backend_capacity *cap, const rnnd_comm *comm, rnnd_batch *batch) {
  cap->threads = a->threads;
  cap->storage = RNND_DTYPE_F32;
  rnnd_device_choice device;
  device_choose(&device, a->device, comm->local_rank, shape);
  rnnd_backend *be = device_open_backend(&device, layout, cap);
  batch_init(batch, cap->max_pieces, cap->max_steps, cap->max_tokens);
  if (shape->n_features) batch_init_series(batch, shape->n_features);
  return be;
}

/* Pieces of at most --max-len targets, each from a zero state. */
static rnnd_eval_result eval_pieces(const eval_args *a, const rnnd_model_shape *shape, const rnnd_layout *layout,
                                    const float *params, const rnnd_dataset *ds, const rnnd_comm *comm) {
  const rnnd_task_ops *task = task_of(shape->task);
  rnnd_sampler sampler;
  rnnd_sampler_options options = sampler_eval_options(a->max_len, a->batch);
  rnnd_data_config data = {.target_last = a->target_last};
  task->sampler_options(&options, &data);
  sampler_init(&sampler, ds, &options);
  rnnd_backend_capacity cap = {.max_pieces = sampler.largest_batch_pieces, .max_steps = sampler.largest_batch_steps,
                               .max_tokens = sampler.largest_batch_tokens};
  rnnd_batch batch;
  rnnd_backend *be = open_eval_backend(a, shape, layout, &cap, comm, &batch);
  rnnd_eval_result r = evaluate_dataset(be, task, params, ds, &sampler, &batch, comm);
  batch_free(&batch);
  be->ops->destroy(be);
  sampler_free(&sampler);
  return r;
}

/* --streams: the corpus as token streams read in windows of --max-len
 * steps, each window starting from the state the last one left. */
static rnnd_eval_result eval_streams(const eval_args *a, const rnnd_model_shape *shape, const rnnd_layout *layout,
                                     const float *params, const rnnd_dataset *ds, const rnnd_comm *comm) {
  /* the checks of config.c for data.mode = stream */
  if (shape->task == RNND_TASK_CLASSIFY)
    rnnd_input_error("%s: a classifier reads whole sequences; --streams is for a language model or forecaster",
                     a->checkpoint);
  if (shape->directions != 1)
    rnnd_input_error("%s: --streams needs a unidirectional model (a carried state only runs forward)", a->checkpoint);
  if (a->target_last) rnnd_input_error("eval: --streams and --target-last exclude each other (streams score every step)");
  rnnd_stream_state streams;
  stream_state_init(&streams, ds->n_tokens, a->streams, a->max_len, rnnd_state_width(shape), comm, a->data,
                    "--streams");
  rnnd_backend_capacity cap = {0};
  stream_state_grow_capacity(&streams, &cap);
  rnnd_batch batch;
  rnnd_backend *be = open_eval_backend(a, shape, layout, &cap, comm, &batch);
  rnnd_piece *share = RNND_ALLOC(rnnd_piece, streams.plan.count, "stream pieces"); /* >= 1: the plan refuses fewer */
  rnnd_eval_result r = evaluate_stream(be, task_of(shape->task), params, ds, &streams, &batch, share, comm);
  free(share);
  batch_free(&batch);
  be->ops->destroy(be);
  stream_state_free(&streams);
  return r;
}

/* Reads the model file and the data set, checks that they belong
 * together; the caller frees *params and the data set. */
static void open_eval_inputs(eval_args *a, rnnd_model_shape *shape, rnnd_layout *layout, float **params,
                             rnnd_dataset *ds) {
  int trained_max_len = 0;
  model_file_read_shape(a->checkpoint, shape, &trained_max_len);
  if (!a->max_len) a->max_len = trained_max_len > 0 ? trained_max_len : 70;
  dataset_open(ds, a->data, 0);
  if (ds->n_features != shape->n_features)
    rnnd_input_error("%s: data set has %d features but the model %s has %d (%s)", a->data, (int)ds->n_features,
                     a->checkpoint, shape->n_features, shape->n_features ? "forecasting needs rnn_prep --csv data"
                                                                         : "a time series for a token model");
  if (ds->vocab_size != shape->vocab_size)
    rnnd_input_error("%s: data set has vocab_size %d but the model %s has %d (another vocabulary)", a->data,
                     ds->vocab_size, a->checkpoint, shape->vocab_size);
  if (shape->n_classes) check_classes(ds, a->data, shape, a->checkpoint, &a->max_len);
  model_layout_init(layout, shape);
  *params = RNND_ALLOC(float, layout->numel, "parameters");
  model_file_load_inference_params(a->checkpoint, layout, *params);
}

static int run_eval(int argc, char **argv, const rnnd_comm *comm) {
  eval_args a = {.batch = 64, .device = RNND_DEVICE_AUTO};
  parse_eval(argc, argv, &a);
  rnnd_model_shape shape;
  rnnd_layout layout;
  rnnd_dataset ds;
  float *params;
  open_eval_inputs(&a, &shape, &layout, &params, &ds);
  rnnd_eval_result r = a.streams ? eval_streams(&a, &shape, &layout, params, &ds, comm)
                                 : eval_pieces(&a, &shape, &layout, params, &ds, comm);
  const rnnd_task_ops *task = task_of(shape.task);
  rnnd_quality q = task->quality(r.nll_sum, r.tokens, &r.head);
  char result[200];
  task->result_text(&q, r.tokens, result, sizeof result);
  rnnd_print0("%s\n", result);
  free(params);
  dataset_free(&ds);
  return 0;
}

static const struct option train_options[] = {
    {"config", required_argument, NULL, 'c'}, {"set", required_argument, NULL, 's'},
    {"init", required_argument, NULL, 'i'},   {"resume", required_argument, NULL, 'r'},
    {"dry-run", no_argument, NULL, 'n'},      {NULL, 0, NULL, 0}};

typedef struct {
  const char *init_model, *resume;
  int dry_run;
} train_args;

/* Every --config in order, then every --set in order wherever it appears. */
static void parse_train(int argc, char **argv, rnnd_config *cfg, train_args *a) {
  const char **sets = RNND_ALLOC(const char *, argc, "overrides");
  int n_sets = 0, c;
  while ((c = options_next(argc, argv, ":", train_options, "rnn_dist")) != -1) {
    switch (c) {
      case 'c': config_load_file(cfg, optarg); break;
      case 's': sets[n_sets++] = optarg; break;
      case 'i': a->init_model = optarg; break;
      case 'r': a->resume = optarg; break;
      case 'n': a->dry_run = 1; break;
    }
  }
  for (int i = 0; i < n_sets; i++) config_apply_override(cfg, sets[i]);
  free(sets);
}

static int run_train(int argc, char **argv, rnnd_comm *comm) {
  rnnd_config cfg;
  config_init_defaults(&cfg);
  train_args a = {NULL, NULL, 0};
  parse_train(argc, argv, &cfg, &a);
  config_finalize(&cfg);
  comm_set_timeout(comm, cfg.comm.timeout_s);
  if (a.dry_run) {
    if (comm->rank == 0) config_write(&cfg, stdout);
    config_free(&cfg);
    return 0;
  }
  rnnd_trainer trainer;
  if (a.init_model && a.resume)
    rnnd_input_error("--init and --resume exclude each other (a checkpoint has the weights)");
  trainer_init(&trainer, &cfg, comm, a.init_model, a.resume);
  int code = trainer_run(&trainer);
  trainer_free(&trainer);
  config_free(&cfg);
  return code;
}

/* generate and predict share one option table; each verb says what it takes. */
static const struct option infer_options[] = {
    {"checkpoint", required_argument, NULL, 'c'}, {"vocab-from", required_argument, NULL, 'v'},
    {"threads", required_argument, NULL, 'T'},    {"stdin", no_argument, NULL, 'S'},
    {"prompt", required_argument, NULL, 'p'},     {"tokens", required_argument, NULL, 'n'},
    {"temperature", required_argument, NULL, 't'}, {"top-k", required_argument, NULL, 'k'},
    {"seed", required_argument, NULL, 's'},       {"input", required_argument, NULL, 'i'},
    {"horizon", required_argument, NULL, 'H'},    {NULL, 0, NULL, 0}};

/* Options of the other verb are refused by name. */
static void refuse_for(const char *verb, int val, int allowed) {
  if (allowed) return;
  const struct option *o = infer_options;
  while (o->name && o->val != val) o++;
  rnnd_input_error("%s: --%s is not an option of this verb (see --help)", verb, o->name);
}

static void parse_infer(int argc, char **argv, const char *verb, rnnd_infer_options *o) {
  const int generate = !strcmp(verb, "generate");
  int c;
  while ((c = options_next(argc, argv, ":", infer_options, "rnn_dist")) != -1) {
    switch (c) {
      case 'c': o->checkpoint = optarg; break;
      case 'v': o->vocab_from = optarg; break;
      case 'T': o->threads = options_int("--threads", optarg, 1, MAX_COUNT); break;
      case 'S': o->from_stdin = 1; break;
      case 'p': refuse_for(verb, c, generate), o->prompt = optarg, o->has_prompt = 1; break;
      case 'n': refuse_for(verb, c, generate), o->tokens = options_int("--tokens", optarg, 1, MAX_COUNT); break;
      case 't':
        refuse_for(verb, c, generate);
        o->temperature = options_double("--temperature", optarg, -HUGE_VAL, HUGE_VAL);
        break;
      case 'k': refuse_for(verb, c, generate), o->top_k = options_int("--top-k", optarg, 0, 1 << 30); break;
      case 's': refuse_for(verb, c, generate), o->seed = options_u64("--seed", optarg); break;
      case 'i': refuse_for(verb, c, !generate), o->input = optarg; break;
      case 'H': refuse_for(verb, c, !generate), o->horizon = options_int("--horizon", optarg, 0, MAX_COUNT); break;
    }
  }
  if (!o->checkpoint) rnnd_input_error("%s: --checkpoint MODEL.h5 is required (see --help)", verb);
}

static int run_infer(int argc, char **argv, const char *verb) {
  rnnd_infer_options o = {.tokens = 100, .temperature = 1.0, .seed = 1234, .horizon = 1};
  parse_infer(argc, argv, verb, &o);
  return !strcmp(verb, "generate") ? infer_generate(&o) : infer_predict(&o);
}

int main(int argc, char **argv) {
  rnnd_set_program_name("rnn_dist");
  h5_process_init();
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return print_help(), 0;
    if (!strcmp(argv[i], "--version")) return printf("rnn_dist %s\n", RNND_VERSION), 0;
  }
  const char *verb = argc > 1 && argv[1][0] != '-' ? argv[1] : "train";
  /* getopt_long sees the verb's options only */
  int first = argc > 1 && argv[1][0] != '-' ? 1 : 0;
  if (!strcmp(verb, "generate") || !strcmp(verb, "predict"))
    return run_infer(argc - first, argv + first, verb); /* one process: no MPI */
  if (strcmp(verb, "train") && strcmp(verb, "eval"))
    rnnd_input_error("unknown verb '%s': train, eval, generate or predict (see rnn_dist --help)", verb);
  rnnd_comm comm;
  comm_init(&comm, &argc, &argv);
  first = argc > 1 && argv[1][0] != '-' ? 1 : 0;
  int code = !strcmp(verb, "eval") ? run_eval(argc - first, argv + first, &comm)
                                   : run_train(argc - first, argv + first, &comm);
  comm_finalize(&comm);
  return code;
}
