/* watchdog.h — a bound on how long a rank waits inside one collective. A
 * thread checks every fraction of a second; when a call has been waiting
 * longer than comm.timeout_s (another rank died, hangs, or lost its
 * network), it prints one line naming the rank, the call and the wait, and
 * ends the process with RNND_EXIT_INTERNAL. mpirun (or srun) then stops the
 * rest of the job, so no rank is left waiting forever.
 *
 * Ownership: watchdog_start allocates and starts the thread, watchdog_stop
 * joins and frees it. enter/leave are cheap (two atomic stores) and are
 * called by the communicator around every blocking MPI call. */
#ifndef RNND_WATCHDOG_H
#define RNND_WATCHDOG_H

typedef struct rnnd_watchdog rnnd_watchdog;

/* timeout_s <= 0: returns NULL (no watchdog); enter/leave accept NULL. */
rnnd_watchdog *watchdog_start(int rank, double timeout_s);
void watchdog_enter(rnnd_watchdog *w, const char *call);
void watchdog_leave(rnnd_watchdog *w);
void watchdog_stop(rnnd_watchdog *w);

#endif
