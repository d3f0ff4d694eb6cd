/* test_amp.c — dynamic loss scaling on the real trainer, under mpirun:
 *  - overflow: with an enormous loss scale the fp16 gradient overflows; the
 *    step is skipped on every rank, the master weights, Adam's moments and
 *    step count are bitwise unchanged, and the scale halves;
 *  - growth: after growth_interval clean steps the scale doubles;
 *  - a NaN injected into ONE rank's gradient (the RNND_FAULT_NAN_GRAD hook's
 *    field) makes every rank skip that step.
 * usage: mpirun -np N test_amp DATA_DIR WORK_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/comm.h"
#include "rnnd/trainer.h"

static rnnd_comm comm;
static int failures = 0, checks = 0;
#define EXPECT(cond, ...)                                      \
  do {                                                         \
    checks++;                                                  \
    if (!(cond) && failures++ < 20) {                          \
      printf("FAIL (rank %d) %s: ", comm.rank, #cond);         \
      printf(__VA_ARGS__);                                     \
      printf("\n");                                            \
    }                                                          \
  } while (0)

typedef struct {
  float *params, *m, *v;
  int64_t adam_steps;
} snapshot;

static snapshot take_snapshot(const rnnd_trainer *t) {
  size_t bytes = t->layout.numel * sizeof(float);
  snapshot s = {malloc(bytes), malloc(bytes), malloc(bytes), (int64_t)t->optimizer.steps};
  memcpy(s.params, t->params, bytes);
  memcpy(s.m, t->optimizer.m, bytes);
  memcpy(s.v, t->optimizer.v, bytes);
  return s;
}

static int unchanged(const rnnd_trainer *t, const snapshot *s) {
  size_t bytes = t->layout.numel * sizeof(float);
  return !memcmp(s->params, t->params, bytes) && !memcmp(s->m, t->optimizer.m, bytes) &&
         !memcmp(s->v, t->optimizer.v, bytes) && s->adam_steps == (int64_t)t->optimizer.steps;
}

static void free_snapshot(snapshot *s) {
  free(s->params);
  free(s->m);
  free(s->v);
}

/* Every rank must report the same outcome. */
static int same_everywhere(int value) {
  double v[2] = {value, (double)value * value};
  comm_allreduce_sum_f64(&comm, v, 2);
  return v[0] * v[0] == v[1] * comm.size; /* all equal iff (sum)^2 = n * sum of squares */
}

static void check_overflow(rnnd_trainer *t) {
  trainer_train_step(t); /* one real step first, so Adam's state is not all zero */
  snapshot before = take_snapshot(t);
  t->scaler.scale = 1e30;
  rnnd_step_stats st = trainer_train_step(t);
  EXPECT(st.skipped, "a step with loss scale 1e30 was applied (grad norm %g)", st.grad_norm);
  EXPECT(same_everywhere(st.skipped), "ranks disagree on skipping");
  EXPECT(unchanged(t, &before), "weights or optimizer state changed by a skipped step");
  EXPECT(t->scaler.scale == 0.5e30, "scale after overflow %g, expected 5e29", t->scaler.scale);
  EXPECT(t->scaler.skipped == 1, "skip counter %lld", (long long)t->scaler.skipped);
  free_snapshot(&before);
}

static void check_growth(rnnd_trainer *t) {
  t->scaler.scale = 1024.0;
  t->scaler.growth_tracker = 0;
  for (long k = 0; k < t->scaler.growth_interval; k++) {
    rnnd_step_stats st = trainer_train_step(t);
    EXPECT(!st.skipped && st.loss_scale == 1024.0, "clean step %ld: skipped %d at scale %g", k, st.skipped,
           st.loss_scale);
  }
  EXPECT(t->scaler.scale == 2048.0, "scale after %ld clean steps: %g, expected 2048", t->scaler.growth_interval,
         t->scaler.scale);
}

static void check_nan_on_one_rank(rnnd_trainer *t) {
  snapshot before = take_snapshot(t);
  double scale = t->scaler.scale;
  if (comm.rank == comm.size - 1) t->fault_nan_step = t->step;
  rnnd_step_stats st = trainer_train_step(t);
  EXPECT(st.skipped, "a NaN on rank %d's gradient did not skip the step here", comm.size - 1);
  EXPECT(same_everywhere(st.skipped), "ranks disagree on skipping the NaN step");
  EXPECT(unchanged(t, &before), "weights or optimizer state changed by the NaN step");
  EXPECT(t->scaler.scale == scale / 2, "scale %g after the NaN step, expected %g", t->scaler.scale, scale / 2);
  free_snapshot(&before);
}

int main(int argc, char **argv) {
  comm_init(&comm, &argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: test_amp DATA_DIR WORK_DIR\n");
    comm_abort(&comm, 2);
  }
  char set[4][4200];
  snprintf(set[0], sizeof set[0], "data.dir=%s", argv[1]);
  snprintf(set[1], sizeof set[1], "output.dir=%s", argv[2]);
  const char *fixed[] = {"train.precision=fp16", "model.embed=32", "model.hidden=32", "train.global_batch=8",
                         "train.threads=1", "amp.growth_interval=3", "amp.max_scale=1e30", "comm.check_every=1", "data.test=none",
                         "data.valid=none", "train.steps=100"};
  rnnd_config cfg;
  config_init_defaults(&cfg);
  config_apply_override(&cfg, set[0]);
  config_apply_override(&cfg, set[1]);
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) config_apply_override(&cfg, fixed[i]);
  config_finalize(&cfg);
  rnnd_trainer t;
  trainer_init(&t, &cfg, &comm, NULL, NULL);
  check_overflow(&t);
  check_growth(&t);
  check_nan_on_one_rank(&t);
  double totals[2] = {checks, failures};
  comm_allreduce_sum_f64(&comm, totals, 2);
  if (comm.rank == 0) printf("%d ranks: %.0f passed, %.0f failed\n", comm.size, totals[0] - totals[1], totals[1]);
  trainer_free(&t);
  config_free(&cfg);
  comm_finalize(&comm);
  return totals[1] > 0;
}
