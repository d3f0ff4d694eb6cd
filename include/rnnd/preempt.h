/* preempt.h — graceful preemption: SIGTERM and SIGUSR1 (what Slurm and
 * mpirun send before killing a job) only raise a flag; the trainer polls it
 * at every step boundary, all ranks agree through one all-reduce, write a
 * checkpoint and exit. A second signal during the write changes nothing.
 *
 * The flag is the one process-wide mutable value of rnn_dist outside a
 * context struct: a signal handler can reach nothing else. */
#ifndef RNND_PREEMPT_H
#define RNND_PREEMPT_H

/* Installs the handlers (with SA_RESTART, so I/O in flight continues). */
void preempt_install(void);
/* Non-zero once a handled signal arrived; the signal number. */
int preempt_signal(void);

#endif
