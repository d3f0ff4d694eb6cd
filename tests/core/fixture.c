/* fixture.c — see fixture.h. */
#include "fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"
#include "rnnd/model_file.h"

void fixture_load(fixture *f, const char *path) {
  memset(f, 0, sizeof *f);
  dataset_load(&f->data, path, 0);
  rnnd_model_shape shape;
  model_file_read_shape(path, &shape, &f->max_len);
  if (shape.task == RNND_TASK_REGRESS && !f->data.n_features) RNND_FAIL("%s: a forecaster's fixture without series", path);
  model_layout_init(&f->layout, &shape);
  f->params = RNND_ALLOC(float, f->layout.numel, "params");
  f->grads = RNND_ALLOC(float, f->layout.numel, "grads");
  model_file_load_params(path, &f->layout, f->params);
  rnnd_sampler_options options = sampler_eval_options(f->max_len, 1 << 20);
  options.whole_sequences = shape.task == RNND_TASK_CLASSIFY;
  sampler_init(&f->sampler, &f->data, &options);
  f->pieces = RNND_ALLOC(rnnd_piece, f->sampler.n_pieces, "fixture pieces");
  for (int64_t i = 0; i < f->sampler.n_pieces; i++) f->pieces[i] = sampler_piece(&f->sampler, i);
}

void fixture_free(fixture *f) {
  sampler_free(&f->sampler);
  free(f->pieces);
  free(f->params);
  free(f->grads);
  dataset_free(&f->data);
}

rnnd_backend *fixture_backend(const fixture *f, int max_pieces, int threads) {
  rnnd_backend_capacity cap = {.max_pieces = max_pieces, .max_steps = f->sampler.largest_batch_steps,
                               .threads = threads, .storage = RNND_DTYPE_F32};
  for (int64_t i = 0; i < f->sampler.n_pieces; i++) cap.max_tokens += f->pieces[i].length;
  return cpu_backend_create(&f->layout, &cap);
}

int fixture_read_doubles(const char *path, const char *name, double *out, size_t count) {
  hid_t file = h5_open_read(path);
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) {
    /* intermediate groups may be missing too */
    H5Fclose(file);
    return 0;
  }
  hid_t set = h5_check(H5Dopen2(file, name, H5P_DEFAULT), path, name);
  hid_t space = H5Dget_space(set);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if ((size_t)n != count) RNND_FAIL("%s: %s has %lld values, expected %zu", path, name, (long long)n, count);
  h5_check(H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), path, name);
  H5Sclose(space);
  H5Dclose(set);
  H5Fclose(file);
  return 1;
}

double relative_error(const float *a, const double *b, size_t n, double floor) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > max_diff || isnan(d)) max_diff = isnan(d) ? INFINITY : d;
    if (fabs(b[i]) > max_ref) max_ref = fabs(b[i]);
  }
  return max_diff / (max_ref > floor ? max_ref : floor);
}

double fixture_worst_gradient_error(const fixture *f, const char *path, const float *grads, double tolerance,
                                    const char **worst_name) {
  double worst = 0.0;
  *worst_name = "none";
  for (int i = 0; i < f->layout.n_views; i++) {
    const rnnd_param_view *v = &f->layout.views[i];
    char name[128];
    snprintf(name, sizeof name, "/reference/grad/%s", v->name);
    double *ref = RNND_ALLOC(double, v->numel, "reference gradient");
    if (!fixture_read_doubles(path, name, ref, v->numel)) RNND_FAIL("%s: missing %s", path, name);
    double err = relative_error(grads + v->offset, ref, v->numel, 1e-12);
    if (err > tolerance) printf("  FAIL %s: %s relative error %.3e\n", path, v->name, err);
    if (err > worst) worst = err, *worst_name = v->name;
    free(ref);
  }
  return worst;
}
