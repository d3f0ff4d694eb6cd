/* test_dropout.c — dropout masks are keyed by (seed, step, piece, layer,
 * position, unit), never by a piece's place in a batch or the thread count:
 * with dropout on, the NLL of a batch equals the sum of the NLLs of its
 * pieces run one at a time, and one thread and two give the same NLL.
 * usage: test_dropout FIXTURE.h5 (a multi-layer fixture of torch_reference.py) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "rnnd/common.h"

static double batch_nll(fixture *f, rnnd_backend *be, const rnnd_piece *pieces, int count, const rnnd_dropout *dr) {
  rnnd_batch b;
  batch_init(&b, count, f->sampler.largest_batch_steps, f->data.n_tokens);
  batch_fill(&b, &f->data, pieces, count);
  memset(f->grads, 0, f->layout.numel * sizeof *f->grads);
  double nll = be->ops->train_batch(be, f->params, f->grads, &b, dr, 1.0f);
  batch_free(&b);
  return nll;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_dropout FIXTURE.h5\n");
    return 2;
  }
  fixture f;
  fixture_load(&f, argv[1]);
  int n = (int)f.sampler.n_pieces, failed = 0;
  rnnd_backend *one = fixture_backend(&f, n, 1);
  rnnd_dropout dr = {.seed = 99, .step = 7, .p = 0.3f};
  double together = batch_nll(&f, one, f.sampler.pieces, n, &dr), alone = 0.0;
  for (int i = 0; i < n; i++) alone += batch_nll(&f, one, &f.sampler.pieces[i], 1, &dr);
  double no_dropout = batch_nll(&f, one, f.sampler.pieces, n, NULL);
  rnnd_dropout other_step = dr;
  other_step.step = 8;
  double next_step = batch_nll(&f, one, f.sampler.pieces, n, &other_step);
  one->ops->destroy(one);
  rnnd_backend *two = fixture_backend(&f, n, 2);
  double two_threads = batch_nll(&f, two, f.sampler.pieces, n, &dr);
  two->ops->destroy(two);

  double batching = fabs(together - alone) / fabs(alone), threads = fabs(together - two_threads) / fabs(together);
  printf("nll with dropout: batch %.9f, pieces alone %.9f (rel %.2e), 2 threads %.9f (rel %.2e)\n", together, alone,
         batching, two_threads, threads);
  printf("nll without dropout %.9f, with dropout at another step %.9f\n", no_dropout, next_step);
  failed += batching > 1e-6;
  failed += threads > 1e-6;
  failed += fabs(no_dropout - together) < 1e-3; /* dropout must change the function */
  failed += fabs(next_step - together) < 1e-3;  /* and the mask must change with the step */
  printf("%d passed, %d failed\n", 4 - failed, failed);
  fixture_free(&f);
  return failed ? 1 : 0;
}
