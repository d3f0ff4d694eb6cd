/* bench_sampler.c — simulates data-parallel training epochs over a real data
 * set without training anything, to show what the sampler (sampler.h) and
 * the longest-first dealer (deal.h) buy over a naive sampler.
 *
 * For world sizes 1, 2, 4, ... up to --max-world, with a global batch of
 * per_rank * world pieces, it walks whole epochs twice:
 *  - bucketed: the real sampler (length buckets, shuffle) dealt to the ranks
 *    by the real dealer; batches are packed, so nothing is padded;
 *  - naive: the epoch's pieces shuffled as one list, cut into consecutive
 *    global batches, split round-robin (per_rank pieces per rank) and padded
 *    by each rank to its own longest piece (static padding).
 * Per step it records the token imbalance (max over ranks / mean over ranks)
 * and the critical path (max over ranks of the longest piece a rank holds:
 * the time loop of an RNN is serial, so that many steps bound the step
 * latency however many tokens run in parallel). It prints one table and the
 * PASS/MISS of the balance targets at 8 and 64 ranks.
 *
 * usage: bench_sampler TRAIN.h5 [--max-len 70] [--per-rank 64] [--max-world 1024]
 *        [--epochs 1] [--seed 1234] [--num-buckets 8] */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/dataset.h"
#include "rnnd/deal.h"
#include "rnnd/rng.h"
#include "rnnd/sampler.h"

#define USAGE                                                                                        \
  "usage: bench_sampler TRAIN.h5 [--max-len 70] [--per-rank 64] [--max-world 1024] [--epochs 1] " \
  "[--seed 1234] [--num-buckets 8]"

typedef struct {
  const char *path;
  int max_len, per_rank, max_world, epochs, num_buckets;
  uint64_t seed;
} sampler_args;

static void parse_args(int argc, char **argv, sampler_args *a) {
  *a = (sampler_args){NULL, 70, 64, 1024, 1, 8, 1234};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i];
    if (strncmp(k, "--", 2) != 0) {
      if (a->path) rnnd_input_error("more than one data set ('%s', '%s'); " USAGE, a->path, k);
      a->path = k;
      continue;
    }
    const char *v = i + 1 < argc ? argv[++i] : NULL;
    if (!v) rnnd_input_error("%s: missing value; " USAGE, k);
    if (!strcmp(k, "--max-len")) a->max_len = (int)rnnd_parse_integer(k, v, 1, INT_MAX);
    else if (!strcmp(k, "--per-rank")) a->per_rank = (int)rnnd_parse_integer(k, v, 1, INT_MAX);
    else if (!strcmp(k, "--max-world")) a->max_world = (int)rnnd_parse_integer(k, v, 1, 1 << 20);
    else if (!strcmp(k, "--epochs")) a->epochs = (int)rnnd_parse_integer(k, v, 1, 1000);
    else if (!strcmp(k, "--seed")) a->seed = (uint64_t)rnnd_parse_integer(k, v, 0, LLONG_MAX);
    else if (!strcmp(k, "--num-buckets")) a->num_buckets = (int)rnnd_parse_integer(k, v, 1, 1000);
    else rnnd_input_error("unknown option '%s'; " USAGE, k);
  }
  if (!a->path) rnnd_input_error("no data set given; " USAGE);
  /* The dealer counts pieces in int. */
  if ((int64_t)a->per_rank * a->max_world > INT_MAX)
    rnnd_input_error("--per-rank %d x --max-world %d: global batch above %d pieces", a->per_rank, a->max_world,
                     INT_MAX);
}

/* What one way of batching did over all steps of the simulated epochs. */
typedef struct {
  double *imbalance;      /* [capacity] one per step */
  int64_t steps, capacity;
  int64_t short_steps;    /* batches with fewer pieces than the global batch */
  double critical_path_sum;
  int64_t real_tokens, stored_slots; /* stored = real + padding */
} step_record;

typedef struct {
  int64_t steps, short_steps;
  double imbalance_mean, imbalance_p99, critical_path_mean, padding;
} plan_stats;

static void record_init(step_record *r, int64_t capacity) {
  memset(r, 0, sizeof *r);
  r->capacity = capacity;
  r->imbalance = RNND_ALLOC(double, capacity > 0 ? capacity : 1, "per-step imbalance");
}

static void record_step(step_record *r, double imbalance, int critical_path, int64_t real, int64_t stored,
                        int is_short) {
  RNND_ASSERT(r->steps < r->capacity);
  r->imbalance[r->steps++] = imbalance;
  r->critical_path_sum += critical_path;
  r->real_tokens += real;
  r->stored_slots += stored;
  r->short_steps += is_short;
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Summarises and frees the record. p99 is the nearest-rank percentile. */
static plan_stats record_finish(step_record *r) {
  plan_stats p = {r->steps, r->short_steps, 0, 0, 0, 0};
  if (r->steps > 0) {
    double sum = 0;
    for (int64_t i = 0; i < r->steps; i++) sum += r->imbalance[i];
    qsort(r->imbalance, (size_t)r->steps, sizeof *r->imbalance, compare_double);
    int64_t at = (int64_t)ceil(0.99 * (double)r->steps) - 1;
    p.imbalance_mean = sum / (double)r->steps;
    p.imbalance_p99 = r->imbalance[at < 0 ? 0 : at];
    p.critical_path_mean = r->critical_path_sum / (double)r->steps;
  }
  if (r->stored_slots > 0) p.padding = 1.0 - (double)r->real_tokens / (double)r->stored_slots;
  free(r->imbalance);
  memset(r, 0, sizeof *r);
  return p;
}

/* Per-rank scratch shared by both simulations. */
typedef struct {
  int world;
  int64_t *tokens;
  int *counts;
  int *longest;
} rank_tally;

static void tally_init(rank_tally *t, int world) {
  t->world = world;
  t->tokens = RNND_ALLOC(int64_t, world, "rank tokens");
  t->counts = RNND_ALLOC(int, world, "rank counts");
  t->longest = RNND_ALLOC(int, world, "rank longest piece");
}

static void tally_clear(rank_tally *t) {
  memset(t->tokens, 0, (size_t)t->world * sizeof *t->tokens);
  memset(t->counts, 0, (size_t)t->world * sizeof *t->counts);
  memset(t->longest, 0, (size_t)t->world * sizeof *t->longest);
}

static void tally_add(rank_tally *t, int rank, int32_t length) {
  t->tokens[rank] += length;
  t->counts[rank]++;
  if (length > t->longest[rank]) t->longest[rank] = length;
}

static int tally_critical_path(const rank_tally *t) {
  int most = 0;
  for (int r = 0; r < t->world; r++)
    if (t->longest[r] > most) most = t->longest[r];
  return most;
}

/* Tokens a rank stores when it pads every piece to its longest one. */
static int64_t tally_padded_slots(const rank_tally *t) {
  int64_t slots = 0;
  for (int r = 0; r < t->world; r++) slots += (int64_t)t->counts[r] * t->longest[r];
  return slots;
}

/* Same definition as dealer_imbalance: max over ranks / mean over all ranks. */
static double tally_imbalance(const rank_tally *t) {
  int64_t max = 0, sum = 0;
  for (int r = 0; r < t->world; r++) {
    sum += t->tokens[r];
    if (t->tokens[r] > max) max = t->tokens[r];
  }
  return sum ? (double)max * t->world / (double)sum : 1.0;
}

static void tally_free(rank_tally *t) {
  free(t->tokens);
  free(t->counts);
  free(t->longest);
  memset(t, 0, sizeof *t);
}

static rnnd_sampler_options bucketed_options(const sampler_args *a, int global_batch) {
  return (rnnd_sampler_options){.max_len = a->max_len,
                                .batch = global_batch,
                                .batch_tokens = 0,
                                .buckets = "auto",
                                .num_buckets = a->num_buckets,
                                .seed = a->seed,
                                .shuffle = 1};
}

/* The real sampler and dealer. Every rank computes the same deal, so one
 * dealer_deal (as rank 0) fills the totals of all ranks. */
static plan_stats simulate_bucketed(const rnnd_dataset *ds, const sampler_args *a, int world) {
  int global_batch = a->per_rank * world;
  rnnd_sampler_options options = bucketed_options(a, global_batch);
  rnnd_sampler s;
  sampler_init(&s, ds, &options);
  rnnd_dealer dealer;
  dealer_init(&dealer, world, s.largest_batch_pieces);
  rnnd_piece *share = RNND_ALLOC(rnnd_piece, s.largest_batch_pieces, "rank 0 share");
  rank_tally tally;
  tally_init(&tally, world);
  /* Bucket sizes do not change between epochs, so neither does the batch count. */
  sampler_start_epoch(&s, 0);
  step_record record;
  record_init(&record, s.n_batches * a->epochs);
  for (int epoch = 0; epoch < a->epochs; epoch++) {
    sampler_start_epoch(&s, epoch);
    const rnnd_piece *pieces;
    int count;
    while ((count = sampler_next_pieces(&s, &pieces)) > 0) {
      dealer_deal(&dealer, pieces, count, 0, share);
      tally_clear(&tally);
      for (int i = 0; i < count; i++) tally_add(&tally, dealer.owner[i], dealer.sorted[i].length);
      int64_t tokens = 0;
      for (int r = 0; r < world; r++) tokens += dealer.tokens[r];
      /* Packed: every stored slot is a real token. */
      record_step(&record, dealer_imbalance(&dealer), tally_critical_path(&tally), tokens, tokens,
                  count < global_batch);
    }
  }
  tally_free(&tally);
  free(share);
  dealer_free(&dealer);
  sampler_free(&s);
  return record_finish(&record);
}

/* The naive baseline over the same pieces (taken from a sampler, so they are
 * cut exactly as the real one cuts them). */
static plan_stats simulate_naive(const rnnd_dataset *ds, const sampler_args *a, int world) {
  int global_batch = a->per_rank * world;
  rnnd_sampler_options options = bucketed_options(a, global_batch);
  rnnd_sampler s;
  sampler_init(&s, ds, &options);
  int64_t n = s.n_pieces;
  uint32_t *order = RNND_ALLOC(uint32_t, n, "naive epoch order");
  rank_tally tally;
  tally_init(&tally, world);
  step_record record;
  record_init(&record, (n + global_batch - 1) / global_batch * a->epochs);
  for (int epoch = 0; epoch < a->epochs; epoch++) {
    for (int64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    sampler_shuffle_pieces(order, n, rng_key2(a->seed ^ 0x4E415645ull, (uint64_t)epoch));
    for (int64_t first = 0; first < n; first += global_batch) {
      int count = n - first < global_batch ? (int)(n - first) : global_batch;
      tally_clear(&tally);
      for (int i = 0; i < count; i++) tally_add(&tally, i % world, s.piece_length[order[first + i]]);
      int64_t tokens = 0;
      for (int r = 0; r < world; r++) tokens += tally.tokens[r];
      record_step(&record, tally_imbalance(&tally), tally_critical_path(&tally), tokens,
                  tally_padded_slots(&tally), count < global_batch);
    }
  }
  tally_free(&tally);
  free(order);
  sampler_free(&s);
  return record_finish(&record);
}

/* Prints the data set and bucket bounds; returns the number of pieces. */
static int64_t print_header(const rnnd_dataset *ds, const sampler_args *a) {
  rnnd_sampler_options options = bucketed_options(a, a->per_rank);
  rnnd_sampler s;
  sampler_init(&s, ds, &options);
  printf("data set %s: %lld sequences, %lld tokens, %lld pieces at max_len %d\n", ds->path,
         (long long)ds->n_sequences, (long long)ds->n_tokens, (long long)s.n_pieces, a->max_len);
  /* Length quantiles that coincide are merged, so fewer buckets may be used than asked for. */
  printf("per_rank %d pieces, %d epoch(s), seed %llu, auto buckets: %d asked, %d used, upper bounds:", a->per_rank,
         a->epochs, (unsigned long long)a->seed, a->num_buckets, s.n_buckets);
  for (int b = 0; b < s.n_buckets; b++) printf(" %d", s.bucket_upper[b]);
  printf("\n\n");
  int64_t n_pieces = s.n_pieces;
  sampler_free(&s);
  return n_pieces;
}

static void print_table_head(void) {
  printf("%5s %7s | %-44s | %-44s |\n", "", "", "bucketed + longest-first deal (packed)",
         "naive: random, round-robin, padded");
  printf("%5s %7s | %5s %5s %8s %8s %6s %7s | %5s %5s %8s %8s %6s %7s | %s\n", "world", "global", "steps", "short",
         "imb mean", "imb p99", "crit", "padding", "steps", "short", "imb mean", "imb p99", "crit", "padding", "note");
}

static void print_row(int world, int global_batch, int64_t n_pieces, const plan_stats *b, const plan_stats *n) {
  const char *note = global_batch > n_pieces ? "global batch > all pieces: 1 short batch per bucket"
                     : b->short_steps == b->steps ? "every bucketed batch short"
                                                  : "-";
  printf("%5d %7d | %5lld %5lld %8.4f %8.4f %6.2f %6.1f%% | %5lld %5lld %8.4f %8.4f %6.2f %6.1f%% | %s\n", world,
         global_batch, (long long)b->steps, (long long)b->short_steps, b->imbalance_mean, b->imbalance_p99,
         b->critical_path_mean, 100.0 * b->padding, (long long)n->steps, (long long)n->short_steps, n->imbalance_mean,
         n->imbalance_p99, n->critical_path_mean, 100.0 * n->padding, note);
}

static void print_legend(void) {
  printf("\nimb: tokens of the busiest rank / mean tokens per rank, per step (1 = perfect); p99 over steps.\n"
         "crit: mean over steps of the longest piece any rank holds (serial RNN time steps per step).\n"
         "padding: padded slots / stored slots over the epoch (each naive rank pads to its own longest piece).\n"
         "short: steps whose batch has fewer pieces than the global batch (bucket or epoch tails).\n");
}

/* Targets are on the mean imbalance of the bucketed plan. */
static void print_target(int world, double limit, const plan_stats *stats) {
  if (!stats) {
    printf("  %d ranks: not simulated (--max-world below %d)\n", world, world);
    return;
  }
  int pass = stats->imbalance_mean <= limit && stats->padding == 0.0;
  printf("  %d ranks: imbalance mean %.4f (p99 %.4f), padding %.1f%%: %s\n", world, stats->imbalance_mean,
         stats->imbalance_p99, 100.0 * stats->padding, pass ? "PASS" : "MISS");
}

int main(int argc, char **argv) {
  rnnd_set_program_name("bench_sampler");
  sampler_args a;
  parse_args(argc, argv, &a);
  rnnd_dataset ds;
  dataset_load(&ds, a.path, 0);
  int64_t n_pieces = print_header(&ds, &a);
  print_table_head();
  double t0 = rnnd_now();
  plan_stats at8 = {0}, at64 = {0};
  int have8 = 0, have64 = 0;
  for (int world = 1; world <= a.max_world; world *= 2) {
    plan_stats bucketed = simulate_bucketed(&ds, &a, world);
    plan_stats naive = simulate_naive(&ds, &a, world);
    print_row(world, a.per_rank * world, n_pieces, &bucketed, &naive);
    fflush(stdout);
    if (world == 8) at8 = bucketed, have8 = 1;
    if (world == 64) at64 = bucketed, have64 = 1;
    if (world > a.max_world / 2) break; /* doubling again would overflow or pass max_world */
  }
  print_legend();
  printf("\ntarget: imbalance <= 1.02 at 8 ranks, <= 1.05 at 64; padding 0%%\n");
  print_target(8, 1.02, have8 ? &at8 : NULL);
  print_target(64, 1.05, have64 ? &at64 : NULL);
  printf("(simulated in %.1f s)\n", rnnd_now() - t0);
  dataset_free(&ds);
  return 0;
}
