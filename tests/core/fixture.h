/* fixture.h — helpers for the C tests that read PyTorch fixtures written by
 * tests/torch_reference.py: load the fixture's data set and model, make one
 * batch of pieces, read float64 reference arrays, compare with a relative
 * error. Used only by tests. */
#ifndef RNND_TEST_FIXTURE_H
#define RNND_TEST_FIXTURE_H

#include <hdf5.h>

#include "rnnd/backend.h"
#include "rnnd/dataset.h"
#include "rnnd/model.h"
#include "rnnd/sampler.h"

typedef struct {
  rnnd_dataset data;
  rnnd_layout layout;
  int max_len;
  float *params;
  float *grads;
  rnnd_sampler sampler; /* all pieces, max_len from the fixture */
  rnnd_piece *pieces;   /* [sampler.n_pieces] every piece (sampler_piece), for one-batch tests */
} fixture;

void fixture_load(fixture *f, const char *path);
void fixture_free(fixture *f);
/* Reads a float64 dataset of `count` values; returns 0 if it is missing. */
int fixture_read_doubles(const char *path, const char *name, double *out, size_t count);
/* max|a - b| / max(max|b|, floor). */
double relative_error(const float *a, const double *b, size_t n, double floor);
/* The worst relative error of grads against /reference/grad/NAME over every
 * parameter view (*worst_name names it); prints a FAIL line for each view
 * above tolerance. */
double fixture_worst_gradient_error(const fixture *f, const char *path, const float *grads, double tolerance,
                                    const char **worst_name);
/* threads: CPU threads of the backend (0 = all). */
rnnd_backend *fixture_backend(const fixture *f, int max_pieces, int threads);

#endif
