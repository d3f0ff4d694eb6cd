/* gemm_rate.c — see gemm_rate.h. */
#include "gemm_rate.h"

#include <stdlib.h>

#include "cpu_blas.h"
#include "rnnd/common.h"
#include "rnnd/half.h"

#define MAX_PRODUCTS 512
#define MIN_SECONDS 0.02

typedef struct {
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
  int parallel; /* 1: gemm_*_par; 2: split by output columns over the team always (the recurrent loop's
                   split of hidden units); 0: one call */
  double count; /* times per step */
} product;

typedef struct {
  product p[MAX_PRODUCTS];
  int n;
} inventory;

static void add(inventory *inv, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, int parallel) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  for (int i = 0; i < inv->n; i++) {
    product *q = &inv->p[i];
    if (q->ta == ta && q->tb == tb && q->m == m && q->n == n && q->k == k && q->parallel == parallel) {
      q->count += 1.0;
      return;
    }
  }
  if (inv->n == MAX_PRODUCTS) RNND_FAIL("gemm_rate: more than %d distinct products", MAX_PRODUCTS);
  inv->p[inv->n++] = (product){ta, tb, m, n, k, parallel, 1.0};
}

/* The products of cpu_rnn.c and cpu_backend.c for one step on batch b. */
static void build_inventory(inventory *inv, const rnnd_model_shape *s, const rnnd_batch *b) {
  const int G = (s->cell == RNND_CELL_LSTM ? 4 : 3) * s->hidden, H = s->hidden, T = (int)b->n_tokens;
  const int top = s->hidden * s->directions;
  for (int l = 0; l < s->layers; l++) {
    int E = l == 0 ? s->embed : top;
    for (int dir = 0; dir < s->directions; dir++) {
      add(inv, CblasNoTrans, CblasTrans, T, G, E, 1);           /* input projection */
      for (int t = 1; t < b->n_steps; t++) {                     /* recurrent: pieces that carry state */
        add(inv, CblasNoTrans, CblasTrans, b->batch_sizes[t], G, H, 2);
        add(inv, CblasNoTrans, CblasNoTrans, b->batch_sizes[t], H, G, 2);
      }
      add(inv, CblasTrans, CblasNoTrans, G, H, T, 1);           /* dW_hh */
      add(inv, CblasTrans, CblasNoTrans, G, E, T, 1);           /* dW_ih */
      add(inv, CblasNoTrans, CblasNoTrans, T, E, G, 1);         /* dX */
    }
  }
  add(inv, CblasNoTrans, CblasTrans, T, s->vocab_size, top, 1);   /* logits */
  add(inv, CblasTrans, CblasNoTrans, s->vocab_size, top, T, 1);   /* decoder dW */
  add(inv, CblasNoTrans, CblasNoTrans, T, top, s->vocab_size, 1); /* dY */
}

/* Deterministic values in [-0.5, 0.5) for the operands. */
static float operand_value(size_t i) { return (float)((i * 2654435761u) % 1000u) * 1e-3f - 0.5f; }

static float *random_matrix(size_t n) {
  float *x = rnnd_malloc(n * sizeof(float), "gemm_rate buffer");
  for (size_t i = 0; i < n; i++) x[i] = operand_value(i);
  return x;
}

/* This thread's block of n output columns (inside a parallel region). */
static void my_columns(int n, int *begin, int *end) {
  int id = 0, count = 1;
#ifdef _OPENMP
  id = omp_get_thread_num();
  count = omp_get_num_threads();
#endif
  split_range(n, id, count, 16, begin, end);
}

/* The recurrent loop's way: every thread takes a block of output columns. */
static void gemm_columns(const product *q, const float *a, int lda, const float *b, int ldb, float *c) {
#pragma omp parallel
  {
    int begin, end;
    my_columns(q->n, &begin, &end);
    const float *b_part = q->tb == CblasNoTrans ? b + begin : b + (long)begin * ldb;
    gemm_raw(q->ta, q->tb, q->m, end - begin, q->k, a, lda, b_part, ldb, c + begin, q->n, 1.0f);
  }
}

static uint16_t *random_bf16(size_t n) {
  uint16_t *x = rnnd_malloc(n * sizeof(uint16_t), "gemm_rate buffer");
  for (size_t i = 0; i < n; i++) x[i] = rnnd_f32_to_bf16(operand_value(i));
  return x;
}

/* The same products in bf16 through oneDNN: whole ones from outside a
 * parallel region (oneDNN splits them), the recurrent ones by column blocks
 * from inside the team, as cpu_rnn.c makes them. */
static void bf16_call(cpu_dnnl *e, const product *q, const uint16_t *a, int lda, const uint16_t *b, int ldb,
                      float *c) {
  const int ta = q->ta != CblasNoTrans, tb = q->tb != CblasNoTrans;
  if (q->parallel != 2) {
    cpu_dnnl_gemm(e, ta, tb, q->m, q->n, q->k, a, lda, b, ldb, c, q->n, 1.0f);
    return;
  }
#pragma omp parallel
  {
    int begin, end;
    my_columns(q->n, &begin, &end);
    const uint16_t *b_part = tb ? b + (long)begin * ldb : b + begin;
    cpu_dnnl_gemm(e, ta, tb, q->m, end - begin, q->k, a, lda, b_part, ldb, c + begin, q->n, 1.0f);
  }
}

static void fp32_call(const product *q, const float *a, int lda, const float *b, int ldb, float *c) {
  if (q->parallel == 2) gemm_columns(q, a, lda, b, ldb, c);
  else if (q->parallel) gemm_par(q->ta, q->tb, q->m, q->n, q->k, a, lda, b, ldb, c, q->n, 1.0f);
  else gemm_raw(q->ta, q->tb, q->m, q->n, q->k, a, lda, b, ldb, c, q->n, 1.0f);
}

/* Seconds per call of one product (warm, repeated for MIN_SECONDS). */
static double time_product(const product *q, cpu_dnnl *bf16) {
  int rows_a = q->ta == CblasNoTrans ? q->m : q->k, cols_a = q->ta == CblasNoTrans ? q->k : q->m;
  int rows_b = q->tb == CblasNoTrans ? q->k : q->n, cols_b = q->tb == CblasNoTrans ? q->n : q->k;
  float *a = random_matrix((size_t)rows_a * cols_a), *b = random_matrix((size_t)rows_b * cols_b);
  uint16_t *a16 = bf16 ? random_bf16((size_t)rows_a * cols_a) : NULL, *b16 = bf16 ? random_bf16((size_t)rows_b * cols_b)
                                                                                 : NULL;
  float *c = random_matrix((size_t)q->m * q->n);
  int calls = 0;
  double start = 0.0, now = 0.0;
  for (int round = 0; round < 2; round++) { /* round 0 warms caches and the team */
    start = rnnd_now();
    calls = 0;
    do {
      if (bf16) bf16_call(bf16, q, a16, cols_a, b16, cols_b, c);
      else fp32_call(q, a, cols_a, b, cols_b, c);
      calls++;
      now = rnnd_now();
    } while (now - start < (round ? MIN_SECONDS : MIN_SECONDS / 4));
  }
  free(a);
  free(b);
  free(a16);
  free(b16);
  free(c);
  return (now - start) / calls;
}

gemm_step_rate gemm_rate_for_step(const rnnd_model_shape *shape, const rnnd_batch *b, cpu_dnnl *bf16) {
  inventory *inv = RNND_ALLOC(inventory, 1, "gemm inventory");
  build_inventory(inv, shape, b);
  gemm_step_rate r = {0.0, 0.0, inv->n};
  for (int i = 0; i < inv->n; i++) {
    const product *q = &inv->p[i];
    r.flops += q->count * 2.0 * q->m * q->n * q->k;
    r.seconds += q->count * time_product(q, bf16);
  }
  free(inv);
  return r;
}
