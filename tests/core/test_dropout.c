/* test_dropout.c — dropout masks are keyed by (seed, step, piece, layer,
 * position, unit), never by a piece's place in a batch or the thread count:
 * with dropout on, the NLL of a batch equals the sum of the NLLs of its
 * pieces run one at a time, and one thread and two give the same NLL.
 * Also: the gradient with dropout on is the gradient of the function the
 * forward pass computed (the backward applies the same masks), checked by a
 * central difference along a random direction.
 * usage: test_dropout FIXTURE.h5 (a multi-layer fixture of torch_reference.py) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "rnnd/common.h"
#include "rnnd/rng.h"

static double batch_nll(fixture *f, rnnd_backend *be, const rnnd_piece *pieces, int count, const rnnd_dropout *dr) {
  rnnd_batch b;
  batch_init(&b, count, f->sampler.largest_batch_steps, f->data.n_tokens);
  batch_fill(&b, &f->data, pieces, count);
  memset(f->grads, 0, f->layout.numel * sizeof *f->grads);
  double nll = be->ops->train_batch(be, f->params, f->grads, &b, dr, 1.0f);
  batch_free(&b);
  return nll;
}

/* d/de NLL(params + e v) by central differences vs grad . v, v random. */
static double directional_error(fixture *f, rnnd_backend *be, const rnnd_dropout *dr) {
  int n = (int)f->sampler.n_pieces;
  size_t numel = f->layout.numel;
  float *saved = malloc(numel * sizeof *saved), *v = malloc(numel * sizeof *v);
  memcpy(saved, f->params, numel * sizeof *saved);
  batch_nll(f, be, f->pieces, n, dr);
  double analytic = 0.0;
  for (size_t i = 0; i < numel; i++) {
    v[i] = 2.0f * rng_uniform_from(rng_key2(5, i)) - 1.0f;
    analytic += (double)f->grads[i] * v[i];
  }
  const float eps = 1e-3f;
  for (size_t i = 0; i < numel; i++) f->params[i] = saved[i] + eps * v[i];
  double plus = batch_nll(f, be, f->pieces, n, dr);
  for (size_t i = 0; i < numel; i++) f->params[i] = saved[i] - eps * v[i];
  double minus = batch_nll(f, be, f->pieces, n, dr);
  memcpy(f->params, saved, numel * sizeof *saved);
  double numeric = (plus - minus) / (2.0 * eps);
  printf("directional derivative with dropout: analytic %.6f, central difference %.6f\n", analytic, numeric);
  free(saved);
  free(v);
  return fabs(analytic - numeric) / fabs(numeric);
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
  double together = batch_nll(&f, one, f.pieces, n, &dr), alone = 0.0;
  for (int i = 0; i < n; i++) alone += batch_nll(&f, one, &f.pieces[i], 1, &dr);
  double no_dropout = batch_nll(&f, one, f.pieces, n, NULL);
  rnnd_dropout other_step = dr;
  other_step.step = 8;
  double next_step = batch_nll(&f, one, f.pieces, n, &other_step);
  double derivative = directional_error(&f, one, &dr);
  one->ops->destroy(one);
  rnnd_backend *two = fixture_backend(&f, n, 2);
  double two_threads = batch_nll(&f, two, f.pieces, n, &dr);
  two->ops->destroy(two);

  double batching = fabs(together - alone) / fabs(alone), threads = fabs(together - two_threads) / fabs(together);
  printf("nll with dropout: batch %.9f, pieces alone %.9f (rel %.2e), 2 threads %.9f (rel %.2e)\n", together, alone,
         batching, two_threads, threads);
  printf("nll without dropout %.9f, with dropout at another step %.9f\n", no_dropout, next_step);
  failed += batching > 1e-6;
  failed += threads > 1e-6;
  failed += fabs(no_dropout - together) < 1e-3; /* dropout must change the function */
  failed += fabs(next_step - together) < 1e-3;  /* and the mask must change with the step */
  printf("directional derivative relative error %.2e (limit 1e-2)\n", derivative);
  failed += !(derivative < 1e-2);
  printf("%d passed, %d failed\n", 5 - failed, failed);
  fixture_free(&f);
  return failed ? 1 : 0;
}
