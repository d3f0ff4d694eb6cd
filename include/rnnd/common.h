/* common.h — error handling, checked allocation and rank-0 printing shared by
 * every layer of rnn_dist.
 *
 * Conventions used throughout the code base:
 *  - Bad input (config, data set, model file, command line) is reported with
 *    rnnd_input_error(): one line on stderr "rnn_dist: error: WHERE: WHAT",
 *    exit code 2 (RNND_EXIT_INPUT). In an MPI job with several ranks the whole
 *    job is aborted with the same code so no rank is left waiting.
 *  - Internal failures of a library call (HDF5, MPI, BLAS, malloc) go through
 *    the CHECK-style macros below and exit with code 1.
 *  - Whoever calls an *_init / *_load / *_create function owns the result and
 *    releases it with the matching *_free / *_destroy. */
#ifndef RNND_COMMON_H
#define RNND_COMMON_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RNND_EXIT_OK 0
#define RNND_EXIT_INTERNAL 1
#define RNND_EXIT_INPUT 2

/* Put before the inner loop of a fixed-lane reduction (`for (l = 0; l <
 * LANES; l++) lane[l] += ...`): it keeps that loop a loop, which GCC's loop
 * vectoriser then turns into vector code. Fully unrolled (its default for so
 * short a loop) it is left to the basic-block vectoriser, which misses many
 * such bodies (maxima, mixed float/double, counts) and leaves them scalar. */
#define RNND_LANE_LOOP _Pragma("GCC unroll 1")

#if defined(__GNUC__)
#define RNND_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define RNND_NORETURN __attribute__((noreturn))
#else
#define RNND_PRINTF(f, a)
#define RNND_NORETURN
#endif

/* Program name printed in front of every error line ("rnn_dist", "rnn_prep"). */
void rnnd_set_program_name(const char *name);
const char *rnnd_program_name(void);

/* The output file being written (a .tmp published by rename): an error exit
 * removes it, so no half-written file stays behind. NULL: none. */
void rnnd_set_partial_output(const char *path);

/* A bound on reading one input file (data set, checkpoint, model file):
 * HDF5 1.10 can loop forever on some corrupt files (found by fuzzing,
 * tests/fuzz/README.md). Past RNND_READ_TIMEOUT_S seconds (environment
 * variable of that name to change it, 0 = no bound) the process prints one
 * line naming the file and exits with RNND_EXIT_INPUT. Uses SIGALRM. */
#define RNND_READ_TIMEOUT_S 600
void rnnd_reading_begin(const char *path);
void rnnd_reading_end(void);

/* Fuzz targets only (tests/fuzz): with a trap set, rnnd_input_error jumps
 * to it silently instead of exiting, and an internal error aborts (bad input
 * must only ever produce input errors). NULL restores exiting. */
void rnnd_set_input_error_trap(jmp_buf *trap);

/* Rank used by the rank-0 printing helpers; set once by the communicator. */
void rnnd_set_print_rank(int rank);
int rnnd_print_rank(void);

RNND_NORETURN void rnnd_input_error(const char *fmt, ...) RNND_PRINTF(1, 2);
RNND_NORETURN void rnnd_internal_error(const char *file, int line, const char *fmt, ...)
    RNND_PRINTF(3, 4);

/* printf on rank 0 only (stdout, flushed), and a warning on stderr from rank 0. */
void rnnd_print0(const char *fmt, ...) RNND_PRINTF(1, 2);
void rnnd_warn0(const char *fmt, ...) RNND_PRINTF(1, 2);

#define RNND_FAIL(...) rnnd_internal_error(__FILE__, __LINE__, __VA_ARGS__)
#define RNND_ASSERT(cond)                                           \
  do {                                                              \
    if (!(cond)) RNND_FAIL("assertion failed: %s", #cond);          \
  } while (0)

/* Allocation that never returns NULL; memory is zeroed. Free with free(). */
void *rnnd_calloc(size_t count, size_t size, const char *what);
void *rnnd_malloc(size_t size, const char *what);
char *rnnd_strdup(const char *s);
#define RNND_ALLOC(type, count, what) ((type *)rnnd_calloc((count), sizeof(type), (what)))

/* A command-line integer in [min, max]; anything else is an input error
 * naming the option and the accepted range. */
long long rnnd_parse_integer(const char *option, const char *value, long long min, long long max);

/* Monotonic wall clock in seconds. */
double rnnd_now(void);

#endif
