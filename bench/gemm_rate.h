/* gemm_rate.h — the roofline reference of bench_train: the rate of the CPU
 * backend's own sgemm (cpu_blas.h, the same BLAS, transposes and OpenMP
 * split), or of its bf16 products through oneDNN (cpu_dnnl.h), on exactly
 * the products one training step of a model performs on a
 * given packed batch: per layer and direction the input projection, the
 * recurrent product of every time step, the two weight gradients, the input
 * gradient and the recurrent product of backward; the decoder's forward,
 * weight gradient and input gradient. Each distinct product is timed on its
 * own buffers, warm, and the rate is their total FLOPs over their total time. */
#ifndef RNND_BENCH_GEMM_RATE_H
#define RNND_BENCH_GEMM_RATE_H

#include "cpu_dnnl.h"
#include "rnnd/batch.h"
#include "rnnd/model.h"

typedef struct {
  double flops;    /* FLOPs of the step's products (2 M N K each) */
  double seconds;  /* their time at the measured rates */
  int products;    /* distinct shapes timed */
} gemm_step_rate;

/* Runs on the current OpenMP thread count (cpu_set_threads first). With
 * bf16 (not NULL) the products are timed as the bf16 path makes them:
 * bf16 operands through oneDNN (cpu_dnnl.h), fp32 out. */
gemm_step_rate gemm_rate_for_step(const rnnd_model_shape *shape, const rnnd_batch *b, cpu_dnnl *bf16);

#endif
