/* preempt.c — signal flag for graceful preemption (preempt.h). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/preempt.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t preempt_received = 0;

static void on_signal(int signo) { preempt_received = signo; }

void preempt_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
}

int preempt_signal(void) { return preempt_received; }
