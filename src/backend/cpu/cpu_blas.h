/* cpu_blas.h — row-major sgemm shorthands used by the CPU backend, named by
 * which operand is transposed: C[M,N] = beta*C + op(A) op(B).
 *
 * Threading model of the CPU backend: the BLAS itself runs single-threaded
 * (cpu_set_threads) and all parallelism comes from one OpenMP team. Large
 * products are split into row or column panels over the team (the *_par
 * forms); the recurrent loop splits hidden units over the team. With one
 * thread pool there is no second pool spinning on the same cores. */
#ifndef RNND_CPU_BLAS_H
#define RNND_CPU_BLAS_H

#include <cblas.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Half-open share [*begin, *end) of `total` for member `id` of `count`,
 * in multiples of `align` (the last member takes the remainder). */
static inline void split_range(int total, int id, int count, int align, int *begin, int *end) {
  int units = (total + align - 1) / align;
  int per = units / count, extra = units % count;
  int first = id * per + (id < extra ? id : extra), n = per + (id < extra ? 1 : 0);
  *begin = first * align < total ? first * align : total;
  *end = (first + n) * align < total ? (first + n) * align : total;
}

static inline void gemm_raw(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float *a, int lda,
                            const float *b, int ldb, float *c, int ldc, float beta) {
  if (m > 0 && n > 0) cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* C[M,N] (+)= A[M,K] * B[N,K]^T */
static inline void gemm_nt(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                           int ldc, float beta) {
  gemm_raw(CblasNoTrans, CblasTrans, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

/* One row: c[N] (+)= a[K] * B[N,K]^T, as gemm_nt with M = 1 but without
 * packing B (sgemm packs its whole B operand on every call: for the
 * decoder of one inference row that copy is most of the time). */
static inline void gemv_nt(int n, int k, const float *a, const float *b, int ldb, float *c, float beta) {
  if (n > 0) cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, ldb, a, 1, beta, c, 1);
}

/* C[M,N] (+)= A[M,K] * B[K,N] */
static inline void gemm_nn(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                           int ldc, float beta) {
  gemm_raw(CblasNoTrans, CblasNoTrans, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

/* C[M,N] (+)= A[K,M]^T * B[K,N] */
static inline void gemm_tn(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                           int ldc, float beta) {
  gemm_raw(CblasTrans, CblasNoTrans, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

/* One product split over the OpenMP team along its longer output side. */
static inline void gemm_par(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float *a, int lda,
                            const float *b, int ldb, float *c, int ldc, float beta) {
#ifdef _OPENMP
  if ((double)m * n * k < 1e6 || omp_get_max_threads() == 1) {
    gemm_raw(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
    return;
  }
#pragma omp parallel
  {
    int id = omp_get_thread_num(), count = omp_get_num_threads(), begin, end;
    if (m >= n) {
      split_range(m, id, count, 16, &begin, &end);
      const float *a_part = ta == CblasNoTrans ? a + (long)begin * lda : a + begin;
      gemm_raw(ta, tb, end - begin, n, k, a_part, lda, b, ldb, c + (long)begin * ldc, ldc, beta);
    } else {
      split_range(n, id, count, 16, &begin, &end);
      const float *b_part = tb == CblasNoTrans ? b + begin : b + (long)begin * ldb;
      gemm_raw(ta, tb, m, end - begin, k, a, lda, b_part, ldb, c + begin, ldc, beta);
    }
  }
#else
  gemm_raw(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
#endif
}

static inline void gemm_nt_par(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                               int ldc, float beta) {
  gemm_par(CblasNoTrans, CblasTrans, m, n, k, a, lda, b, ldb, c, ldc, beta);
}
static inline void gemm_nn_par(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                               int ldc, float beta) {
  gemm_par(CblasNoTrans, CblasNoTrans, m, n, k, a, lda, b, ldb, c, ldc, beta);
}
static inline void gemm_tn_par(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                               int ldc, float beta) {
  gemm_par(CblasTrans, CblasNoTrans, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

#endif
