/* rnn_dist_main.c — command line of rnn_dist: `train` (the default) and
 * `eval`. Everything else lives in the library; main only parses arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"
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
      "  mpirun -np N rnn_dist --config FILE      (one rank per GPU, or per core group on CPUs)\n\n"
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
      "  --threads N            CPU threads (default: all cores)\n"
      "  --device D             auto (the GPU when this build has the CUDA backend, one is visible and it\n"
      "                         runs the model), cpu or cuda; default auto (as train.device)\n"
      "  --target-last K        forecaster: windows of max-len steps, K apart, each scoring its last K\n"
      "                         (data.target_last; default: pieces scoring every step)\n"
      "  the last line printed is: loss <mean nll> ppl <exp(loss)> tokens <count>\n"
      "  (a classifier: loss <mean nll> accuracy <share right> sequences <count>;\n"
      "   a forecaster: loss <mse> rmse <original units> mae <original units> steps <count>)\n"
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
  int device; /* rnnd_device */
} eval_args;

static int parse_device(const char *text) {
  if (!strcmp(text, "auto")) return RNND_DEVICE_AUTO;
  if (!strcmp(text, "cpu")) return RNND_DEVICE_CPU;
  if (!strcmp(text, "cuda")) return RNND_DEVICE_CUDA;
  rnnd_input_error("--device: '%s' is not one of: auto, cpu, cuda", text);
}

static int parse_positive(const char *option, const char *text) {
  char *end;
  long v = strtol(text, &end, 10);
  if (*text == '\0' || *end || v < 1 || v > (1 << 24))
    rnnd_input_error("%s: expected a positive integer, got '%s'", option, text);
  return (int)v;
}

static const char *option_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) rnnd_input_error("%s: missing value (see --help)", argv[*i]);
  return argv[++*i];
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

static int run_eval(int argc, char **argv, const rnnd_comm *comm) {
  eval_args a = {NULL, NULL, 0, 64, 0, 0, RNND_DEVICE_AUTO};
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--checkpoint")) a.checkpoint = option_value(argc, argv, &i);
    else if (!strcmp(argv[i], "--data")) a.data = option_value(argc, argv, &i);
    else if (!strcmp(argv[i], "--max-len")) a.max_len = parse_positive("--max-len", option_value(argc, argv, &i));
    else if (!strcmp(argv[i], "--batch")) a.batch = parse_positive("--batch", option_value(argc, argv, &i));
    else if (!strcmp(argv[i], "--threads")) a.threads = parse_positive("--threads", option_value(argc, argv, &i));
    else if (!strcmp(argv[i], "--device")) a.device = parse_device(option_value(argc, argv, &i));
    else if (!strcmp(argv[i], "--target-last"))
      a.target_last = parse_positive("--target-last", option_value(argc, argv, &i));
    else rnnd_input_error("eval: unknown option '%s' (see --help)", argv[i]);
  }
  if (!a.checkpoint || !a.data) rnnd_input_error("eval: --checkpoint and --data are required (see --help)");
  rnnd_model_shape shape;
  int trained_max_len = 0;
  model_file_read_shape(a.checkpoint, &shape, &trained_max_len);
  if (!a.max_len) a.max_len = trained_max_len > 0 ? trained_max_len : 70;
  rnnd_dataset ds;
  dataset_open(&ds, a.data, 0);
  if (ds.n_features != shape.n_features)
    rnnd_input_error("%s: data set has %d features but the model %s has %d (%s)", a.data, (int)ds.n_features,
                     a.checkpoint, shape.n_features, shape.n_features ? "forecasting needs rnn_prep --csv data"
                                                                       : "a time series for a token model");
  if (ds.vocab_size != shape.vocab_size)
    rnnd_input_error("%s: data set has vocab_size %d but the model %s has %d (another vocabulary)", a.data,
                     ds.vocab_size, a.checkpoint, shape.vocab_size);
  const rnnd_task_ops *task = task_of(shape.task);
  if (shape.n_classes) check_classes(&ds, a.data, &shape, a.checkpoint, &a.max_len);
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  float *params = RNND_ALLOC(float, layout.numel, "parameters");
  model_file_load_params(a.checkpoint, &layout, params);
  rnnd_sampler sampler;
  rnnd_sampler_options options = sampler_eval_options(a.max_len, a.batch);
  rnnd_data_config data = {.target_last = a.target_last};
  task->sampler_options(&options, &data);
  sampler_init(&sampler, &ds, &options);
  rnnd_backend_capacity cap = {.max_pieces = sampler.largest_batch_pieces, .max_steps = sampler.largest_batch_steps,
                               .max_tokens = sampler.largest_batch_tokens, .threads = a.threads,
                               .storage = RNND_DTYPE_F32};
  rnnd_device_choice device;
  device_choose(&device, a.device, comm->local_rank, &shape);
  rnnd_backend *be = device_open_backend(&device, &layout, &cap);
  rnnd_batch batch;
  batch_init(&batch, cap.max_pieces, cap.max_steps, cap.max_tokens);
  if (ds.n_features) batch_init_series(&batch, ds.n_features);
  rnnd_eval_result r = evaluate_dataset(be, task, params, &ds, &sampler, &batch, comm);
  rnnd_quality q = task->quality(r.nll_sum, r.tokens, &r.head);
  char result[200];
  task->result_text(&q, r.tokens, result, sizeof result);
  rnnd_print0("%s\n", result);
  batch_free(&batch);
  be->ops->destroy(be);
  sampler_free(&sampler);
  free(params);
  dataset_free(&ds);
  return 0;
}

static int run_train(int argc, char **argv, int first, rnnd_comm *comm) {
  rnnd_config cfg;
  config_init_defaults(&cfg);
  const char *init_model = NULL, *resume = NULL;
  int dry_run = 0;
  /* --config first, so --set overrides apply on top of it wherever they appear. */
  for (int i = first; i < argc; i++)
    if (!strcmp(argv[i], "--config")) config_load_file(&cfg, option_value(argc, argv, &i));
  for (int i = first; i < argc; i++) {
    if (!strcmp(argv[i], "--config")) i++;
    else if (!strcmp(argv[i], "--set")) config_apply_override(&cfg, option_value(argc, argv, &i));
    else if (!strcmp(argv[i], "--init")) init_model = option_value(argc, argv, &i);
    else if (!strcmp(argv[i], "--resume")) resume = option_value(argc, argv, &i);
    else if (!strcmp(argv[i], "--dry-run")) dry_run = 1;
    else rnnd_input_error("unknown option '%s' (see --help)", argv[i]);
  }
  config_finalize(&cfg);
  comm_set_timeout(comm, cfg.comm.timeout_s);
  if (dry_run) {
    if (comm->rank == 0) config_write(&cfg, stdout);
    config_free(&cfg);
    return 0;
  }
  rnnd_trainer trainer;
  if (init_model && resume) rnnd_input_error("--init and --resume exclude each other (a checkpoint has the weights)");
  trainer_init(&trainer, &cfg, comm, init_model, resume);
  int code = trainer_run(&trainer);
  trainer_free(&trainer);
  config_free(&cfg);
  return code;
}

int main(int argc, char **argv) {
  rnnd_set_program_name("rnn_dist");
  h5_process_init();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return print_help(), 0;
    if (!strcmp(argv[i], "--version")) return printf("rnn_dist %s\n", RNND_VERSION), 0;
  }
  rnnd_comm comm;
  comm_init(&comm, &argc, &argv);
  int code;
  if (argc > 1 && !strcmp(argv[1], "eval")) code = run_eval(argc, argv, &comm);
  else code = run_train(argc, argv, argc > 1 && !strcmp(argv[1], "train") ? 2 : 1, &comm);
  comm_finalize(&comm);
  return code;
}
