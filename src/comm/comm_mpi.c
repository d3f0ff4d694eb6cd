/* comm_mpi.c — the MPI communicator (comm.h). */
#include "rnnd/comm.h"

#include <limits.h>

#include "rnnd/common.h"

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

void comm_init(rnnd_comm *c, int *argc, char ***argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) MPI_CHECK(MPI_Init(argc, argv));
  c->world = MPI_COMM_WORLD;
  /* Errors come back as codes so MPI_CHECK can name the failing call. */
  MPI_CHECK(MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(c->world, &c->rank));
  MPI_CHECK(MPI_Comm_size(c->world, &c->size));
  MPI_CHECK(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node));
  MPI_CHECK(MPI_Comm_rank(c->node, &c->local_rank));
  MPI_CHECK(MPI_Comm_size(c->node, &c->local_size));
  rnnd_set_print_rank(c->rank);
}

void comm_finalize(rnnd_comm *c) {
  MPI_CHECK(MPI_Comm_free(&c->node));
  MPI_CHECK(MPI_Finalize());
}

/* MPI counts are int: large buffers go in slices. */
static void allreduce_sum(const rnnd_comm *c, void *data, size_t count, MPI_Datatype type, size_t elem) {
  if (c->size == 1) return;
  char *p = data;
  while (count > 0) {
    int n = count > (size_t)INT_MAX ? INT_MAX : (int)count;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, n, type, MPI_SUM, c->world));
    p += (size_t)n * elem;
    count -= (size_t)n;
  }
}

void comm_allreduce_sum_f32(const rnnd_comm *c, float *data, size_t count) {
  allreduce_sum(c, data, count, MPI_FLOAT, sizeof(float));
}

void comm_allreduce_sum_f64(const rnnd_comm *c, double *data, size_t count) {
  allreduce_sum(c, data, count, MPI_DOUBLE, sizeof(double));
}

void comm_broadcast(const rnnd_comm *c, void *data, size_t bytes, int root) {
  if (c->size == 1) return;
  char *p = data;
  while (bytes > 0) {
    int n = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
    MPI_CHECK(MPI_Bcast(p, n, MPI_BYTE, root, c->world));
    p += n;
    bytes -= (size_t)n;
  }
}

void comm_barrier(const rnnd_comm *c) { MPI_CHECK(MPI_Barrier(c->world)); }
