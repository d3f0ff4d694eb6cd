/* test_plan.c — the batch plan and the deal to ranks (sampler.h, deal.h) on
 * a real data set:
 *  - an epoch visits every piece exactly once (count and token budgets);
 *  - the global batches do not depend on the world size: for world sizes
 *    1, 2, 8 and 64 the ranks' shares of every batch add up to exactly that
 *    batch, each piece on one rank;
 *  - balance: no rank holds more than one piece length above any other
 *    (so at most that far from perfect balance), and within the per-rank
 *    capacity the trainer sizes its buffers for;
 *  - token budgets are respected; capacity bounds hold for every batch.
 * usage: test_plan TRAIN.h5 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/deal.h"
#include "rnnd/sampler.h"

static int failures = 0, checks = 0;
#define EXPECT(cond, ...)                          \
  do {                                             \
    checks++;                                      \
    if (!(cond) && failures++ < 20) {              \
      printf("FAIL %s: ", #cond);                  \
      printf(__VA_ARGS__);                         \
      printf("\n");                                \
    }                                              \
  } while (0)

/* Deals one batch over `world` ranks and checks partition and balance. */
static void check_deal(const rnnd_piece *pieces, int count, int world, int *seen_on, rnnd_piece *share) {
  rnnd_dealer d;
  dealer_init(&d, world, count);
  int64_t total = 0;
  int longest = 0;
  for (int i = 0; i < count; i++) {
    total += pieces[i].length;
    if (pieces[i].length > longest) longest = pieces[i].length;
    seen_on[i] = -1;
  }
  int64_t min = INT64_MAX, max = 0, dealt = 0;
  for (int r = 0; r < world; r++) {
    int n = dealer_deal(&d, pieces, count, r, share);
    int64_t tokens = 0;
    for (int k = 0; k < n; k++) {
      tokens += share[k].length;
      for (int i = 0; i < count; i++)
        if (pieces[i].id == share[k].id) {
          EXPECT(seen_on[i] < 0, "piece %lld dealt to ranks %d and %d", (long long)pieces[i].id, seen_on[i], r);
          seen_on[i] = r;
        }
    }
    EXPECT(tokens == d.tokens[r], "rank %d share %lld tokens, dealer says %lld", r, (long long)tokens,
           (long long)d.tokens[r]);
    EXPECT(tokens <= total / world + 1 + longest, "rank %d holds %lld tokens, capacity bound %lld", r,
           (long long)tokens, (long long)(total / world + 1 + longest));
    dealt += n;
    if (tokens < min) min = tokens;
    if (tokens > max) max = tokens;
  }
  EXPECT(dealt == count, "world %d: %lld pieces dealt of %d", world, (long long)dealt, count);
  for (int i = 0; i < count; i++) EXPECT(seen_on[i] >= 0, "world %d: piece %d not dealt", world, i);
  if (count >= world) EXPECT(max - min <= longest, "world %d: spread %lld > longest piece %d", world,
                             (long long)(max - min), longest);
  dealer_free(&d);
}

/* One epoch; returns a hash of the plan so that runs can be compared. */
static uint64_t check_epoch(rnnd_sampler *s, int world, int64_t budget) {
  int *visits = calloc((size_t)s->n_pieces, sizeof *visits);
  int *seen_on = malloc(sizeof(int) * (size_t)s->largest_batch_pieces);
  rnnd_piece *share = malloc(sizeof(rnnd_piece) * (size_t)s->largest_batch_pieces);
  uint64_t hash = 1469598103934665603ull;
  sampler_start_epoch(s, 3);
  const rnnd_piece *pieces;
  int count;
  while ((count = sampler_next_pieces(s, &pieces)) > 0) {
    int64_t tokens = 0;
    for (int i = 0; i < count; i++) {
      visits[pieces[i].id]++;
      tokens += pieces[i].length;
      hash = (hash ^ (uint64_t)pieces[i].id) * 1099511628211ull;
    }
    hash = (hash ^ 0xFFFFu) * 1099511628211ull; /* batch boundary */
    EXPECT(count <= s->largest_batch_pieces, "batch of %d pieces > bound %d", count, s->largest_batch_pieces);
    EXPECT(tokens <= s->largest_batch_tokens, "batch of %lld tokens > bound %lld", (long long)tokens,
           (long long)s->largest_batch_tokens);
    if (budget) EXPECT(count == 1 || tokens <= budget, "batch of %lld tokens over budget %lld", (long long)tokens,
                       (long long)budget);
    check_deal(pieces, count, world, seen_on, share);
  }
  for (int64_t i = 0; i < s->n_pieces; i++) EXPECT(visits[i] == 1, "piece %lld visited %d times", (long long)i, visits[i]);
  free(visits);
  free(seen_on);
  free(share);
  return hash;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_plan TRAIN.h5\n");
    return 2;
  }
  rnnd_dataset ds;
  dataset_load(&ds, argv[1], 0);
  const int worlds[] = {1, 2, 8, 64};
  const int64_t budgets[] = {0, 2000};
  for (int b = 0; b < 2; b++) {
    rnnd_sampler_options o = {.max_len = 35, .batch = 64, .batch_tokens = budgets[b], .buckets = "auto",
                              .num_buckets = 8, .seed = 42, .shuffle = 1};
    uint64_t first_hash = 0;
    for (int w = 0; w < 4; w++) {
      rnnd_sampler s;
      sampler_init(&s, &ds, &o);
      uint64_t hash = check_epoch(&s, worlds[w], budgets[b]);
      if (w == 0) first_hash = hash;
      EXPECT(hash == first_hash, "budget %lld: plan at world %d differs from world 1", (long long)budgets[b],
             worlds[w]);
      printf("budget %lld tokens, world %2d: %lld batches, plan hash %016llx\n", (long long)budgets[b], worlds[w],
             (long long)s.n_batches, (unsigned long long)hash);
      sampler_free(&s);
    }
  }
  dataset_free(&ds);
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures != 0;
}
