/* deal.h — deals one global batch of pieces out to the ranks so that their
 * token counts are as equal as possible: longest piece first, each to the
 * rank holding the fewest tokens so far (ties: fewer pieces, then the lower
 * rank). This is Graham's LPT rule; no rank ends more than one piece length
 * above the mean. The deal is a pure function of the global batch and the
 * world size, so every rank computes the same one without communication,
 * and a rank may get no piece at all (it then still joins the collectives).
 *
 * Ownership: dealer_init allocates scratch for batches of up to max_pieces,
 * dealer_free releases it. */
#ifndef RNND_DEAL_H
#define RNND_DEAL_H

#include <stdint.h>

#include "rnnd/batch.h"

typedef struct {
  int world;
  int max_pieces;
  int64_t *tokens;    /* [world] tokens dealt to each rank by the last deal */
  int *counts;        /* [world] pieces dealt to each rank */
  int *owner;         /* [max_pieces] rank of each piece, in `sorted` order */
  rnnd_piece *sorted; /* [max_pieces] the batch, longest first */
} rnnd_dealer;

void dealer_init(rnnd_dealer *d, int world, int max_pieces);
/* Deals `count` pieces; copies rank `rank`'s share (longest first) into
 * share (room for count pieces) and returns its size. */
int dealer_deal(rnnd_dealer *d, const rnnd_piece *pieces, int count, int rank, rnnd_piece *share);
/* After a deal: max over ranks of the tokens dealt / their mean (1 = perfect). */
double dealer_imbalance(const rnnd_dealer *d);
void dealer_free(rnnd_dealer *d);

#endif
