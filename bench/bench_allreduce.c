/* bench_allreduce.c — all-reduce bandwidth over MPI, in the manner of
 * nccl-tests' all_reduce_perf, through rnn_dist's own communicator (comm.h).
 *
 * Table 1: in-place comm_allreduce_sum of buffers from --min-bytes to
 * --max-bytes (doubling; bytes on the wire), fp32 and fp16 words. Each row is
 * the max over ranks of the mean time per call, algbw = bytes / time and
 * busbw = algbw * 2(n-1)/n (nccl-tests' bus bandwidth: what each link of a
 * ring carries, comparable across world sizes).
 *
 * Table 2: grad_sync_allreduce (grad_sync.h) on a gradient of --numel floats
 * in buckets of --bucket-mb, with fp32, fp16 and bf16 on the wire, next to a
 * plain blocking all-reduce of the same words and the time of the fp32 <->
 * 16-bit conversions alone, to show what the conversion costs.
 *
 * Big buffers take seconds per call on a few cores, so the number of calls
 * shrinks to fit --seconds-per-size (at least 2; every rank agrees on the
 * count because it is derived from times already reduced over ranks).
 *
 * usage: mpirun -np N bench_allreduce [--min-bytes 1024] [--max-bytes 268435456]
 *        [--iters 20] [--warmup 3] [--seconds-per-size 1] [--numel 3100000]
 *        [--bucket-mb 25] */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/comm.h"
#include "rnnd/common.h"
#include "rnnd/grad_sync.h"
#include "rnnd/half.h"

#define USAGE                                                                                              \
  "usage: mpirun -np N bench_allreduce [--min-bytes 1024] [--max-bytes 268435456] [--iters 20] "          \
  "[--warmup 3] [--seconds-per-size 1] [--numel 3100000 (0: no grad_sync table)] [--bucket-mb 25]"

typedef struct {
  long long min_bytes, max_bytes, numel;
  int iters, warmup;
  double seconds_per_size, bucket_mb;
} allreduce_args;

static double parse_positive(const char *option, const char *value) {
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  if (end == value || *end || errno || !(v > 0) || !isfinite(v))
    rnnd_input_error("%s '%s': expected a positive number", option, value);
  return v;
}

static void parse_args(int argc, char **argv, allreduce_args *a) {
  *a = (allreduce_args){1024, 268435456, 3100000, 20, 3, 1.0, 25.0};
  const long long most_bytes = 1LL << 36;
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) rnnd_input_error("%s: missing value; " USAGE, k);
    i++;
    if (!strcmp(k, "--min-bytes")) a->min_bytes = rnnd_parse_integer(k, v, 4, most_bytes);
    else if (!strcmp(k, "--max-bytes")) a->max_bytes = rnnd_parse_integer(k, v, 4, most_bytes);
    else if (!strcmp(k, "--iters")) a->iters = (int)rnnd_parse_integer(k, v, 1, 1000000);
    else if (!strcmp(k, "--warmup")) a->warmup = (int)rnnd_parse_integer(k, v, 0, 1000000);
    else if (!strcmp(k, "--seconds-per-size")) a->seconds_per_size = parse_positive(k, v);
    else if (!strcmp(k, "--numel")) a->numel = rnnd_parse_integer(k, v, 0, most_bytes / 4);
    else if (!strcmp(k, "--bucket-mb")) a->bucket_mb = parse_positive(k, v);
    else rnnd_input_error("unknown option '%s'; " USAGE, k);
  }
  if (a->min_bytes > a->max_bytes)
    rnnd_input_error("--min-bytes %lld is above --max-bytes %lld", a->min_bytes, a->max_bytes);
}

/* One thing to time: a plain all-reduce of `count` words of `dtype`, or (with
 * sync) grad_sync_allreduce of `count` floats. Either works in place. */
typedef struct {
  const rnnd_comm *comm;
  void *data;
  size_t count;
  rnnd_dtype dtype;     /* what goes on the wire */
  rnnd_grad_sync *sync; /* borrowed; NULL for a plain all-reduce */
} reduce_job;

/* Fill values are at most this large in magnitude. */
#define FILL_MAGNITUDE (1.0 / 256.0)

static float fill_value(int rank, size_t i) {
  return (float)((double)((int)((i * 7 + (size_t)rank * 13) % 512) - 256) * (FILL_MAGNITUDE / 256.0));
}

static void job_fill(const reduce_job *j) {
  if (j->sync || j->dtype == RNND_DTYPE_F32) {
    float *f = j->data;
    for (size_t i = 0; i < j->count; i++) f[i] = fill_value(j->comm->rank, i);
  } else {
    uint16_t *h = j->data;
    for (size_t i = 0; i < j->count; i++) h[i] = rnnd_f32_to_half(j->dtype, fill_value(j->comm->rank, i));
  }
}

static void job_run(const reduce_job *j) {
  if (j->sync) grad_sync_allreduce(j->sync, j->data);
  else comm_allreduce_sum(j->comm, j->data, j->count, j->dtype);
}

/* In-place sums grow n-fold per call; this many calls from a fresh fill keep
 * every value well inside the wire format's range (fp16 overflows at 65504,
 * and infinities would take other code paths than real gradients do). */
static int calls_per_fill(const reduce_job *j, int wanted) {
  if (j->comm->size == 1) return wanted;
  double limit = j->dtype == RNND_DTYPE_F16 ? 16384.0 : 1e30;
  int calls = (int)floor(log(limit / FILL_MAGNITUDE) / log((double)j->comm->size));
  if (calls < 1) calls = 1;
  return calls < wanted ? calls : wanted;
}

/* This rank's seconds for `calls` calls; refills between runs of calls are
 * not timed, and a barrier starts every timed run on all ranks together. */
static double time_calls(const reduce_job *j, int calls) {
  double elapsed = 0;
  for (int done = 0; done < calls;) {
    int run = calls_per_fill(j, calls - done);
    job_fill(j);
    comm_barrier(j->comm);
    double t0 = rnnd_now();
    for (int k = 0; k < run; k++) job_run(j);
    elapsed += rnnd_now() - t0;
    done += run;
  }
  return elapsed;
}

typedef struct {
  int iters, warmup;
  double seconds_per_size;
} timing_policy;

/* Warms up, then times as many calls as fit the policy's budget, judged from
 * the warm-up or from `estimate` (seconds per call expected, 0 if unknown).
 * Returns the max over ranks of the mean seconds per call. */
static double measure(const reduce_job *j, const timing_policy *p, double estimate, int *timed_calls) {
  int warmup = p->warmup;
  if (warmup > 1 && estimate * warmup > p->seconds_per_size) warmup = 1;
  double per_call = estimate;
  if (warmup > 0) per_call = comm_allreduce_max_f64(j->comm, time_calls(j, warmup) / warmup);
  int calls = p->iters, fewest = p->iters < 2 ? p->iters : 2;
  if (per_call > 0 && per_call * calls > p->seconds_per_size) {
    calls = (int)(p->seconds_per_size / per_call);
    if (calls < fewest) calls = fewest;
  }
  *timed_calls = calls;
  return comm_allreduce_max_f64(j->comm, time_calls(j, calls) / calls);
}

static size_t dtype_bytes(rnnd_dtype t) { return t == RNND_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* nccl-tests: algbw = bytes / time; busbw = algbw * 2(n-1)/n for all-reduce. */
static double algbw_gbs(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
static double busbw_gbs(double algbw, int world) { return algbw * 2.0 * (world - 1) / world; }

static void sweep_sizes(const rnnd_comm *comm, const allreduce_args *a, const timing_policy *p) {
  void *buffer = rnnd_malloc((size_t)a->max_bytes, "all-reduce buffer");
  const rnnd_dtype dtypes[2] = {RNND_DTYPE_F32, RNND_DTYPE_F16};
  double estimate[2] = {0, 0}; /* seconds per call of the previous size */
  rnnd_print0("%12s  %-5s %11s %6s %12s %12s %12s\n", "bytes", "dtype", "count", "calls", "time (us)",
              "algbw (GB/s)", "busbw (GB/s)");
  for (long long bytes = a->min_bytes; bytes <= a->max_bytes; bytes *= 2) {
    for (int d = 0; d < 2; d++) {
      size_t count = (size_t)bytes / dtype_bytes(dtypes[d]);
      if (count == 0) continue;
      reduce_job job = {comm, buffer, count, dtypes[d], NULL};
      int calls;
      double seconds = measure(&job, p, 2 * estimate[d], &calls);
      estimate[d] = seconds;
      double wire_bytes = (double)(count * dtype_bytes(dtypes[d])), algbw = algbw_gbs(wire_bytes, seconds);
      rnnd_print0("%12.0f  %-5s %11zu %6d %12.1f %12.3f %12.3f\n", wire_bytes, rnnd_dtype_name(dtypes[d]), count,
                  calls, seconds * 1e6, algbw, busbw_gbs(algbw, comm->size));
    }
    if (bytes > a->max_bytes / 2) break; /* doubling again would pass max_bytes */
  }
  free(buffer);
}

/* Seconds (max over ranks) of converting numel floats to the 16-bit wire
 * format and back, as grad_sync does on every rank. */
static double time_conversion(const rnnd_comm *comm, rnnd_dtype wire, size_t numel, const timing_policy *p) {
  float *values = RNND_ALLOC(float, numel, "conversion input");
  uint16_t *words = RNND_ALLOC(uint16_t, numel, "conversion words");
  for (size_t i = 0; i < numel; i++) values[i] = fill_value(comm->rank, i);
  /* Round trip 0 also touches the pages and is not counted; then up to
   * iters round trips, fewer when the budget runs out (but at least 2). */
  double elapsed = 0;
  int rounds = 0;
  for (int k = 0; k <= p->iters && (k <= 2 || elapsed < p->seconds_per_size); k++) {
    double t0 = rnnd_now();
    rnnd_f32_to_half_array(wire, words, values, numel);
    rnnd_half_to_f32_array(wire, values, words, numel);
    if (k > 0) elapsed += rnnd_now() - t0, rounds++;
  }
  free(values);
  free(words);
  return comm_allreduce_max_f64(comm, rounds ? elapsed / rounds : 0);
}

static void time_grad_sync(const rnnd_comm *comm, const allreduce_args *a, const timing_policy *p) {
  size_t numel = (size_t)a->numel;
  float *grads = RNND_ALLOC(float, numel, "gradient");
  float *plain = RNND_ALLOC(float, numel, "plain all-reduce buffer"); /* room for numel words of any dtype */
  const rnnd_dtype wires[3] = {RNND_DTYPE_F32, RNND_DTYPE_F16, RNND_DTYPE_BF16};
  rnnd_print0("\ngrad_sync_allreduce of %zu fp32 gradients, buckets of %.1f MB:\n", numel, a->bucket_mb);
  rnnd_print0("%-5s %7s %9s %6s %14s %14s %13s %12s\n", "wire", "buckets", "wire MB", "calls", "grad_sync (ms)",
              "plain ar (ms)", "convert (ms)", "busbw (GB/s)");
  for (int w = 0; w < 3; w++) {
    rnnd_grad_sync sync;
    grad_sync_init(&sync, comm, numel, a->bucket_mb, wires[w]);
    reduce_job synced = {comm, grads, numel, wires[w], &sync}, blocking = {comm, plain, numel, wires[w], NULL};
    int calls, plain_calls;
    double seconds = measure(&synced, p, 0, &calls), plain_seconds = measure(&blocking, p, 0, &plain_calls);
    char convert[32] = "-"; /* fp32 goes on the wire as it is */
    if (wires[w] != RNND_DTYPE_F32)
      snprintf(convert, sizeof convert, "%.3f", time_conversion(comm, wires[w], numel, p) * 1e3);
    double wire_bytes = (double)(numel * dtype_bytes(wires[w]));
    rnnd_print0("%-5s %7d %9.2f %6d %14.3f %14.3f %13s %12.3f\n", rnnd_dtype_name(wires[w]), sync.n_buckets,
                wire_bytes / 1048576.0, calls, seconds * 1e3, plain_seconds * 1e3, convert,
                busbw_gbs(algbw_gbs(wire_bytes, seconds), comm->size));
    grad_sync_free(&sync);
  }
  free(grads);
  free(plain);
}

static void print_header(const rnnd_comm *comm) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  version[strcspn(version, "\n")] = '\0'; /* first line only */
  rnnd_print0("# bench_allreduce: world %d (%d on this node), %s\n", comm->size, comm->local_size, version);
  rnnd_print0("# in-place comm_allreduce_sum; time = max over ranks of the mean per call; "
              "busbw = algbw * 2(n-1)/n; GB = 1e9 bytes\n");
  if (comm->size == 1) rnnd_print0("# world 1: nothing to reduce, every call returns at once (use mpirun -np N)\n");
}

int main(int argc, char **argv) {
  rnnd_set_program_name("bench_allreduce");
  rnnd_comm comm;
  comm_init(&comm, &argc, &argv);
  allreduce_args a;
  parse_args(argc, argv, &a);
  timing_policy policy = {a.iters, a.warmup, a.seconds_per_size};
  print_header(&comm);
  double t0 = rnnd_now();
  sweep_sizes(&comm, &a, &policy);
  if (a.numel > 0) time_grad_sync(&comm, &a, &policy);
  rnnd_print0("# total %.1f s\n", rnnd_now() - t0);
  comm_finalize(&comm);
  return 0;
}
