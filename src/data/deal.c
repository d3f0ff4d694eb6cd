/* deal.c — longest-first balanced dealing of a global batch (deal.h). */
#include "rnnd/deal.h"

#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

void dealer_init(rnnd_dealer *d, int world, int max_pieces) {
  RNND_ASSERT(world >= 1 && max_pieces >= 1);
  memset(d, 0, sizeof *d);
  d->world = world;
  d->max_pieces = max_pieces;
  d->tokens = RNND_ALLOC(int64_t, world, "dealer tokens");
  d->counts = RNND_ALLOC(int, world, "dealer counts");
  d->owner = RNND_ALLOC(int, max_pieces, "dealer owners");
  d->sorted = RNND_ALLOC(rnnd_piece, max_pieces, "dealer pieces");
}

static int longest_first(const void *pa, const void *pb) {
  const rnnd_piece *a = pa, *b = pb;
  if (a->length != b->length) return a->length > b->length ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static int least_loaded(const rnnd_dealer *d) {
  int best = 0;
  for (int r = 1; r < d->world; r++)
    if (d->tokens[r] < d->tokens[best] || (d->tokens[r] == d->tokens[best] && d->counts[r] < d->counts[best]))
      best = r;
  return best;
}

int dealer_deal(rnnd_dealer *d, const rnnd_piece *pieces, int count, int rank, rnnd_piece *share) {
  RNND_ASSERT(count >= 0 && count <= d->max_pieces && rank >= 0 && rank < d->world);
  memcpy(d->sorted, pieces, (size_t)count * sizeof *pieces);
  qsort(d->sorted, (size_t)count, sizeof *d->sorted, longest_first);
  memset(d->tokens, 0, (size_t)d->world * sizeof *d->tokens);
  memset(d->counts, 0, (size_t)d->world * sizeof *d->counts);
  int n = 0;
  for (int i = 0; i < count; i++) {
    int r = least_loaded(d);
    d->owner[i] = r;
    d->tokens[r] += d->sorted[i].length;
    d->counts[r]++;
    if (r == rank) share[n++] = d->sorted[i];
  }
  return n;
}

double dealer_imbalance(const rnnd_dealer *d) {
  int64_t max = 0, sum = 0;
  for (int r = 0; r < d->world; r++) {
    sum += d->tokens[r];
    if (d->tokens[r] > max) max = d->tokens[r];
  }
  return sum ? (double)max * d->world / (double)sum : 1.0;
}

void dealer_free(rnnd_dealer *d) {
  free(d->tokens);
  free(d->counts);
  free(d->owner);
  free(d->sorted);
  memset(d, 0, sizeof *d);
}
