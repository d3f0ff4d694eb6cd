/* test_adam.c — 20 Adam steps with global-norm clipping from the same
 * initial weights as PyTorch (tests/torch_reference.py, adam_*.h5): the loss
 * of every step, the final parameters and their exponential moving average
 * (train.ema_decay, from update ema_start on) must match.
 * usage: test_adam FIXTURE.h5... */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "rnnd/common.h"
#include "rnnd/h5util.h"
#include "rnnd/optim.h"

#define STEPS 20
#define PER_STEP 4
#define LOSS_TOLERANCE 1e-4
#define PARAM_TOLERANCE 1e-4

static double read_attr_double(const char *path, const char *name) {
  hid_t file = h5_open_read(path);
  hid_t attr = h5_check(H5Aopen(file, name, H5P_DEFAULT), path, name);
  double v;
  h5_check(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), path, name);
  H5Aclose(attr);
  H5Fclose(file);
  return v;
}

static void read_batches(const char *path, int *out) {
  hid_t file = h5_open_read(path);
  hid_t set = h5_check(H5Dopen2(file, "/adam/batches", H5P_DEFAULT), path, "/adam/batches");
  h5_check(H5Dread(set, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), path, "/adam/batches");
  H5Dclose(set);
  H5Fclose(file);
}

static int check_fixture(const char *path, int threads) {
  fixture f;
  fixture_load(&f, path);
  RNND_ASSERT(f.sampler.n_pieces == f.data.n_sequences); /* no cutting: piece i = sequence i */
  rnnd_train_config tc;
  rnnd_config defaults;
  config_init_defaults(&defaults);
  tc = defaults.train;
  tc.lr = read_attr_double(path, "adam_lr");
  tc.beta1 = read_attr_double(path, "adam_beta1");
  tc.beta2 = read_attr_double(path, "adam_beta2");
  tc.eps = read_attr_double(path, "adam_eps");
  tc.clip_norm = read_attr_double(path, "clip_norm");
  tc.ema_decay = read_attr_double(path, "ema_decay");
  tc.ema_start = (long)read_attr_double(path, "ema_start");
  rnnd_optimizer opt;
  optimizer_init(&opt, &tc, f.layout.numel);
  int batches[STEPS * PER_STEP];
  double ref_losses[STEPS];
  read_batches(path, batches);
  if (!fixture_read_doubles(path, "/adam/losses", ref_losses, STEPS)) RNND_FAIL("%s: no /adam/losses", path);
  rnnd_backend *be = fixture_backend(&f, PER_STEP, threads);
  rnnd_batch batch;
  batch_init(&batch, PER_STEP, f.sampler.largest_batch_steps, f.data.n_tokens);
  double worst_loss = 0.0;
  int clipped = 0;
  for (int s = 0; s < STEPS; s++) {
    rnnd_piece pieces[PER_STEP];
    for (int k = 0; k < PER_STEP; k++) pieces[k] = f.pieces[batches[s * PER_STEP + k]];
    batch_fill(&batch, &f.data, pieces, PER_STEP);
    for (size_t i = 0; i < f.layout.numel; i++) f.grads[i] = 0.0f;
    double nll = be->ops->train_batch(be, f.params, f.grads, &batch, NULL, (float)(1.0 / (double)batch.n_tokens));
    double loss = nll / (double)batch.n_tokens, err = fabs(loss - ref_losses[s]) / fabs(ref_losses[s]);
    if (err > worst_loss) worst_loss = err;
    double norm = grad_global_norm(f.grads, f.layout.numel);
    clipped += grad_clip(f.grads, f.layout.numel, norm, tc.clip_norm) < 1.0;
    optimizer_step(&opt, f.params, f.grads, tc.lr);
  }
  double worst_param = 0.0, worst_average = 0.0;
  for (int i = 0; i < f.layout.n_views; i++) {
    const rnnd_param_view *v = &f.layout.views[i];
    char name[128];
    snprintf(name, sizeof name, "/adam/final/%s", v->name);
    double *ref = RNND_ALLOC(double, v->numel, "reference parameters");
    if (!fixture_read_doubles(path, name, ref, v->numel)) RNND_FAIL("%s: missing %s", path, name);
    double err = relative_error(f.params + v->offset, ref, v->numel, 1e-12);
    if (err > worst_param) worst_param = err;
    snprintf(name, sizeof name, "/adam/average/%s", v->name);
    if (!fixture_read_doubles(path, name, ref, v->numel)) RNND_FAIL("%s: missing %s", path, name);
    err = relative_error(optimizer_eval_weights(&opt, f.params) + v->offset, ref, v->numel, 1e-12);
    if (err > worst_average) worst_average = err;
    free(ref);
  }
  int failed = worst_loss > LOSS_TOLERANCE || worst_param > PARAM_TOLERANCE || worst_average > PARAM_TOLERANCE ||
               clipped == 0;
  printf("%s %s: %d steps (%d clipped), worst loss relative error %.2e, final parameters %.2e, their "
         "average %.2e; loss %.5f -> %.5f\n",
         failed ? "FAIL" : "ok  ", path, STEPS, clipped, worst_loss, worst_param, worst_average, ref_losses[0],
         ref_losses[STEPS - 1]);
  batch_free(&batch);
  be->ops->destroy(be);
  optimizer_free(&opt);
  config_free(&defaults);
  fixture_free(&f);
  return failed;
}

int main(int argc, char **argv) {
  int failures = 0, first = 1, threads = 1;
  if (argc > 2 && !strcmp(argv[1], "--threads")) threads = atoi(argv[2]), first = 3;
  for (int i = first; i < argc; i++) failures += check_fixture(argv[i], threads);
  printf("%d passed, %d failed\n", argc - first - failures, failures);
  return failures || argc <= first ? 1 : 0;
}
