/* common.c — see common.h. The only process-wide state here is
 * process_info: the program name and the print rank, both written once at
 * start-up, the path of an output file being written (so an error exit
 * removes it instead of leaving half a file behind), and, in fuzz targets
 * only, where an input error jumps to instead of exiting; and the message
 * and state of the bounded-read alarm (rnnd_reading_begin). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/common.h"

#include <errno.h>
#include <mpi.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
  const char *program_name;
  int print_rank;
  char partial_output[4200]; /* "" when none */
  jmp_buf *input_error_trap;  /* fuzz targets only */
  char reading_message[4400]; /* bounded reads: written before the alarm, only read by its handler */
  int reading_armed;          /* only disarm what we armed: a fuzzer's own timer shares SIGALRM */
} process_info = {"rnn_dist", 0, "", NULL, "", 0};

void rnnd_set_input_error_trap(jmp_buf *trap) { process_info.input_error_trap = trap; }

/* --- bounded reads ---------------------------------------------------------- */


static void reading_took_too_long(int signal_number) {
  (void)signal_number;
  ssize_t ignored = write(STDERR_FILENO, process_info.reading_message, strlen(process_info.reading_message));
  (void)ignored;
  _exit(RNND_EXIT_INPUT);
}

void rnnd_reading_begin(const char *path) {
  const char *env = getenv("RNND_READ_TIMEOUT_S");
  unsigned seconds = env ? (unsigned)atoi(env) : RNND_READ_TIMEOUT_S;
  if (seconds == 0 || process_info.input_error_trap) return;
  snprintf(process_info.reading_message, sizeof process_info.reading_message,
           "%s: error: %s: reading did not finish in %u s (a corrupt HDF5 file can make the library loop; "
           "RNND_READ_TIMEOUT_S raises the bound)\n", process_info.program_name, path, seconds);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = reading_took_too_long;
  sigaction(SIGALRM, &action, NULL);
  alarm(seconds);
  process_info.reading_armed = 1;
}

void rnnd_reading_end(void) {
  if (!process_info.reading_armed) return;
  alarm(0);
  process_info.reading_armed = 0;
}

void rnnd_set_partial_output(const char *path) {
  snprintf(process_info.partial_output, sizeof process_info.partial_output, "%s", path ? path : "");
}

void rnnd_set_program_name(const char *name) { process_info.program_name = name; }
const char *rnnd_program_name(void) { return process_info.program_name; }
void rnnd_set_print_rank(int rank) { process_info.print_rank = rank; }
int rnnd_print_rank(void) { return process_info.print_rank; }

/* With several ranks a plain exit() on one rank would leave the others
 * blocked in a collective, so abort the whole job instead. */
RNND_NORETURN static void exit_everywhere(int code) {
  if (process_info.partial_output[0]) unlink(process_info.partial_output);
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
  }
  exit(code);
}

void rnnd_input_error(const char *fmt, ...) {
  char message[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  if (process_info.input_error_trap) longjmp(*process_info.input_error_trap, 1);
  fflush(stdout);
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* In a job of several ranks, say which one failed: its input may differ. */
  if (size > 1)
    fprintf(stderr, "%s: error (rank %d of %d): %s\n", process_info.program_name, process_info.print_rank, size,
            message);
  else
    fprintf(stderr, "%s: error: %s\n", process_info.program_name, message);
  fflush(stderr);
  exit_everywhere(RNND_EXIT_INPUT);
}

void rnnd_internal_error(const char *file, int line, const char *fmt, ...) {
  char message[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  fflush(stdout);
  fprintf(stderr, "%s: internal error (rank %d) at %s:%d: %s\n", process_info.program_name,
          process_info.print_rank, file, line, message);
  fflush(stderr);
  if (process_info.input_error_trap) abort(); /* bad input must never reach an internal error: a finding */
  exit_everywhere(RNND_EXIT_INTERNAL);
}

void rnnd_print0(const char *fmt, ...) {
  if (process_info.print_rank != 0) return;
  va_list args;
  va_start(args, fmt);
  vprintf(fmt, args);
  va_end(args);
  fflush(stdout);
}

void rnnd_warn0(const char *fmt, ...) {
  if (process_info.print_rank != 0) return;
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "%s: warning: ", process_info.program_name);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
  fflush(stderr);
}

void *rnnd_calloc(size_t count, size_t size, const char *what) {
  if (count == 0 || size == 0) count = size = 1;
  void *p = calloc(count, size);
  if (!p) RNND_FAIL("out of memory allocating %zu x %zu bytes for %s", count, size, what);
  return p;
}

void *rnnd_malloc(size_t size, const char *what) {
  void *p = malloc(size ? size : 1);
  if (!p) RNND_FAIL("out of memory allocating %zu bytes for %s", size, what);
  return p;
}

char *rnnd_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = rnnd_malloc(n, "string");
  memcpy(copy, s, n);
  return copy;
}

double rnnd_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long long rnnd_parse_integer(const char *option, const char *value, long long min, long long max) {
  char *end;
  errno = 0;
  long long v = strtoll(value, &end, 10);
  if (end == value || *end || errno || v < min || v > max)
    rnnd_input_error("%s '%s': expected an integer in %lld..%lld", option, value, min, max);
  return v;
}
