#define _POSIX_C_SOURCE 200809L
/* cpu_blas_info.c — BLAS threading and detection of OpenBLAS's silent
 * fallback to generic kernels. The OpenBLAS entry points are weak so any
 * CBLAS links; they are simply skipped when absent. */
#include <string.h>
#include <strings.h>
#include <strings.h>

#include "rnnd/backend.h"

#ifdef _OPENMP
#include <omp.h>
#endif

extern void openblas_set_num_threads(int threads) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

/* The BLAS runs single-threaded inside our OpenMP team (cpu_blas.h). */
void cpu_set_threads(int threads) {
  if (openblas_set_num_threads) openblas_set_num_threads(1);
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

/* OpenBLAS core names whose kernels use AVX2 (or better). */
static int core_uses_avx2(const char *core) {
  static const char *const fast[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
  for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++)
    if (!strcasecmp(core, fast[i])) return 1;
  return 0;
}

const char *cpu_blas_advice(const char **core) {
  *core = openblas_get_corename ? openblas_get_corename() : "unknown (not OpenBLAS)";
  if (!openblas_get_corename) return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && !core_uses_avx2(*core)) {
    if (__builtin_cpu_supports("avx512f"))
      return "OpenBLAS did not recognise this CPU and runs generic kernels (about 5x slower); "
             "set OPENBLAS_CORETYPE=SkylakeX before starting rnn_dist";
    return "OpenBLAS did not recognise this CPU and runs generic kernels (about 5x slower); "
           "set OPENBLAS_CORETYPE=Haswell before starting rnn_dist";
  }
#endif
  return NULL;
}
