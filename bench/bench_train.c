/* bench_train.c — times rnn_dist's training step (forward, backward,
 * global-norm clip, Adam) on random data of a given shape, the same
 * workload as bench/torch_bench.py, and prints tokens/s. The step is the
 * trainer's own (step.h, opened through device.h): the host step on the
 * CPU, the device-resident CUDA step on a GPU (no host copies of the
 * parameters, no host optimizer). The last line is machine-readable:
 * "rnn_dist tokens_per_s <median> steps <n> gflops <rate>".
 *
 * With --precision fp16|bf16 the step is the mixed-precision one: 16-bit
 * activations in the backend, gradients rounded to 16 bits, the fp32 master
 * weights stepped and the 16-bit compute copy refreshed. It also prints the
 * memory the trainer would hold ("memory" line, bytes by purpose).
 *
 * usage: bench_train [--cell gru|lstm] [--vocab V] [--embed E] [--hidden H]
 *        [--layers L] [--batch B] [--min-len A] [--max-len B] [--steps N]
 *        [--warmup W] [--threads T] [--seed S] [--precision fp32|fp16|bf16]
 *        [--device cpu|cuda] [--roofline 0|1] [--bptt-segment K]
 *
 * --bptt-segment K (CPU) back-propagates by segments of K steps
 * (train.bptt_segment); the "memory" line then shows the smaller activation
 * and workspace bytes, and "peak_rss_mib" the process's peak resident set.
 *
 * --roofline 1 (CPU) also times the library the step's products run on (the
 * BLAS's sgemm, or with bf16 products oneDNN in bf16) on exactly the
 * products of one step (gemm_rate.h) and prints the line
 * "roofline flops_per_token <n> products_flops_per_token <m> achieved_gflops <x>
 * gemm_gflops <y> shapes <k> efficiency <x/y> library <name>" (m: the same
 * count taken from the products of the last batch, a cross-check):
 * FLOPs per token counted from the model (input and recurrent products,
 * decoder; backward = 2x forward) times the median tokens/s, against what
 * the same BLAS does on those shapes alone.
 *
 * With --device cuda (builds with the CUDA backend) the step runs on GPU 0
 * and the line "device_peak_mib <MiB> device_allocated_mib <MiB>" gives
 * the device memory the run took: the driver's count of used memory after
 * the run minus before it (the CUDA context already made, so it counts
 * what the backend, the step and cuDNN/cuBLAS took; everything is taken up
 * front, so the end is the peak), and the part rnn_dist allocated itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "rnnd/amp.h"
#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/options.h"
#include "rnnd/device.h"
#include "rnnd/optim.h"
#include "rnnd/rng.h"
#include "rnnd/sampler.h"
#include "cpu_dnnl.h"
#include "gemm_rate.h"

typedef struct {
  int cell, vocab, embed, hidden, layers, batch, min_len, max_len, steps, warmup, threads;
  long seed;
  rnnd_dtype precision;
  int cuda, roofline, bptt_segment;
} bench_args;

static const struct option bench_options[] = {
    {"cell", required_argument, NULL, 'c'},      {"vocab", required_argument, NULL, 'V'},
    {"embed", required_argument, NULL, 'E'},     {"hidden", required_argument, NULL, 'H'},
    {"layers", required_argument, NULL, 'L'},    {"batch", required_argument, NULL, 'B'},
    {"min-len", required_argument, NULL, 'm'},   {"max-len", required_argument, NULL, 'M'},
    {"steps", required_argument, NULL, 's'},     {"warmup", required_argument, NULL, 'w'},
    {"threads", required_argument, NULL, 't'},   {"seed", required_argument, NULL, 'S'},
    {"precision", required_argument, NULL, 'p'}, {"roofline", required_argument, NULL, 'r'},
    {"bptt-segment", required_argument, NULL, 'g'}, {"device", required_argument, NULL, 'd'},
    {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0}};

static const char usage_text[] =
    "usage: bench_train [--cell gru|lstm] [--vocab V] [--embed E] [--hidden H]\n"
    "       [--layers L] [--batch B] [--min-len A] [--max-len B] [--steps N]\n"
    "       [--warmup W] [--threads T] [--seed S] [--precision fp32|fp16|bf16]\n"
    "       [--device cpu|cuda] [--roofline 0|1] [--bptt-segment K]\n"
    "times training steps of a synthetic model and prints one table (bench/README.md)\n";

static int choice(const char *option, const char *text, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(text, names[i])) return i;
  rnnd_input_error("%s: '%s' is not one of the choices (see bench_train --help)", option, text);
}

/* Returns 1 when --help was printed. */
static int parse_args(int argc, char **argv, bench_args *a) {
  *a = (bench_args){RNND_CELL_GRU, 10000, 256, 256, 2, 32, 20, 80, 30, 5, 0, 1, RNND_DTYPE_F32, 0, 0, 0};
  static const char *const cells[] = {"gru", "lstm"}, *const devices[] = {"cpu", "cuda"};
  static const char *const precisions[] = {"fp32", "fp16", "bf16"};
  static const rnnd_dtype dtypes[] = {RNND_DTYPE_F32, RNND_DTYPE_F16, RNND_DTYPE_BF16};
  const int big = 1 << 30;
  int c;
  while ((c = options_next(argc, argv, ":h", bench_options, "bench_train")) != -1) {
    switch (c) {
      case 'h': fputs(usage_text, stdout); return 1;
      case 'c': a->cell = choice("--cell", optarg, cells, 2) ? RNND_CELL_LSTM : RNND_CELL_GRU; break;
      case 'V': a->vocab = options_int("--vocab", optarg, 2, big); break;
      case 'E': a->embed = options_int("--embed", optarg, 1, big); break;
      case 'H': a->hidden = options_int("--hidden", optarg, 1, big); break;
      case 'L': a->layers = options_int("--layers", optarg, 1, RNND_MAX_LAYERS); break;
      case 'B': a->batch = options_int("--batch", optarg, 1, big); break;
      case 'm': a->min_len = options_int("--min-len", optarg, 1, big); break;
      case 'M': a->max_len = options_int("--max-len", optarg, 1, big); break;
      case 's': a->steps = options_int("--steps", optarg, 1, big); break;
      case 'w': a->warmup = options_int("--warmup", optarg, 0, big); break;
      case 't': a->threads = options_int("--threads", optarg, 0, big); break;
      case 'S': a->seed = (long)options_u64("--seed", optarg); break;
      case 'p': a->precision = dtypes[choice("--precision", optarg, precisions, 3)]; break;
      case 'r': a->roofline = options_int("--roofline", optarg, 0, 1); break;
      case 'g': a->bptt_segment = options_int("--bptt-segment", optarg, 0, big); break;
      case 'd': a->cuda = choice("--device", optarg, devices, 2); break;
    }
  }
  return 0;
}

/* An in-memory data set: batch * (steps + warmup) random sequences. */
static void make_dataset(rnnd_dataset *ds, const bench_args *a, int n_seq) {
  memset(ds, 0, sizeof *ds);
  ds->path = rnnd_strdup("(random)");
  ds->vocab_size = a->vocab;
  ds->n_sequences = n_seq;
  ds->offsets = RNND_ALLOC(int64_t, n_seq + 1, "offsets");
  for (int i = 0; i < n_seq; i++) {
    uint64_t r = rng_key2((uint64_t)a->seed, (uint64_t)i);
    ds->offsets[i + 1] = ds->offsets[i] + a->min_len + (int64_t)(r % (uint64_t)(a->max_len - a->min_len + 1));
  }
  ds->n_tokens = ds->offsets[n_seq];
  ds->tokens = RNND_ALLOC(int32_t, ds->n_tokens, "tokens");
  for (int64_t i = 0; i < ds->n_tokens; i++)
    ds->tokens[i] = (int32_t)(rng_key2((uint64_t)a->seed + 7, (uint64_t)i) % (uint64_t)a->vocab);
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* One timed step on pieces [first, first + batch) of ds; returns seconds. */
static double timed_step(rnnd_step *step, rnnd_batch *batch, const rnnd_dataset *ds, rnnd_piece *pieces, int batch_size,
                         int64_t first) {
  for (int k = 0; k < batch_size; k++) {
    int64_t seq = first + k;
    pieces[k] = (rnnd_piece){.start = ds->offsets[seq], .length = (int32_t)dataset_sequence_length(ds, seq), .id = seq};
  }
  double t0 = rnnd_now();
  batch_fill(batch, ds, pieces, batch_size);
  rnnd_step_request request = {.loss_weight = (float)(1.0 / (double)batch->n_tokens), .loss_scale = 1.0};
  rnnd_step_gradient g;
  step_gradients(step, batch, NULL, &request, &g);
  double param_norm;
  step_update(step, 1e-3, clip_coefficient(g.grad_norm, 0.5), &param_norm); /* waits for the device */
  return rnnd_now() - t0;
}

static void print_memory(const bench_args *a, const rnnd_step *step) {
  rnnd_memory m;
  step_memory(step, &m);
  printf("memory precision %s weights %zu gradients %zu optimizer %zu activations %zu workspace %zu "
         "workspace_growths %lld\n", rnnd_dtype_name(a->precision), m.weights, m.gradients, m.optimizer,
         m.activations, m.workspace, (long long)m.workspace_growths);
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  printf("peak_rss_mib %.1f bptt_segment %d\n", (double)usage.ru_maxrss / 1024.0, a->bptt_segment);
}

int main(int argc, char **argv) {
  rnnd_set_program_name("bench_train");
  bench_args a;
  if (parse_args(argc, argv, &a)) return 0;
  int total = a.steps + a.warmup;
  rnnd_dataset ds;
  make_dataset(&ds, &a, a.batch * total);
  rnnd_model_shape shape = {.cell = a.cell, .layers = a.layers, .embed = a.embed, .hidden = a.hidden,
                            .vocab_size = a.vocab, .directions = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  float *params = RNND_ALLOC(float, layout.numel, "params");
  model_init_params(&layout, params, 1);
  rnnd_config cfg;
  config_init_defaults(&cfg);
  rnnd_optimizer opt;
  optimizer_init(&opt, &cfg.train, layout.numel);
  rnnd_backend_capacity cap = {.max_pieces = a.batch, .max_steps = a.max_len, .max_tokens = (int64_t)a.batch * a.max_len,
                               .threads = a.threads, .storage = a.precision, .bptt_segment = a.bptt_segment};
  rnnd_device_choice device;
  device_choose(&device, a.cuda ? RNND_DEVICE_CUDA : RNND_DEVICE_CPU, 0, &shape);
  if (device.cuda) printf("device: %s\n", device.name);
  size_t used_before = device_used_bytes(&device);
  rnnd_backend *be = device_open_backend(&device, &layout, &cap);
  rnnd_step_options options = {.precision = a.precision, .wire = a.precision, .bucket_mb = 25.0};
  rnnd_step *step = device_open_step(&device, be, params, &opt, &options);
  rnnd_batch batch;
  batch_init(&batch, a.batch, a.max_len, cap.max_tokens);
  rnnd_piece *pieces = RNND_ALLOC(rnnd_piece, a.batch, "pieces");
  double *rates = RNND_ALLOC(double, a.steps, "rates"), seconds_total = 0;
  int64_t tokens_total = 0;
  const char *core, *advice = cpu_blas_advice(&core);
  printf("rnn_dist %s backend, %s step: %s, vocab %d, embed %d, hidden %d, %d layers, batch %d, lengths %d..%d, "
         "threads %d, BLAS core %s, OPENBLAS_CORETYPE=%s\n",
         be->ops->name, step->ops->name, model_cell_name(a.cell), a.vocab, a.embed, a.hidden, a.layers, a.batch,
         a.min_len, a.max_len, a.threads, core, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
  if (backend_describe(be)[0]) printf("products: %s\n", backend_describe(be));
  if (advice) printf("warning: %s\n", advice);
  for (int s = 0; s < total; s++) {
    double dt = timed_step(step, &batch, &ds, pieces, a.batch, (int64_t)s * a.batch);
    if (s >= a.warmup) {
      rates[s - a.warmup] = (double)batch.n_tokens / dt;
      seconds_total += dt;
      tokens_total += batch.n_tokens;
    }
  }
  qsort(rates, (size_t)a.steps, sizeof *rates, compare_double);
  double median = rates[a.steps / 2], flops = model_train_flops_per_token(&shape);
  print_memory(&a, step);
  if (device.cuda) {
    rnnd_memory m;
    step_memory(step, &m);
    printf("device_peak_mib %.1f device_allocated_mib %.1f\n",
           (double)(device_used_bytes(&device) - used_before) / 1048576.0, (double)m.held / 1048576.0);
  }
  if (a.roofline && !device.cuda) {
    /* the library the step's products ran on: oneDNN in bf16 where the backend used it, else the BLAS */
    cpu_dnnl *bf16 = strstr(backend_describe(be), "oneDNN") ? cpu_dnnl_create() : NULL;
    gemm_step_rate r = gemm_rate_for_step(&shape, &batch, bf16);
    double achieved = median * flops / 1e9, library = r.flops / r.seconds / 1e9;
    printf("roofline flops_per_token %.0f products_flops_per_token %.0f achieved_gflops %.1f gemm_gflops %.1f "
           "shapes %d efficiency %.3f library %s\n", flops, r.flops / (double)batch.n_tokens, achieved, library,
           r.products, achieved / library, bf16 ? "oneDNN-bf16" : "BLAS-sgemm");
    cpu_dnnl_destroy(bf16);
  }
  printf("rnn_dist tokens_per_s %.1f steps %d gflops %.1f mean_tokens_per_s %.1f\n", median, a.steps,
         median * flops / 1e9, (double)tokens_total / seconds_total);
  step_destroy(step);
  be->ops->destroy(be);
  batch_free(&batch);
  optimizer_free(&opt);
  config_free(&cfg);
  dataset_free(&ds);
  free(params);
  free(pieces);
  free(rates);
  return 0;
}
