/* cpu_blas.h — row-major sgemm shorthands used by the CPU backend, named by
 * which operand is transposed: C[M,N] = beta*C + op(A) op(B). */
#ifndef RNND_CPU_BLAS_H
#define RNND_CPU_BLAS_H

#include <cblas.h>

/* C[M,N] (+)= A[M,K] * B[N,K]^T */
static inline void gemm_nt(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                           int ldc, float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* C[M,N] (+)= A[M,K] * B[K,N] */
static inline void gemm_nn(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                           int ldc, float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* C[M,N] (+)= A[K,M]^T * B[K,N] */
static inline void gemm_tn(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                           int ldc, float beta) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

#endif
