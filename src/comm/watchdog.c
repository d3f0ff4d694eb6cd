/* watchdog.c — see watchdog.h. */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "rnnd/common.h"

struct rnnd_watchdog {
  pthread_t thread;
  int rank;
  double timeout_s;
  _Atomic double entered_at; /* 0: not inside a collective */
  _Atomic(const char *) call;
  atomic_int stop;
};

static double monotonic_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watch(void *arg) {
  rnnd_watchdog *w = arg;
  /* check ten times per timeout, at most every second */
  double period = w->timeout_s / 10.0 < 1.0 ? w->timeout_s / 10.0 : 1.0;
  struct timespec nap = {(time_t)period, (long)((period - (double)(time_t)period) * 1e9)};
  while (!atomic_load(&w->stop)) {
    nanosleep(&nap, NULL);
    double since = atomic_load(&w->entered_at);
    if (since <= 0.0) continue;
    double waited = monotonic_seconds() - since;
    if (waited <= w->timeout_s) continue;
    fprintf(stderr, "%s: error: rank %d: %s has waited %.0f s (comm.timeout_s = %g): another rank died, hangs or "
            "lost its network; ending this rank so the job stops\n", rnnd_program_name(), w->rank,
            atomic_load(&w->call), waited, w->timeout_s);
    fflush(stderr);
    fflush(stdout);
    _exit(RNND_EXIT_INTERNAL); /* MPI_Abort is not safe off the main thread; mpirun sees the exit */
  }
  return NULL;
}

rnnd_watchdog *watchdog_start(int rank, double timeout_s) {
  if (timeout_s <= 0.0) return NULL;
  rnnd_watchdog *w = RNND_ALLOC(rnnd_watchdog, 1, "watchdog");
  w->rank = rank;
  w->timeout_s = timeout_s;
  atomic_init(&w->entered_at, 0.0);
  atomic_init(&w->call, "");
  atomic_init(&w->stop, 0);
  if (pthread_create(&w->thread, NULL, watch, w) != 0) RNND_FAIL("cannot start the collective watchdog thread");
  return w;
}

void watchdog_enter(rnnd_watchdog *w, const char *call) {
  if (!w) return;
  atomic_store(&w->call, call);
  atomic_store(&w->entered_at, monotonic_seconds());
}

void watchdog_leave(rnnd_watchdog *w) {
  if (w) atomic_store(&w->entered_at, 0.0);
}

void watchdog_stop(rnnd_watchdog *w) {
  if (!w) return;
  atomic_store(&w->stop, 1);
  pthread_join(w->thread, NULL);
  free(w);
}
