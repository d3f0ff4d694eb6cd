/* comm_mpi.c — the MPI communicator (comm.h). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "rnnd/comm.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/watchdog.h"

static void check_mpi(int code, const char *call, const char *file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0, rank = -1;
  MPI_Error_string(code, text, &length);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "rnn_dist: MPI error on rank %d at %s:%d: %s: %s\n", rank, file, line, call, text);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, RNND_EXIT_INTERNAL);
}
#define MPI_CHECK(call) check_mpi((call), #call, __FILE__, __LINE__)
/* A blocking collective, under the watchdog (comm.timeout_s). */
#define COLLECTIVE(c, name, call)                 \
  do {                                            \
    watchdog_enter((c)->watchdog, name);          \
    MPI_CHECK(call);                              \
    watchdog_leave((c)->watchdog);                \
  } while (0)

/* MPI_User_function: inout[i] = round16(in[i] + inout[i]), the sum in fp32. */
static void sum_f16_words(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = rnnd_f32_to_f16(rnnd_f16_to_f32(a[i]) + rnnd_f16_to_f32(b[i]));
}

static void sum_bf16_words(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = rnnd_f32_to_bf16(rnnd_bf16_to_f32(a[i]) + rnnd_bf16_to_f32(b[i]));
}

/* The gradient buckets go through MPI_Iallreduce on in-place buffers, for
 * which Open MPI's libnbc picks a binomial tree (reduce, then broadcast):
 * each byte crosses the busiest link 2 log2(p) times, where a ring needs
 * 2 (p-1)/p. Measured on the emulated cluster at 1 Gbit/s (docs/scaling.md),
 * 15 MB took 265 ms with the tree and 137 ms with the ring on 2 nodes, 663
 * and 216 ms on 4. So ask for the ring, unless the environment already
 * chooses (a user's setting wins); other MPIs ignore the variable. Read by
 * MPI_Init, so set before it. */
static void prefer_ring_allreduce(void) { setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0); }

void comm_init(rnnd_comm *c, int *argc, char ***argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    prefer_ring_allreduce();
    MPI_CHECK(MPI_Init(argc, argv));
  }
  c->world = MPI_COMM_WORLD;
  /* Errors come back as codes so MPI_CHECK can name the failing call. */
  MPI_CHECK(MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(c->world, &c->rank));
  MPI_CHECK(MPI_Comm_size(c->world, &c->size));
  MPI_CHECK(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node));
  MPI_CHECK(MPI_Comm_rank(c->node, &c->local_rank));
  MPI_CHECK(MPI_Comm_size(c->node, &c->local_size));
  /* Commutative: a + b and b + a round alike, so every rank ends bitwise equal. */
  MPI_CHECK(MPI_Op_create(sum_f16_words, 1, &c->sum_f16));
  MPI_CHECK(MPI_Op_create(sum_bf16_words, 1, &c->sum_bf16));
  c->watchdog = NULL;
  rnnd_set_print_rank(c->rank);
}

void comm_set_timeout(rnnd_comm *c, double timeout_s) {
  watchdog_stop(c->watchdog);
  c->watchdog = c->size > 1 ? watchdog_start(c->rank, timeout_s) : NULL;
}

void comm_finalize(rnnd_comm *c) {
  watchdog_stop(c->watchdog);
  c->watchdog = NULL;
  MPI_CHECK(MPI_Op_free(&c->sum_f16));
  MPI_CHECK(MPI_Op_free(&c->sum_bf16));
  MPI_CHECK(MPI_Comm_free(&c->node));
  MPI_CHECK(MPI_Finalize());
}

static void wire_type(const rnnd_comm *c, rnnd_dtype t, MPI_Datatype *type, MPI_Op *op, size_t *elem) {
  switch (t) {
    case RNND_DTYPE_F16: *type = MPI_UINT16_T, *op = c->sum_f16, *elem = 2; break;
    case RNND_DTYPE_BF16: *type = MPI_UINT16_T, *op = c->sum_bf16, *elem = 2; break;
    default: *type = MPI_FLOAT, *op = MPI_SUM, *elem = 4; break;
  }
}

/* MPI counts are int: large buffers go in slices. */
static void allreduce_slices(const rnnd_comm *c, void *data, size_t count, MPI_Datatype type, MPI_Op op,
                             size_t elem) {
  if (c->size == 1) return;
  char *p = data;
  while (count > 0) {
    int n = count > (size_t)INT_MAX ? INT_MAX : (int)count;
    COLLECTIVE(c, "MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, p, n, type, op, c->world));
    p += (size_t)n * elem;
    count -= (size_t)n;
  }
}

void comm_allreduce_sum(const rnnd_comm *c, void *data, size_t count, rnnd_dtype t) {
  MPI_Datatype type;
  MPI_Op op;
  size_t elem;
  wire_type(c, t, &type, &op, &elem);
  allreduce_slices(c, data, count, type, op, elem);
}

MPI_Request comm_allreduce_sum_start(const rnnd_comm *c, void *data, size_t count, rnnd_dtype t) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (c->size == 1 || count == 0) return request;
  RNND_ASSERT(count <= (size_t)INT_MAX);
  MPI_Datatype type;
  MPI_Op op;
  size_t elem;
  wire_type(c, t, &type, &op, &elem);
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, (int)count, type, op, c->world, &request));
  return request;
}

void comm_wait(const rnnd_comm *c, MPI_Request *request) {
  COLLECTIVE(c, "MPI_Wait (gradient all-reduce)", MPI_Wait(request, MPI_STATUS_IGNORE));
}

void comm_allreduce_sum_f32(const rnnd_comm *c, float *data, size_t count) {
  allreduce_slices(c, data, count, MPI_FLOAT, MPI_SUM, sizeof(float));
}

void comm_allreduce_sum_f64(const rnnd_comm *c, double *data, size_t count) {
  allreduce_slices(c, data, count, MPI_DOUBLE, MPI_SUM, sizeof(double));
}

double comm_allreduce_max_f64(const rnnd_comm *c, double value) {
  if (c->size > 1) COLLECTIVE(c, "MPI_Allreduce (max)", MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, c->world));
  return value;
}

void comm_allgather_u64(const rnnd_comm *c, uint64_t value, uint64_t *out) {
  COLLECTIVE(c, "MPI_Allgather", MPI_Allgather(&value, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, c->world));
}

void comm_gather_places(const rnnd_comm *c, rnnd_rank_place *out) {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &length));
  rnnd_rank_place mine = {.local_rank = c->local_rank, .local_size = c->local_size};
  /* a longer name is cut: it only labels a line of the start-up report */
  memcpy(mine.host, name, (size_t)length < sizeof mine.host - 1 ? (size_t)length : sizeof mine.host - 1);
  COLLECTIVE(c, "MPI_Allgather",
             MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, out, (int)sizeof mine, MPI_BYTE, c->world));
}

void comm_broadcast(const rnnd_comm *c, void *data, size_t bytes, int root) {
  if (c->size == 1) return;
  char *p = data;
  while (bytes > 0) {
    int n = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
    COLLECTIVE(c, "MPI_Bcast", MPI_Bcast(p, n, MPI_BYTE, root, c->world));
    p += n;
    bytes -= (size_t)n;
  }
}

void comm_barrier(const rnnd_comm *c) { COLLECTIVE(c, "MPI_Barrier", MPI_Barrier(c->world)); }

void comm_abort(const rnnd_comm *c, int code) {
  fflush(stdout);
  fflush(stderr);
  if (c->size > 1) MPI_Abort(c->world, code);
  MPI_Finalize();
  exit(code);
}
