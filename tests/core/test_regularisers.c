/* test_regularisers.c — the CPU backend's regularisers against PyTorch
 * (float64, tests/torch_reference.py's regularised_loss, which draws
 * rnn_dist's counter-based masks in Python): dropout locked across time or
 * not, embedding dropout, AR, TAR and weight dropout, all on in one batch of
 * every piece. The mean NLL and every parameter gradient of the regularised
 * loss must agree within 1e-4 (relative), with 1 and 2 threads, in fp32
 * storage. usage: test_regularisers FIXTURE.h5... (regularise_*.h5) */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"
#include "rnnd/common.h"

#define TOLERANCE 1e-4

static double read_setting(const char *path, const char *name) {
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t group = H5Gopen2(file, "regularise", H5P_DEFAULT);
  if (group < 0) RNND_FAIL("%s: no /regularise", path);
  double value = 0.0;
  hid_t attr = H5Aopen(group, name, H5P_DEFAULT);
  if (attr < 0 || H5Aread(attr, H5T_NATIVE_DOUBLE, &value) < 0) RNND_FAIL("%s: no /regularise %s", path, name);
  H5Aclose(attr);
  H5Gclose(group);
  H5Fclose(file);
  return value;
}

static int check(const char *path, int threads) {
  fixture f;
  fixture_load(&f, path);
  rnnd_dropout dr = {.seed = (uint64_t)read_setting(path, "seed"),
                     .step = (int64_t)read_setting(path, "step"),
                     .p = (float)read_setting(path, "p"),
                     .locked = read_setting(path, "locked") != 0.0,
                     .p_embedding = (float)read_setting(path, "p_embedding"),
                     .ar_alpha = (float)read_setting(path, "ar_alpha"),
                     .tar_beta = (float)read_setting(path, "tar_beta"),
                     .p_weight = (float)read_setting(path, "p_weight")};
  int n = (int)f.sampler.n_pieces;
  rnnd_backend_capacity cap = {.max_pieces = n, .max_steps = f.sampler.largest_batch_steps,
                               .max_tokens = f.data.n_tokens, .threads = threads, .storage = RNND_DTYPE_F32,
                               .weight_dropout = dr.p_weight > 0.0f};
  rnnd_backend *be = cpu_backend_create(&f.layout, &cap);
  rnnd_batch batch;
  batch_init(&batch, n, f.sampler.largest_batch_steps, f.data.n_tokens);
  batch_fill(&batch, &f.data, f.pieces, n);
  double count = (double)batch.n_tokens;
  double loss = be->ops->train_batch(be, f.params, f.grads, &batch, &dr, (float)(1.0 / count)) / count, ref;
  if (!fixture_read_doubles(path, "/reference/loss", &ref, 1)) RNND_FAIL("%s: no /reference/loss", path);
  double worst = fabs(loss - ref) / fabs(ref);
  const char *worst_name = "loss", *worst_view;
  double grad_err = fixture_worst_gradient_error(&f, path, f.grads, TOLERANCE, &worst_view);
  if (grad_err > worst) worst = grad_err, worst_name = worst_view;
  int failed = worst > TOLERANCE;
  printf("%s %s (%d threads): mean NLL %.8f (torch %.8f), worst relative error %.2e (%s)\n", failed ? "FAIL" : "ok  ",
         path, threads, loss, ref, worst, worst_name);
  batch_free(&batch);
  be->ops->destroy(be);
  fixture_free(&f);
  return failed;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_regularisers FIXTURE.h5...\n");
    return 2;
  }
  int failures = 0, runs = 0;
  for (int i = 1; i < argc; i++)
    for (int threads = 1; threads <= 2; threads++, runs++) failures += check(argv[i], threads);
  printf("%d passed, %d failed\n", runs - failures, failures);
  return failures ? 1 : 0;
}
