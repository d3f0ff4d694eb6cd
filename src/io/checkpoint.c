/* checkpoint.c — atomic HDF5 checkpoints and their loading (checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"
#include "rnnd/model_file.h"

static hid_t create_group(const char *path, hid_t parent, const char *name) {
  return h5_check(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path, "cannot create a group");
}

static hid_t open_group(const char *path, hid_t parent, const char *name) {
  if (H5Lexists(parent, name, H5P_DEFAULT) <= 0) rnnd_input_error("%s: missing group %s (not a checkpoint?)", path, name);
  return h5_check(H5Gopen2(parent, name, H5P_DEFAULT), path, "cannot open a group");
}

static void write_optimizer(const char *path, hid_t file, const rnnd_layout *layout, const rnnd_optimizer *o) {
  hid_t g = create_group(path, file, "optimizer");
  h5_write_string_attr(path, g, "kind", o->kind == RNND_OPT_ADAM ? "adam" : "sgd");
  h5_write_int_attr(path, g, "steps", o->steps);
  h5_write_double_attr(path, g, "beta1", o->beta1);
  h5_write_double_attr(path, g, "beta2", o->beta2);
  h5_write_double_attr(path, g, "eps", o->eps);
  h5_write_double_attr(path, g, "weight_decay", o->weight_decay);
  h5_write_double_attr(path, g, "momentum", o->momentum);
  hid_t m = create_group(path, g, "m");
  model_file_write_tensors(path, m, layout, o->m, 1);
  H5Gclose(m);
  if (o->v) {
    hid_t v = create_group(path, g, "v");
    model_file_write_tensors(path, v, layout, o->v, 1);
    H5Gclose(v);
  }
  if (o->avg && o->steps >= o->ema_start) {
    h5_write_double_attr(path, g, "ema_decay", o->ema_decay);
    h5_write_int_attr(path, g, "ema_start", o->ema_start);
    hid_t a = create_group(path, g, "average");
    model_file_write_tensors(path, a, layout, o->avg, 1);
    H5Gclose(a);
  }
  H5Gclose(g);
}

static rnnd_param_view stream_state_view(int64_t n_streams, int width) {
  rnnd_param_view v = {.name = "stream_state", .ndim = 2, .rows = n_streams, .cols = width};
  v.numel = (size_t)(n_streams * width);
  return v;
}

static void write_amp_and_state(const char *path, hid_t file, const rnnd_loss_scaler *s, const rnnd_train_state *st,
                                const rnnd_checkpoint_view *c) {
  hid_t amp = create_group(path, file, "amp");
  h5_write_double_attr(path, amp, "scale", s->scale);
  h5_write_int_attr(path, amp, "growth_tracker", s->growth_tracker);
  h5_write_int_attr(path, amp, "skipped", s->skipped);
  H5Gclose(amp);
  hid_t g = create_group(path, file, "state");
  h5_write_int_attr(path, g, "step", st->step);
  h5_write_int_attr(path, g, "epoch", st->epoch);
  h5_write_int_attr(path, g, "next_batch", st->next_batch);
  h5_write_int_attr(path, g, "tokens_seen", st->tokens_seen);
  h5_write_int_attr(path, g, "seed", (int64_t)st->seed);
  h5_write_double_attr(path, g, "best_valid_loss", st->best_valid_loss);
  h5_write_double_attr(path, g, "train_seconds", st->train_seconds);
  h5_write_int_attr(path, g, "world_size", st->world_size);
  if (c->stream_state) {
    rnnd_param_view v = stream_state_view(c->n_streams, c->stream_width);
    model_file_write_view(path, g, &v, c->stream_state, 1);
  }
  H5Gclose(g);
}

static void write_contents(const char *tmp, const rnnd_checkpoint_view *c) {
  hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) rnnd_input_error("%s: cannot create checkpoint (%s)", tmp, strerror(errno));
  h5_write_string_attr(tmp, file, "format", RNND_CHECKPOINT_FORMAT);
  h5_write_int_attr(tmp, file, "format_version", RNND_CHECKPOINT_FORMAT_VERSION);
  h5_write_int_attr(tmp, file, "max_len", c->max_len);
  h5_write_string_attr(tmp, file, "config", c->config_text);
  if (c->meta) model_meta_write(tmp, file, c->meta);
  hid_t model = create_group(tmp, file, "model");
  model_file_write_shape(tmp, model, &c->layout->shape);
  model_file_write_tensors(tmp, model, c->layout, c->params, 1);
  H5Gclose(model);
  write_optimizer(tmp, file, c->layout, c->optimizer);
  write_amp_and_state(tmp, file, c->scaler, c->state, c);
  if (H5Fclose(file) < 0) {
    unlink(tmp);
    rnnd_input_error("%s: cannot write checkpoint (disk full?)", tmp);
  }
}

static void sync_directory(const char *dir) {
  int fd = open(dir, O_RDONLY);
  if (fd < 0 || fsync(fd) != 0) rnnd_input_error("%s: cannot sync directory (%s)", dir, strerror(errno));
  close(fd);
}

/* Publishes tmp under final: fsync, rename, fsync the directory. */
static void publish(const char *dir, const char *tmp, const char *final) {
  model_file_sync(tmp);
  if (rename(tmp, final) != 0) {
    int saved = errno;
    unlink(tmp);
    rnnd_input_error("%s: cannot rename into place (%s)", final, strerror(saved));
  }
  sync_directory(dir);
}

static int compare_long(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* Removes all but the newest `keep` ckpt_step*.h5 files of dir. */
static void prune(const char *dir, int keep) {
  DIR *d = opendir(dir);
  if (!d) return;
  long long steps[4096];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < 4096;) {
    long long step;
    char tail[8];
    if (sscanf(e->d_name, "ckpt_step%lld.%7s", &step, tail) == 2 && !strcmp(tail, "h5")) steps[n++] = step;
  }
  closedir(d);
  qsort(steps, (size_t)n, sizeof steps[0], compare_long);
  for (int i = 0; i < n - keep; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ckpt_step%08lld.h5", dir, steps[i]);
    unlink(path);
  }
}

static void point_latest_at(const char *dir, const char *name) {
  char tmp[4200], final[4200];
  snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
  snprintf(final, sizeof final, "%s/latest", dir);
  FILE *f = fopen(tmp, "w");
  if (!f) rnnd_input_error("%s: cannot write (%s)", tmp, strerror(errno));
  int ok = fprintf(f, "%s\n", name) > 0;
  if (fclose(f) != 0 || !ok) {
    unlink(tmp);
    rnnd_input_error("%s: cannot write (disk full?)", tmp);
  }
  publish(dir, tmp, final);
  rnnd_set_partial_output(NULL);
}

void checkpoint_save(const char *dir, int keep, const rnnd_checkpoint_view *c) {
  h5_quiet();
  char name[64], tmp[4300], final[4200];
  snprintf(name, sizeof name, "ckpt_step%08lld.h5", (long long)c->state->step);
  snprintf(final, sizeof final, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  rnnd_set_partial_output(tmp); /* an error exit (disk full) removes it */
  write_contents(tmp, c);
  if (c->test_delay_s > 0) {
    struct timespec pause = {(time_t)c->test_delay_s, (long)((c->test_delay_s - (double)(time_t)c->test_delay_s) * 1e9)};
    nanosleep(&pause, NULL);
  }
  publish(dir, tmp, final);
  rnnd_set_partial_output(NULL);
  prune(dir, keep);
  point_latest_at(dir, name);
}

int checkpoint_latest(const char *dir, char *buf, size_t size) {
  char pointer[4200], name[256] = "";
  snprintf(pointer, sizeof pointer, "%s/latest", dir);
  FILE *f = fopen(pointer, "r");
  if (!f) return 0;
  int ok = fscanf(f, "%255s", name) == 1;
  fclose(f);
  if (!ok || strchr(name, '/')) rnnd_input_error("%s: not a checkpoint pointer (expected one file name)", pointer);
  snprintf(buf, size, "%s/%s", dir, name);
  return 1;
}

/* --- loading ------------------------------------------------------------ */

static void check_format(const char *path, hid_t file) {
  char format[64];
  h5_read_string_attr(path, file, "/", "format", format, sizeof format);
  if (strcmp(format, RNND_CHECKPOINT_FORMAT))
    rnnd_input_error("%s: format is '%s', not a checkpoint ('%s')", path, format, RNND_CHECKPOINT_FORMAT);
  int64_t version = h5_read_int_attr(path, file, "/", "format_version");
  if (version < 1 || version > RNND_CHECKPOINT_FORMAT_VERSION)
    rnnd_input_error("%s: checkpoint format_version %lld; this rnn_dist reads version %d", path, (long long)version,
                     RNND_CHECKPOINT_FORMAT_VERSION);
}

/* The averaged weights, when both the checkpoint and the run average; a
 * run that averages from a checkpoint without them starts its average at
 * the next update. A run that does not average ignores them. */
static void read_average(const char *path, hid_t g, const rnnd_layout *layout, rnnd_optimizer *o) {
  if (!o->avg) return;
  if (H5Lexists(g, "average", H5P_DEFAULT) <= 0) {
    if (o->ema_start <= o->steps) o->ema_start = o->steps + 1;
    return;
  }
  o->ema_start = h5_read_int_attr(path, g, "/optimizer", "ema_start");
  hid_t a = open_group(path, g, "average");
  model_file_read_tensors(path, a, "/optimizer/average", layout, o->avg);
  H5Gclose(a);
}

static void read_optimizer(const char *path, hid_t file, const rnnd_layout *layout, rnnd_optimizer *o) {
  hid_t g = open_group(path, file, "optimizer");
  char kind[16];
  h5_read_string_attr(path, g, "/optimizer", "kind", kind, sizeof kind);
  const char *want = o->kind == RNND_OPT_ADAM ? "adam" : "sgd";
  if (strcmp(kind, want))
    rnnd_input_error("%s: the checkpoint's optimizer is %s but train.optimizer = %s", path, kind, want);
  o->steps = h5_read_int_attr(path, g, "/optimizer", "steps");
  hid_t m = open_group(path, g, "m");
  model_file_read_tensors(path, m, "/optimizer/m", layout, o->m);
  H5Gclose(m);
  if (o->v) {
    hid_t v = open_group(path, g, "v");
    model_file_read_tensors(path, v, "/optimizer/v", layout, o->v);
    H5Gclose(v);
  }
  read_average(path, g, layout, o);
  H5Gclose(g);
}

static void read_amp_and_state(const char *path, hid_t file, rnnd_loss_scaler *s, rnnd_train_state *st) {
  hid_t amp = open_group(path, file, "amp");
  s->scale = h5_read_double_attr(path, amp, "/amp", "scale");
  s->growth_tracker = (long)h5_read_int_attr(path, amp, "/amp", "growth_tracker");
  s->skipped = h5_read_int_attr(path, amp, "/amp", "skipped");
  H5Gclose(amp);
  hid_t g = open_group(path, file, "state");
  st->step = h5_read_int_attr(path, g, "/state", "step");
  st->epoch = h5_read_int_attr(path, g, "/state", "epoch");
  st->next_batch = h5_read_int_attr(path, g, "/state", "next_batch");
  st->tokens_seen = h5_read_int_attr(path, g, "/state", "tokens_seen");
  st->seed = (uint64_t)h5_read_int_attr(path, g, "/state", "seed");
  st->best_valid_loss = h5_read_double_attr(path, g, "/state", "best_valid_loss");
  /* written since the training clock continues across resumes */
  st->train_seconds = h5_has_attr(g, "train_seconds") ? h5_read_double_attr(path, g, "/state", "train_seconds") : 0.0;
  st->world_size = (int)h5_read_int_attr(path, g, "/state", "world_size");
  H5Gclose(g);
  if (st->step < 0 || st->epoch < 0 || st->next_batch < 0)
    rnnd_input_error("%s: /state holds a negative step, epoch or batch index", path);
  if (!(st->train_seconds >= 0.0 && st->train_seconds < 1e12))
    rnnd_input_error("%s: /state train_seconds = %g is not a duration", path, st->train_seconds);
}

void checkpoint_load(const char *path, const rnnd_layout *layout, float *params, rnnd_optimizer *optimizer,
                     rnnd_loss_scaler *scaler, rnnd_train_state *state) {
  rnnd_reading_begin(path);
  hid_t file = h5_open_read(path);
  check_format(path, file);
  hid_t model = open_group(path, file, "model");
  char mismatches[2048];
  int n = model_file_list_mismatches(model, layout, mismatches, sizeof mismatches);
  H5Gclose(model);
  if (n) rnnd_input_error("%s: checkpoint of another model shape: %s", path, mismatches);
  H5Fclose(file);
  model_file_load_params(path, layout, params); /* checks the shape first; ends the bound */
  rnnd_reading_begin(path);
  file = h5_open_read(path);
  read_optimizer(path, file, layout, optimizer);
  read_amp_and_state(path, file, scaler, state);
  H5Fclose(file);
  rnnd_reading_end();
}

void checkpoint_load_stream_state(const char *path, float *out, int64_t n_streams, int width) {
  rnnd_reading_begin(path);
  hid_t file = h5_open_read(path);
  hid_t g = open_group(path, file, "state");
  if (H5Lexists(g, "stream_state", H5P_DEFAULT) <= 0)
    rnnd_input_error("%s: no /state/stream_state: the checkpoint is not of a data.mode = stream run", path);
  rnnd_param_view v = stream_state_view(n_streams, width);
  model_file_read_view(path, g, "/state", &v, out);
  H5Gclose(g);
  H5Fclose(file);
  rnnd_reading_end();
}
