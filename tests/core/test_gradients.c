/* test_gradients.c — forward loss and every parameter gradient of the CPU
 * backend against PyTorch (float64) on the fixtures of torch_reference.py:
 * one packed batch of all pieces, uneven lengths including 1; language
 * models, classifiers (model.task = classify) and forecasters (regress).
 * usage: test_gradients [--threads N] FIXTURE.h5...   (fails if any relative error > 1e-4) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "rnnd/common.h"

#define TOLERANCE 1e-4

static int check_fixture(const char *path, int threads) {
  fixture f;
  fixture_load(&f, path);
  int n = (int)f.sampler.n_pieces;
  rnnd_backend *be = fixture_backend(&f, n, threads);
  rnnd_batch batch;
  batch_init(&batch, n, f.sampler.largest_batch_steps, f.data.n_tokens);
  if (f.data.n_features) batch_init_series(&batch, f.data.n_features);
  batch_fill(&batch, &f.data, f.pieces, n);
  /* a classifier's loss is the mean over sequences, a language model's over tokens */
  int classify = f.layout.shape.task == RNND_TASK_CLASSIFY;
  if (classify) batch_fill_labels(&batch, &f.data);
  /* a forecaster's over its scored steps */
  double count = classify ? (double)batch.n_pieces : f.data.n_features ? (double)batch.n_scored : (double)batch.n_tokens;
  double nll = be->ops->train_batch(be, f.params, f.grads, &batch, NULL, (float)(1.0 / count));
  double loss = nll / count, ref_loss;
  if (!fixture_read_doubles(path, "/reference/loss", &ref_loss, 1)) RNND_FAIL("%s: no /reference/loss", path);
  double worst = fabs(loss - ref_loss) / fabs(ref_loss);
  const char *worst_name = "loss", *worst_view;
  double grad_err = fixture_worst_gradient_error(&f, path, f.grads, TOLERANCE, &worst_view);
  int failed = worst > TOLERANCE || grad_err > TOLERANCE;
  if (grad_err > worst) worst = grad_err, worst_name = worst_view;
  printf("%s %s: %d pieces, %lld tokens, loss %.8f (torch %.8f), worst relative error %.2e (%s)\n",
         failed ? "FAIL" : "ok  ", path, n, (long long)batch.n_tokens, loss, ref_loss, worst, worst_name);
  batch_free(&batch);
  be->ops->destroy(be);
  fixture_free(&f);
  return failed;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_gradients [--threads N] FIXTURE.h5...\n");
    return 2;
  }
  int failures = 0, first = 1, threads = 1;
  if (argc > 2 && !strcmp(argv[1], "--threads")) threads = atoi(argv[2]), first = 3;
  for (int i = first; i < argc; i++) failures += check_fixture(argv[i], threads);
  printf("%d passed, %d failed\n", argc - first - failures, failures);
  return failures ? 1 : 0;
}
