/* test_comm.c — the communicator's collectives and the bucketed gradient
 * all-reduce, run under mpirun with several ranks:
 *  - fp32/fp16/bf16 sums agree with the exact sum (fp32 to float rounding,
 *    16-bit within the format's rounding of each partial sum), and every
 *    rank ends with bitwise the same result;
 *  - grad_sync in many small buckets equals one whole all-reduce, for each
 *    wire format, and leaves no element untouched;
 *  - broadcast, allgather and max.
 * usage: mpirun -np N test_comm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/comm.h"
#include "rnnd/grad_sync.h"
#include "rnnd/rng.h"

static int failures = 0, checks = 0;
#define EXPECT(cond, ...)                                      \
  do {                                                         \
    checks++;                                                  \
    if (!(cond) && failures++ < 20) {                          \
      printf("FAIL (rank %d) %s: ", c.rank, #cond);            \
      printf(__VA_ARGS__);                                     \
      printf("\n");                                            \
    }                                                          \
  } while (0)

enum { N = 100003 }; /* odd, so slices and buckets do not divide evenly */

/* A value per (rank, i) spanning magnitudes 2^-20 .. 2^4, both signs. */
static float value(int rank, size_t i) {
  uint64_t k = rng_key2((uint64_t)rank + 7, i);
  float u = rng_uniform_from(k), sign = (k & 1) ? -1.0f : 1.0f;
  return sign * ldexpf(0.5f + u, (int)((k >> 8) % 25) - 20);
}

static uint64_t hash_bytes(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static rnnd_comm c;

static void expect_same_everywhere(const void *p, size_t bytes, const char *what) {
  uint64_t *all = calloc((size_t)c.size, sizeof *all);
  comm_allgather_u64(&c, hash_bytes(p, bytes), all);
  for (int r = 0; r < c.size; r++) EXPECT(all[r] == all[0], "%s: rank %d's result differs from rank 0's", what, r);
  free(all);
}

/* Relative tolerance of one rounding per combine in a format of `bits` mantissa bits. */
static double tolerance(rnnd_dtype t) { return t == RNND_DTYPE_BF16 ? 8.0 * 0x1p-8 : t == RNND_DTYPE_F16 ? 8.0 * 0x1p-11 : 1e-6; }

static void check_sum(rnnd_dtype t) {
  float *got = malloc(N * sizeof *got);
  uint16_t *words = malloc(N * sizeof *words);
  for (size_t i = 0; i < N; i++) got[i] = value(c.rank, i);
  if (t == RNND_DTYPE_F32) {
    comm_allreduce_sum(&c, got, N, t);
  } else {
    rnnd_f32_to_half_array(t, words, got, N);
    comm_allreduce_sum(&c, words, N, t);
    expect_same_everywhere(words, N * sizeof *words, rnnd_dtype_name(t));
    rnnd_half_to_f32_array(t, got, words, N);
  }
  expect_same_everywhere(got, N * sizeof *got, rnnd_dtype_name(t));
  int bad = 0;
  for (size_t i = 0; i < N; i++) {
    double exact = 0, scale = 0;
    for (int r = 0; r < c.size; r++) exact += value(r, i), scale += fabs(value(r, i));
    /* fp16 flushes what is below its subnormal grid: allow that absolutely */
    double allowed = tolerance(t) * scale + (t == RNND_DTYPE_F16 ? c.size * 0x1p-24 : 0.0);
    if (fabs(got[i] - exact) > allowed && bad++ < 3)
      printf("rank %d %s element %zu: got %.9g, exact %.9g\n", c.rank, rnnd_dtype_name(t), i, got[i], exact);
  }
  EXPECT(bad == 0, "%s sum: %d elements off", rnnd_dtype_name(t), bad);
  free(got);
  free(words);
}

static void check_buckets(rnnd_dtype t) {
  float *whole = malloc(N * sizeof *whole), *bucketed = malloc(N * sizeof *bucketed);
  for (size_t i = 0; i < N; i++) whole[i] = bucketed[i] = value(c.rank, i);
  rnnd_grad_sync one, many;
  grad_sync_init(&one, &c, N, 1000.0, t);
  grad_sync_init(&many, &c, N, 0.01, t); /* ~5000 floats a bucket: 21 buckets */
  EXPECT(many.n_buckets > 10, "%s: only %d buckets", rnnd_dtype_name(t), many.n_buckets);
  grad_sync_allreduce(&one, whole);
  grad_sync_allreduce(&many, bucketed);
  int differ = 0;
  for (size_t i = 0; i < N; i++) {
    double scale = 0;
    for (int r = 0; r < c.size; r++) scale += fabs(value(r, i));
    if (fabs(whole[i] - bucketed[i]) > 2 * tolerance(t) * scale + 0x1p-23 * c.size) differ++;
  }
  EXPECT(differ == 0, "%s: bucketed all-reduce differs from whole in %d elements", rnnd_dtype_name(t), differ);
  expect_same_everywhere(bucketed, N * sizeof *bucketed, "bucketed");
  grad_sync_free(&one);
  grad_sync_free(&many);
  free(whole);
  free(bucketed);
}

static void check_small_collectives(void) {
  double top = comm_allreduce_max_f64(&c, (double)c.rank * 1.5);
  EXPECT(top == (c.size - 1) * 1.5, "max %g", top);
  uint64_t *all = calloc((size_t)c.size, sizeof *all);
  comm_allgather_u64(&c, 1000u + (uint64_t)c.rank, all);
  for (int r = 0; r < c.size; r++) EXPECT(all[r] == 1000u + (uint64_t)r, "allgather[%d] = %llu", r, (unsigned long long)all[r]);
  free(all);
  char text[32];
  snprintf(text, sizeof text, "from rank %d", c.rank);
  comm_broadcast(&c, text, sizeof text, c.size - 1);
  char want[32];
  snprintf(want, sizeof want, "from rank %d", c.size - 1);
  EXPECT(!strcmp(text, want), "broadcast gave '%s'", text);
  double sums[2] = {1.0, (double)c.rank};
  comm_allreduce_sum_f64(&c, sums, 2);
  EXPECT(sums[0] == c.size && sums[1] == c.size * (c.size - 1) / 2.0, "f64 sums %g %g", sums[0], sums[1]);
}

int main(int argc, char **argv) {
  comm_init(&c, &argc, &argv);
  for (int t = RNND_DTYPE_F32; t <= RNND_DTYPE_BF16; t++) {
    check_sum((rnnd_dtype)t);
    check_buckets((rnnd_dtype)t);
  }
  check_small_collectives();
  double totals[2] = {checks, failures};
  comm_allreduce_sum_f64(&c, totals, 2);
  if (c.rank == 0) printf("%d ranks: %.0f passed, %.0f failed\n", c.size, totals[0] - totals[1], totals[1]);
  int failed = totals[1] > 0;
  comm_finalize(&c);
  return failed;
}
