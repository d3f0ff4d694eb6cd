/* cpu_dnnl.h — bf16 products for the CPU backend through oneDNN's matmul
 * primitive: C[M,N] = op(A) op(B) (+ C when beta is 1), A and B bf16 words,
 * C fp32, accumulation in fp32; row-major with leading dimensions and named
 * like cpu_blas.h (nt: B transposed, nn, tn: A transposed).
 *
 * One primitive per (transposes, accumulate), with every size and stride
 * given at run time (oneDNN's jit gemm), is created with the engine, so no
 * shape ever pays for a primitive's creation. A call may come from inside
 * an OpenMP parallel region (it then runs on its own thread, on that
 * thread's stream; concurrent calls are safe: these primitives use no
 * scratchpad) or from outside (oneDNN then uses the whole team).
 *
 * Ownership: cpu_dnnl_create makes the engine, the primitives and a stream
 * per OpenMP thread; cpu_dnnl_destroy frees them. Without oneDNN in the
 * build cpu_dnnl_create returns NULL and the backend computes in fp32. */
#ifndef RNND_CPU_DNNL_H
#define RNND_CPU_DNNL_H

#include <stddef.h>
#include <stdint.h>

typedef struct cpu_dnnl cpu_dnnl;

/* NULL when this build has no oneDNN. */
cpu_dnnl *cpu_dnnl_create(void);
void cpu_dnnl_destroy(cpu_dnnl *e);
/* What the products run on, for the start-up line ("oneDNN 2.6.3 on
 * avx512_core_bf16"); *native is 0 where the CPU has no bf16 instructions
 * (oneDNN then converts in software, slower than fp32). */
void cpu_dnnl_describe(const cpu_dnnl *e, char *buf, size_t size, int *native);

void cpu_dnnl_gemm(cpu_dnnl *e, int transpose_a, int transpose_b, int m, int n, int k, const uint16_t *a, int lda,
                   const uint16_t *b, int ldb, float *c, int ldc, float beta);

/* C[M,N] (+)= A[M,K] * B[N,K]^T */
static inline void bf16_gemm_nt(cpu_dnnl *e, int m, int n, int k, const uint16_t *a, int lda, const uint16_t *b,
                                int ldb, float *c, int ldc, float beta) {
  cpu_dnnl_gemm(e, 0, 1, m, n, k, a, lda, b, ldb, c, ldc, beta);
}
/* C[M,N] (+)= A[M,K] * B[K,N] */
static inline void bf16_gemm_nn(cpu_dnnl *e, int m, int n, int k, const uint16_t *a, int lda, const uint16_t *b,
                                int ldb, float *c, int ldc, float beta) {
  cpu_dnnl_gemm(e, 0, 0, m, n, k, a, lda, b, ldb, c, ldc, beta);
}
/* C[M,N] (+)= A[K,M]^T * B[K,N] */
static inline void bf16_gemm_tn(cpu_dnnl *e, int m, int n, int k, const uint16_t *a, int lda, const uint16_t *b,
                                int ldb, float *c, int ldc, float beta) {
  cpu_dnnl_gemm(e, 1, 0, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

#endif
