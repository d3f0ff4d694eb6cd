/* cpu_dnnl.c — bf16 products through oneDNN 2.x's C API (cpu_dnnl.h). */
#include "cpu_dnnl.h"

#include <stdio.h>
#include <stdlib.h>

#include "rnnd/common.h"

#ifdef RNND_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define DNNL_CHECK(call)                                                                    \
  do {                                                                                      \
    dnnl_status_t status_ = (call);                                                         \
    if (status_ != dnnl_success) RNND_FAIL("%s: oneDNN status %d", #call, (int)status_);    \
  } while (0)

struct cpu_dnnl {
  dnnl_engine_t engine;
  dnnl_primitive_t matmul[2][2][2]; /* [transpose_a][transpose_b][accumulate] */
  dnnl_stream_t *streams;           /* one per OpenMP thread */
  int n_streams;
};

/* A 2-D operand of the given type with runtime sizes and the strides of a
 * row-major matrix, transposed or not. */
static dnnl_memory_desc_t runtime_operand(dnnl_data_type_t type, int transposed) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {DNNL_RUNTIME_DIM_VAL, DNNL_RUNTIME_DIM_VAL};
  dnnl_dims_t strides = {transposed ? 1 : DNNL_RUNTIME_DIM_VAL, transposed ? DNNL_RUNTIME_DIM_VAL : 1};
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides));
  return md;
}

static dnnl_primitive_t create_matmul(dnnl_engine_t engine, int ta, int tb, int accumulate) {
  dnnl_memory_desc_t a = runtime_operand(dnnl_bf16, ta), b = runtime_operand(dnnl_bf16, tb),
                     c = runtime_operand(dnnl_f32, 0);
  dnnl_matmul_desc_t desc;
  DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c));
  dnnl_primitive_attr_t attr;
  DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  if (accumulate) {
    dnnl_post_ops_t post_ops;
    DNNL_CHECK(dnnl_post_ops_create(&post_ops));
    DNNL_CHECK(dnnl_post_ops_append_sum(post_ops, 1.0f));
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, post_ops));
    DNNL_CHECK(dnnl_post_ops_destroy(post_ops));
  }
  dnnl_primitive_desc_t pd;
  DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL));
  dnnl_primitive_t p;
  DNNL_CHECK(dnnl_primitive_create(&p, pd));
  DNNL_CHECK(dnnl_primitive_desc_destroy(pd));
  DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
  return p;
}

cpu_dnnl *cpu_dnnl_create(void) {
  cpu_dnnl *e = RNND_ALLOC(cpu_dnnl, 1, "oneDNN engine");
  DNNL_CHECK(dnnl_engine_create(&e->engine, dnnl_cpu, 0));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int acc = 0; acc < 2; acc++) e->matmul[ta][tb][acc] = create_matmul(e->engine, ta, tb, acc);
#ifdef _OPENMP
  e->n_streams = omp_get_max_threads();
#else
  e->n_streams = 1;
#endif
  e->streams = RNND_ALLOC(dnnl_stream_t, (size_t)e->n_streams, "oneDNN streams");
  for (int i = 0; i < e->n_streams; i++)
    DNNL_CHECK(dnnl_stream_create(&e->streams[i], e->engine, dnnl_stream_default_flags));
  return e;
}

void cpu_dnnl_destroy(cpu_dnnl *e) {
  if (!e) return;
  for (int i = 0; i < e->n_streams; i++) DNNL_CHECK(dnnl_stream_destroy(e->streams[i]));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int acc = 0; acc < 2; acc++) DNNL_CHECK(dnnl_primitive_destroy(e->matmul[ta][tb][acc]));
  DNNL_CHECK(dnnl_engine_destroy(e->engine));
  free(e->streams);
  free(e);
}

static const char *isa_name(dnnl_cpu_isa_t isa, int *native) {
  *native = isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
  switch (isa) {
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni (no bf16 instructions)";
  case dnnl_cpu_isa_avx512_core: return "avx512_core (no bf16 instructions)";
  case dnnl_cpu_isa_avx2: return "avx2 (no bf16 instructions)";
  default: return "an ISA without bf16 instructions";
  }
}

void cpu_dnnl_describe(const cpu_dnnl *e, char *buf, size_t size, int *native) {
  (void)e;
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, size, "oneDNN %d.%d.%d on %s", v->major, v->minor, v->patch,
           isa_name(dnnl_get_effective_cpu_isa(), native));
}

/* A row-major operand of rows x cols with leading dimension ld; transposed:
 * stored as cols x rows. */
static dnnl_memory_desc_t operand(dnnl_data_type_t type, int rows, int cols, int ld, int transposed) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {rows, cols};
  dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides));
  return md;
}

void cpu_dnnl_gemm(cpu_dnnl *e, int transpose_a, int transpose_b, int m, int n, int k, const uint16_t *a, int lda,
                   const uint16_t *b, int ldb, float *c, int ldc, float beta) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (beta == 0.0f)
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = 0.0f;
    return;
  }
  RNND_ASSERT(beta == 0.0f || beta == 1.0f);
  dnnl_memory_desc_t da = operand(dnnl_bf16, m, k, lda, transpose_a), db = operand(dnnl_bf16, k, n, ldb, transpose_b),
                     dc = operand(dnnl_f32, m, n, ldc, 0);
  dnnl_memory_t ma, mb, mc;
  DNNL_CHECK(dnnl_memory_create(&ma, &da, e->engine, (void *)a));
  DNNL_CHECK(dnnl_memory_create(&mb, &db, e->engine, (void *)b));
  DNNL_CHECK(dnnl_memory_create(&mc, &dc, e->engine, c));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
#ifdef _OPENMP
  int thread = omp_in_parallel() ? omp_get_thread_num() : 0;
#else
  int thread = 0;
#endif
  RNND_ASSERT(thread < e->n_streams);
  dnnl_stream_t stream = e->streams[thread];
  DNNL_CHECK(dnnl_primitive_execute(e->matmul[transpose_a][transpose_b][beta != 0.0f], stream, 3, args));
  DNNL_CHECK(dnnl_stream_wait(stream));
  DNNL_CHECK(dnnl_memory_destroy(ma));
  DNNL_CHECK(dnnl_memory_destroy(mb));
  DNNL_CHECK(dnnl_memory_destroy(mc));
}

#else /* no oneDNN in this build */

cpu_dnnl *cpu_dnnl_create(void) { return NULL; }
void cpu_dnnl_destroy(cpu_dnnl *e) { (void)e; }
void cpu_dnnl_describe(const cpu_dnnl *e, char *buf, size_t size, int *native) {
  (void)e;
  snprintf(buf, size, "no oneDNN in this build");
  *native = 0;
}
void cpu_dnnl_gemm(cpu_dnnl *e, int transpose_a, int transpose_b, int m, int n, int k, const uint16_t *a, int lda,
                   const uint16_t *b, int ldb, float *c, int ldc, float beta) {
  (void)e, (void)transpose_a, (void)transpose_b, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb,
      (void)c, (void)ldc, (void)beta;
  RNND_FAIL("cpu_dnnl_gemm without oneDNN in the build");
}

#endif
