/* gpu_compare.h — what the GPU tests share: how a tensor's disagreement
 * with the CPU reference is measured (max |a - b| over the tensor, relative
 * to max |b|), the tally of named checks, and the command line that runs
 * one named case per process, so that ctest reports every case on its own
 * and one failure does not hide the next:
 *
 *   PROGRAM --case NAME [--case NAME]... [--cpu-standin]
 *   PROGRAM --list
 *
 * --cpu-standin puts a CPU backend (and the host step) where the GPU's
 * would be: the comparisons then run here, which checks each case's
 * harness and expectations on machines without a GPU. Without it and
 * without a CUDA device the program prints "SKIPPED: no CUDA device" and
 * exits 77, which ctest counts as skipped. */
#ifndef RNND_TESTS_GPU_COMPARE_H
#define RNND_TESTS_GPU_COMPARE_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/cuda_backend.h"

#define GPU_SKIP_CODE 77

static inline double tensor_error(const float *a, const float *b, size_t n) {
  double diff = 0.0, scale = 1e-30;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    scale = fmax(scale, fabs((double)b[i]));
  }
  return diff / scale;
}

static inline double relative_error(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* The run's tally and what it tests with. */
typedef struct {
  int checks, failures;
  int cpu_standin;
  /* the backend under test: the CUDA one, or the CPU standing in for it */
  rnnd_backend *(*create_tested)(const rnnd_layout *, const rnnd_backend_capacity *);
} gpu_test;

static inline void expect(gpu_test *t, int ok, const char *what, double value, double limit) {
  t->checks++;
  printf("%s %-72s %.3g (limit %.0e)\n", ok ? "ok  " : "FAIL", what, value, limit);
  if (!ok) t->failures++;
}

/* The worst tensor_error over the layout's views; its name into *worst_name. */
static inline double worst_view_error(const rnnd_layout *layout, const float *tested, const float *reference,
                                      const char **worst_name) {
  double worst = 0.0;
  *worst_name = "";
  for (int v = 0; v < layout->n_views; v++) {
    const rnnd_param_view *view = &layout->views[v];
    double e = tensor_error(tested + view->offset, reference + view->offset, view->numel);
    if (e > worst) {
      worst = e;
      *worst_name = view->name;
    }
  }
  return worst;
}

/* Runs the cases named on the command line through run_case(t, name),
 * which returns 0 for a name it does not know; --list prints every name
 * (list_cases). Returns the exit code. */
static inline int gpu_test_main(int argc, char **argv, const char *program, void (*list_cases)(void),
                                int (*run_case)(gpu_test *, const char *)) {
  rnnd_set_program_name(program);
  gpu_test t = {0, 0, 0, cuda_backend_create};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cpu-standin")) t.cpu_standin = 1;
    if (!strcmp(argv[i], "--list")) {
      list_cases();
      return 0;
    }
  }
  if (t.cpu_standin) {
    t.create_tested = cpu_backend_create;
    printf("device: the CPU backend standing in for the GPU\n");
  } else if (cuda_device_count() == 0) {
    printf("SKIPPED: no CUDA device\n");
    return GPU_SKIP_CODE;
  } else {
    char name[160];
    cuda_device_bind(0, name, sizeof name);
    printf("device: %s\n", name);
  }
  int cases = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--case")) continue;
    if (i + 1 >= argc) rnnd_input_error("--case: missing name");
    const char *name = argv[++i];
    cases++;
    if (!run_case(&t, name)) rnnd_input_error("--case: no case named '%s' (see --list)", name);
  }
  if (!cases) rnnd_input_error("usage: %s --case NAME [--case NAME]... [--cpu-standin] | --list", program);
  printf("%d passed, %d failed\n", t.checks - t.failures, t.failures);
  return t.failures ? 1 : 0;
}

#endif
