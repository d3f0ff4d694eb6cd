/* config.c — table-driven INI parser for rnnd_config (see config.h). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

typedef enum { KEY_INT, KEY_LONG, KEY_DOUBLE, KEY_BOOL, KEY_ENUM, KEY_STRING } key_type;

typedef struct {
  const char *section;
  const char *key;
  key_type type;
  size_t offset;
  const char *default_value; /* parsed like user input, so defaults are checked too */
  double min, max;           /* inclusive range for numbers */
  const char *const *choices; /* NULL-terminated, for KEY_ENUM */
  const char *help;
} config_key;

static const char *const cell_names[] = {"gru", "lstm", NULL};
static const char *const decoder_names[] = {"softmax", "adaptive", NULL};
static const char *const bias_init_names[] = {"zero", "unigram", NULL};
static const char *const task_names[] = {"lm", "classify", "regress", NULL};
static const char *const optimizer_names[] = {"adam", "sgd", NULL};
static const char *const schedule_names[] = {"constant", "linear", "cosine", "step", NULL};
static const char *const data_mode_names[] = {"pieces", "stream", NULL};
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};
static const char *const dtype_names[] = {"fp32", "fp16", "bf16", NULL};           /* rnnd_dtype order */
static const char *const wire_names[] = {"fp32", "fp16", "bf16", "auto", NULL};  /* + RNND_GRAD_DTYPE_AUTO */

#define AT(field) offsetof(rnnd_config, field)
static const config_key config_keys[] = {
    {"model", "cell", KEY_ENUM, AT(model.cell), "gru", 0, 0, cell_names, "recurrent cell: gru (PyTorch/cuDNN form) or lstm"},
    {"model", "layers", KEY_INT, AT(model.layers), "2", 1, 8, NULL, "stacked recurrent layers"},
    {"model", "embed", KEY_INT, AT(model.embed), "256", 1, 65536, NULL, "embedding width"},
    {"model", "hidden", KEY_INT, AT(model.hidden), "256", 1, 65536, NULL, "hidden units per direction"},
    {"model", "bidirectional", KEY_BOOL, AT(model.bidirectional), "false", 0, 1, NULL, "add a reverse direction to every layer (sees the future: not for language modelling)"},
    {"model", "dropout", KEY_DOUBLE, AT(model.dropout), "0.0", 0, 0.95, NULL, "dropout on embeddings, between layers and before the decoder"},
    {"model", "locked_dropout", KEY_BOOL, AT(model.locked_dropout), "false", 0, 1, NULL, "variational (locked) dropout: model.dropout draws one mask per sequence piece and unit and reuses it at every time step (AWD-LSTM's LockedDropout), on the embedding output, between layers and on the top layer's output"},
    {"model", "embedding_dropout", KEY_DOUBLE, AT(model.embedding_dropout), "0.0", 0, 0.95, NULL, "drop whole word vectors: each vocabulary word's embedding is zeroed for a training batch with this probability (the others scaled by 1/(1-p)); AWD-LSTM's dropoute; lm and classify"},
    {"model", "ar_alpha", KEY_DOUBLE, AT(model.ar_alpha), "0.0", 0, 1e6, NULL, "activation regularisation: adds ar_alpha x mean of y^2 over the decoder input (after dropout) to the loss, per target as the NLL is; AWD-LSTM uses 2; model.task = lm"},
    {"model", "tar_beta", KEY_DOUBLE, AT(model.tar_beta), "0.0", 0, 1e6, NULL, "temporal activation regularisation: adds tar_beta x mean of (h_t - h_(t-1))^2 over the top layer's output (before dropout) at consecutive steps of each piece; AWD-LSTM uses 1; model.task = lm, not with train.bptt_segment"},
    {"model", "weight_dropout", KEY_DOUBLE, AT(model.weight_dropout), "0.0", 0, 0.95, NULL, "weight dropout (DropConnect) on every hidden-to-hidden matrix: each weight zeroed for a training batch with this probability, the others scaled by 1/(1-p); AWD-LSTM's WeightDrop (wdrop 0.5); evaluation uses the weights as they are"},
    {"model", "tie_weights", KEY_BOOL, AT(model.tie_weights), "false", 0, 1, NULL, "decoder.weight shares embedding.weight (needs embed = hidden x directions)"},
    {"model", "task", KEY_ENUM, AT(model.task), "lm", 0, 0, task_names, "lm: predict every next token (decoder over the vocabulary); classify: one label per sequence (classifier.weight/bias on the top layer's final hidden state, both directions; data with /labels from rnn_prep --labels); regress: forecast the next step's real-valued features (input.weight/bias in place of the embedding, MSE; data from rnn_prep --csv)"},
    {"model", "decoder", KEY_ENUM, AT(model.decoder), "softmax", 0, 0, decoder_names, "output layer: softmax (full) or adaptive (exact adaptive softmax, torch.nn.AdaptiveLogSoftmaxWithLoss; needs frequency-sorted ids, as rnn_prep writes)"},
    {"model", "decoder_bias_init", KEY_ENUM, AT(model.decoder_bias_init), "zero", 0, 0, bias_init_names, "decoder.bias at the start: zero, or unigram (log of each token's add-one smoothed training-set frequency, so training starts at the unigram perplexity; lm with softmax decoder)"},
    {"model", "cutoffs", KEY_STRING, AT(model.cutoffs), "2000,10000", 0, 0, NULL, "adaptive: ascending cutoffs < vocab size: the head's shortlist, then where each tail cluster ends"},
    {"model", "div_value", KEY_DOUBLE, AT(model.div_value), "4.0", 1.0, 1e6, NULL, "adaptive: tail cluster i projects to (hidden x directions) / div_value^(i+1) units"},

    {"data", "dir", KEY_STRING, AT(data.dir), "", 0, 0, NULL, "directory made by rnn_prep; default for train/valid/test as DIR/{train,valid,test}.h5"},
    {"data", "train", KEY_STRING, AT(data.train), "", 0, 0, NULL, "training set (.h5 from rnn_prep); empty = DIR/train.h5"},
    {"data", "valid", KEY_STRING, AT(data.valid), "", 0, 0, NULL, "validation set (.h5); empty = DIR/valid.h5 if data.dir is set; none = no validation"},
    {"data", "test", KEY_STRING, AT(data.test), "", 0, 0, NULL, "test set (.h5), evaluated at the end; empty = DIR/test.h5 if data.dir is set; none = no test"},
    {"data", "max_len", KEY_INT, AT(data.max_len), "70", 1, 1 << 20, NULL, "longer sequences are cut into pieces of at most this many targets"},
    {"data", "buckets", KEY_STRING, AT(data.buckets), "auto", 0, 0, NULL, "length buckets: auto (length quantiles) or ascending upper bounds, e.g. 10,20,40,70"},
    {"data", "num_buckets", KEY_INT, AT(data.num_buckets), "8", 1, 1024, NULL, "bucket count when buckets = auto"},
    {"data", "mode", KEY_ENUM, AT(data.mode), "pieces", 0, 0, data_mode_names, "pieces: every sequence from a zero state, cut at max_len, length buckets; stream: the corpus as global_batch (eval_batch) token streams in windows of data.bptt steps, state carried between windows (truncated BPTT)"},
    {"data", "target_last", KEY_INT, AT(data.target_last), "0", 0, 1 << 30, NULL, "regress: windows of max_len steps, k apart, each scoring only its last k steps (the earlier ones warm the state up), so every step after a series' first max_len - k is scored once; 0 = pieces scoring every step"},
    {"data", "bptt", KEY_INT, AT(data.bptt), "70", 1, 1 << 20, NULL, "stream mode: steps per window (gradients stop at window starts)"},

    {"train", "device", KEY_ENUM, AT(train.device), "auto", 0, 0, device_names, "auto (CUDA if built and a GPU is visible), cpu or cuda"},
    {"train", "precision", KEY_ENUM, AT(train.precision), "fp32", 0, 0, dtype_names, "weights, activations and weight gradients in fp32, fp16 (dynamic loss scaling) or bf16; the optimizer always steps fp32 master weights"},
    {"train", "ema_decay", KEY_DOUBLE, AT(train.ema_decay), "0.0", 0, 0.999999, NULL, "averaged weights: after every optimizer update avg = ema_decay x avg + (1 - ema_decay) x weights (an exponential moving average, as NT-ASGD averages); evaluation, model.h5 and generate/predict use them, checkpoints keep them beside the raw weights; 0 = off; on a GPU the optimizer then runs on the host (the host step drives the CUDA backend)"},
    {"train", "ema_start", KEY_LONG, AT(train.ema_start), "1", 1, 9.0e15, NULL, "the update at which the average starts (a copy of the weights then); before it evaluation uses the raw weights"},
    {"train", "seed", KEY_LONG, AT(train.seed), "1234", 0, 9.0e15, NULL, "seed for initialisation, batch order and dropout"},
    {"train", "steps", KEY_LONG, AT(train.steps), "0", 0, 9.0e15, NULL, "optimizer steps; 0 = run train.epochs epochs"},
    {"train", "epochs", KEY_INT, AT(train.epochs), "1", 1, 1000000, NULL, "epochs when train.steps = 0"},
    {"train", "global_batch", KEY_INT, AT(train.global_batch), "32", 1, 1 << 20, NULL, "sequences per optimizer step"},
    {"train", "global_batch_tokens", KEY_LONG, AT(train.global_batch_tokens), "0", 0, 9.0e15, NULL, "if > 0: each step takes as many pieces of one bucket as fit in this many target tokens (instead of global_batch pieces)"},
    {"train", "eval_batch", KEY_INT, AT(train.eval_batch), "64", 1, 1 << 20, NULL, "sequences per evaluation batch"},
    {"train", "optimizer", KEY_ENUM, AT(train.optimizer), "adam", 0, 0, optimizer_names, "adam (torch.optim.Adam semantics) or sgd (with momentum)"},
    {"train", "lr", KEY_DOUBLE, AT(train.lr), "0.001", 0, 1e6, NULL, "peak learning rate"},
    {"train", "lr_schedule", KEY_ENUM, AT(train.lr_schedule), "constant", 0, 0, schedule_names, "after warmup: constant, linear (to min_lr), cosine (to min_lr) or step (x gamma every step_size)"},
    {"train", "warmup_steps", KEY_LONG, AT(train.warmup_steps), "0", 0, 9.0e15, NULL, "linear warmup from 0 to lr over this many steps"},
    {"train", "min_lr", KEY_DOUBLE, AT(train.min_lr), "0.0", 0, 1e6, NULL, "final learning rate of linear and cosine decay"},
    {"train", "step_size", KEY_LONG, AT(train.step_size), "1000", 1, 9.0e15, NULL, "steps between decays of the step schedule"},
    {"train", "gamma", KEY_DOUBLE, AT(train.gamma), "0.5", 0, 1, NULL, "decay factor of the step schedule"},
    {"train", "beta1", KEY_DOUBLE, AT(train.beta1), "0.9", 0, 0.999999, NULL, "Adam first-moment decay"},
    {"train", "beta2", KEY_DOUBLE, AT(train.beta2), "0.999", 0, 0.99999999, NULL, "Adam second-moment decay"},
    {"train", "eps", KEY_DOUBLE, AT(train.eps), "1e-8", 0, 1, NULL, "Adam epsilon"},
    {"train", "weight_decay", KEY_DOUBLE, AT(train.weight_decay), "0.0", 0, 1, NULL, "L2 penalty added to the gradient (as torch.optim)"},
    {"train", "momentum", KEY_DOUBLE, AT(train.momentum), "0.0", 0, 0.999999, NULL, "SGD momentum"},
    {"train", "clip_norm", KEY_DOUBLE, AT(train.clip_norm), "0.5", 0, 1e9, NULL, "global gradient-norm clip; 0 disables"},
    {"train", "bptt_segment", KEY_INT, AT(train.bptt_segment), "0", 0, 1 << 30, NULL, "if > 0: back-propagate batches longer than this many steps by segments, recomputing each from a kept state (activation memory ~ T/K + K instead of T; same gradients; CPU, unidirectional)"},
    {"train", "log_every", KEY_LONG, AT(train.log_every), "50", 1, 9.0e15, NULL, "steps between progress lines"},
    {"train", "eval_every", KEY_LONG, AT(train.eval_every), "0", 0, 9.0e15, NULL, "steps between validation runs; 0 = only at the end"},
    {"train", "threads", KEY_INT, AT(train.threads), "0", 0, 4096, NULL, "CPU threads for BLAS and kernels; 0 = all cores"},
    {"train", "time_limit_s", KEY_DOUBLE, AT(train.time_limit_s), "0", 0, 1e9, NULL, "stop training after this many seconds of this start (then evaluate and save; a resumed run has the whole limit again, as each job of a requeued Slurm run has its own); 0 = none"},

    {"amp", "loss_scaling", KEY_BOOL, AT(amp.loss_scaling), "true", 0, 1, NULL, "fp16: dynamic loss scaling (false: a fixed scale of 1, to see the underflow it prevents)"},
    {"amp", "init_scale", KEY_DOUBLE, AT(amp.init_scale), "65536", 1e-30, 1e30, NULL, "fp16: initial loss scale (2^16, as GradScaler and apex)"},
    {"amp", "growth_factor", KEY_DOUBLE, AT(amp.growth_factor), "2", 1, 1e6, NULL, "fp16: scale multiplier after growth_interval finite steps"},
    {"amp", "backoff_factor", KEY_DOUBLE, AT(amp.backoff_factor), "0.5", 1e-6, 1, NULL, "fp16: scale multiplier after a step with inf/NaN gradients (which is skipped)"},
    {"amp", "growth_interval", KEY_LONG, AT(amp.growth_interval), "2000", 1, 9.0e15, NULL, "fp16: consecutive finite steps before the scale grows"},
    {"amp", "min_scale", KEY_DOUBLE, AT(amp.min_scale), "1", 1e-30, 1e30, NULL, "fp16: the scale never goes below this"},
    {"amp", "max_scale", KEY_DOUBLE, AT(amp.max_scale), "16777216", 1e-30, 1e30, NULL, "fp16: the scale never goes above this (2^24, as apex)"},

    {"comm", "bucket_mb", KEY_DOUBLE, AT(comm.bucket_mb), "25", 0.001, 65536, NULL, "gradient all-reduce bucket size in MiB (decoder first)"},
    {"comm", "timeout_s", KEY_DOUBLE, AT(comm.timeout_s), "900", 0, 1e9, NULL, "longest wait in one collective before a rank gives up and the job stops (a rank died or hangs); 0 = wait forever"},
    {"comm", "grad_dtype", KEY_ENUM, AT(comm.grad_dtype), "auto", 0, 0, wire_names, "gradient format on the wire: fp32, fp16, bf16, or auto (= train.precision); 16-bit sums add in fp32, one rounding per combine"},
    {"comm", "check_every", KEY_LONG, AT(comm.check_every), "100", 0, 9.0e15, NULL, "steps between checks that all ranks hold bitwise equal parameters; 0 = never"},

    {"metrics", "hist_every", KEY_LONG, AT(metrics.hist_every), "100", 0, 9.0e15, NULL, "steps between histograms of every gate's values per layer (rank 0's share of the batch) in metrics.h5 /hist; 0 = none"},

    {"output", "dir", KEY_STRING, AT(output.dir), "runs/default", 0, 0, NULL, "where model.h5, train.log and config.ini go"},
    {"output", "save_every", KEY_LONG, AT(output.save_every), "0", 0, 9.0e15, NULL, "steps between model saves; 0 = only at the end"},
    {"output", "checkpoint_every", KEY_LONG, AT(output.checkpoint_every), "0", 0, 9.0e15, NULL, "steps between checkpoints (ckpt_stepN.h5, for --resume); 0 = only at the end and on SIGTERM/SIGUSR1"},
    {"output", "keep", KEY_INT, AT(output.keep), "3", 1, 1000000, NULL, "newest checkpoints kept in output.dir"},
    {"output", "preempt_exit_code", KEY_INT, AT(output.preempt_exit_code), "0", 0, 255, NULL, "exit code after SIGTERM/SIGUSR1 made every rank stop and checkpoint"},
};
#undef AT
#define NUM_KEYS (sizeof config_keys / sizeof config_keys[0])

static void *field_ptr(rnnd_config *cfg, const config_key *k) { return (char *)cfg + k->offset; }
static const void *field_cptr(const rnnd_config *cfg, const config_key *k) {
  return (const char *)cfg + k->offset;
}

int rnnd_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  int *row = RNND_ALLOC(int, m + 1, "edit distance row");
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diagonal = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int above = row[j];
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      int best = diagonal + cost;
      if (above + 1 < best) best = above + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diagonal = above;
    }
  }
  int d = row[m];
  free(row);
  return d;
}

static const config_key *find_key(const char *section, const char *key) {
  for (size_t i = 0; i < NUM_KEYS; i++)
    if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].key, key))
      return &config_keys[i];
  return NULL;
}

static void nearest_key(const char *section, const char *key, char *out, size_t out_size) {
  char wanted[256];
  snprintf(wanted, sizeof wanted, "%s.%s", section, key);
  int best = -1;
  for (size_t i = 0; i < NUM_KEYS; i++) {
    char candidate[256];
    snprintf(candidate, sizeof candidate, "%s.%s", config_keys[i].section, config_keys[i].key);
    int d = rnnd_edit_distance(wanted, candidate);
    /* A right key in the wrong section is the commonest slip: rank it first. */
    if (!strcmp(config_keys[i].key, key)) d = 0;
    if (best < 0 || d < best) {
      best = d;
      snprintf(out, out_size, "%s", candidate);
    }
  }
}

static int parse_bool(const char *v, int *out) {
  static const char *const truthy[] = {"true", "yes", "on", "1"};
  static const char *const falsy[] = {"false", "no", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (!strcmp(v, truthy[i])) return *out = 1, 1;
    if (!strcmp(v, falsy[i])) return *out = 0, 1;
  }
  return 0;
}

/* Sets one key from text. `where` names the source ("FILE:LINE" or "--set"). */
static void set_value(rnnd_config *cfg, const config_key *k, const char *value, const char *where) {
  void *p = field_ptr(cfg, k);
  char *end = NULL;
  errno = 0;
  switch (k->type) {
    case KEY_INT:
    case KEY_LONG: {
      long long v = strtoll(value, &end, 10);
      if (errno || end == value || *end)
        rnnd_input_error("%s: %s.%s = '%s' is not an integer", where, k->section, k->key, value);
      if ((double)v < k->min || (double)v > k->max)
        rnnd_input_error("%s: %s.%s = %lld is out of range [%.0f, %.0f]", where, k->section, k->key, v,
                         k->min, k->max);
      if (k->type == KEY_INT) *(int *)p = (int)v;
      else *(long *)p = (long)v;
      break;
    }
    case KEY_DOUBLE: {
      double v = strtod(value, &end);
      if (errno || end == value || *end || !isfinite(v))
        rnnd_input_error("%s: %s.%s = '%s' is not a number", where, k->section, k->key, value);
      if (v < k->min || v > k->max)
        rnnd_input_error("%s: %s.%s = %g is out of range [%g, %g]", where, k->section, k->key, v, k->min,
                         k->max);
      *(double *)p = v;
      break;
    }
    case KEY_BOOL:
      if (!parse_bool(value, (int *)p))
        rnnd_input_error("%s: %s.%s = '%s' is not a boolean (true/false)", where, k->section, k->key, value);
      break;
    case KEY_ENUM: {
      for (int i = 0; k->choices[i]; i++)
        if (!strcmp(value, k->choices[i])) {
          *(int *)p = i;
          return;
        }
      char list[256] = "";
      for (int i = 0; k->choices[i]; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, k->choices[i], sizeof list - strlen(list) - 1);
      }
      rnnd_input_error("%s: %s.%s = '%s' is not one of: %s", where, k->section, k->key, value, list);
    }
    case KEY_STRING:
      free(*(char **)p);
      *(char **)p = rnnd_strdup(value);
      break;
  }
}

static void set_key(rnnd_config *cfg, const char *section, const char *key, const char *value,
                    const char *where) {
  const config_key *k = find_key(section, key);
  if (!k) {
    char suggestion[256];
    nearest_key(section, key, suggestion, sizeof suggestion);
    rnnd_input_error("%s: unknown key '%s.%s' (did you mean '%s'?)", where, section, key, suggestion);
  }
  set_value(cfg, k, value, where);
}

void config_init_defaults(rnnd_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < NUM_KEYS; i++) set_value(cfg, &config_keys[i], config_keys[i].default_value, "default");
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *end = s + strlen(s);
  while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
  return s;
}

/* Strips a trailing "; comment" or "# comment" preceded by whitespace. */
static void strip_inline_comment(char *s) {
  for (char *p = s; *p; p++)
    if ((*p == ';' || *p == '#') && (p == s || isspace((unsigned char)p[-1]))) {
      *p = '\0';
      return;
    }
}

static int valid_section(const char *s) {
  return !strcmp(s, "model") || !strcmp(s, "data") || !strcmp(s, "train") || !strcmp(s, "amp") ||
         !strcmp(s, "comm") || !strcmp(s, "metrics") || !strcmp(s, "output");
}

/* The whole file is read (and closed) before parsing, so an error in the
 * middle leaves no open file behind. */
#define CONFIG_MAX_BYTES 65536
void config_load_file(rnnd_config *cfg, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) rnnd_input_error("%s: cannot open config file: %s", path, strerror(errno));
  char text[CONFIG_MAX_BYTES + 1];
  size_t size = fread(text, 1, sizeof text, f);
  int read_error = ferror(f);
  fclose(f);
  if (read_error) rnnd_input_error("%s: cannot read config file", path);
  if (size > CONFIG_MAX_BYTES) rnnd_input_error("%s: config file larger than %d bytes", path, CONFIG_MAX_BYTES);
  text[size] = '\0';
  if (strlen(text) != size) rnnd_input_error("%s: config file contains a NUL byte (not text)", path);
  char section[64] = "", where[4200];
  int line_no = 0;
  for (char *next = text; *next;) {
    char *line = next, *end = strchr(line, '\n');
    next = end ? end + 1 : line + strlen(line);
    if (end) *end = '\0';
    line_no++;
    snprintf(where, sizeof where, "%s:%d", path, line_no);
    if (strlen(line) > 4094) rnnd_input_error("%s: line longer than %d bytes", where, 4094);
    char *s = trim(line);
    if (*s == '\0' || *s == ';' || *s == '#') continue;
    if (*s == '[') {
      char *close = strchr(s, ']');
      if (!close || *trim(close + 1)) rnnd_input_error("%s: malformed section header '%s'", where, s);
      *close = '\0';
      char *name = trim(s + 1);
      if (!valid_section(name))
        rnnd_input_error("%s: unknown section [%s] (sections: model, data, train, amp, comm, metrics, output)", where, name);
      snprintf(section, sizeof section, "%s", name);
      continue;
    }
    char *eq = strchr(s, '=');
    if (!eq) rnnd_input_error("%s: expected 'key = value', got '%s'", where, s);
    if (!section[0]) rnnd_input_error("%s: key outside of any [section]", where);
    *eq = '\0';
    char *key = trim(s), *value = eq + 1;
    strip_inline_comment(value);
    set_key(cfg, section, key, trim(value), where);
  }
}

void config_apply_override(rnnd_config *cfg, const char *assignment) {
  char buffer[4096], where[4200];
  snprintf(where, sizeof where, "--set %s", assignment);
  if (strlen(assignment) >= sizeof buffer) rnnd_input_error("%s: override too long", where);
  strcpy(buffer, assignment);
  char *eq = strchr(buffer, '=');
  char *dot = strchr(buffer, '.');
  if (!eq || !dot || dot > eq) rnnd_input_error("%s: expected section.key=value", where);
  *eq = '\0';
  *dot = '\0';
  char *section = trim(buffer), *key = trim(dot + 1);
  if (!valid_section(section))
    rnnd_input_error("%s: unknown section '%s' (sections: model, data, train, amp, comm, metrics, output)", where, section);
  set_key(cfg, section, key, trim(eq + 1), where);
}

/* Empty: DIR/NAME when data.dir is set. "none": no such split. */
static void default_data_path(char **field, const char *dir, const char *name) {
  if (!strcmp(*field, "none")) {
    (*field)[0] = '\0';
    return;
  }
  if ((*field)[0] || !dir[0]) return;
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = rnnd_malloc(n, "data path");
  snprintf(path, n, "%s/%s", dir, name);
  free(*field);
  *field = path;
}

void config_finalize(rnnd_config *cfg) {
  default_data_path(&cfg->data.train, cfg->data.dir, "train.h5");
  default_data_path(&cfg->data.valid, cfg->data.dir, "valid.h5");
  default_data_path(&cfg->data.test, cfg->data.dir, "test.h5");
  int directions = cfg->model.bidirectional ? 2 : 1;
  if (cfg->model.tie_weights && cfg->model.embed != cfg->model.hidden * directions)
    rnnd_input_error("config: model.tie_weights needs model.embed (%d) = model.hidden x directions (%d)",
                     cfg->model.embed, cfg->model.hidden * directions);
  if (cfg->model.tie_weights && cfg->model.decoder == RNND_DECODER_ADAPTIVE)
    rnnd_input_error("config: model.tie_weights needs model.decoder = softmax (the adaptive decoder has no "
                     "vocabulary-sized weight to tie)");
  if (cfg->train.bptt_segment > 0 && cfg->model.bidirectional)
    rnnd_input_error("config: train.bptt_segment = %d needs a unidirectional model (model.bidirectional = false): "
                     "a reverse direction would need its own segments from the other end",
                     cfg->train.bptt_segment);
  if (cfg->model.task != RNND_TASK_LM && (cfg->model.tie_weights || cfg->model.decoder != RNND_DECODER_SOFTMAX))
    rnnd_input_error("config: model.task = %s has no vocabulary decoder: set model.tie_weights = false and "
                     "model.decoder = softmax", task_names[cfg->model.task]);
  if (cfg->model.decoder_bias_init == RNND_BIAS_INIT_UNIGRAM &&
      (cfg->model.task != RNND_TASK_LM || cfg->model.decoder != RNND_DECODER_SOFTMAX))
    rnnd_input_error("config: model.decoder_bias_init = unigram needs model.task = lm and model.decoder = softmax "
                     "(it sets decoder.bias, one value per vocabulary token)");
  if ((cfg->model.ar_alpha > 0.0 || cfg->model.tar_beta > 0.0) && cfg->model.task != RNND_TASK_LM)
    rnnd_input_error("config: model.ar_alpha and model.tar_beta regularise a language model's outputs "
                     "(model.task = lm)");
  if (cfg->model.tar_beta > 0.0 && cfg->train.bptt_segment > 0)
    rnnd_input_error("config: model.tar_beta = %g needs whole batches (train.bptt_segment = 0): the step pairs "
                     "across a segment boundary would be missed", cfg->model.tar_beta);
  if (cfg->model.embedding_dropout > 0.0 && cfg->model.task == RNND_TASK_REGRESS)
    rnnd_input_error("config: model.embedding_dropout drops word vectors; a forecaster (model.task = regress) has none");
  if (cfg->model.task == RNND_TASK_CLASSIFY && cfg->data.mode == RNND_DATA_STREAM)
    rnnd_input_error("config: model.task = classify needs whole sequences (data.mode = pieces)");
  if (cfg->data.target_last && (cfg->model.task != RNND_TASK_REGRESS || cfg->data.mode == RNND_DATA_STREAM))
    rnnd_input_error("config: data.target_last = %d is for model.task = regress with data.mode = pieces (streams "
                     "score every step)", cfg->data.target_last);
  if (cfg->data.mode == RNND_DATA_STREAM && cfg->model.bidirectional)
    rnnd_input_error("config: data.mode = stream needs a unidirectional model (model.bidirectional = false): a "
                     "carried state only runs forward");
  if (cfg->data.mode == RNND_DATA_STREAM && cfg->train.global_batch_tokens)
    rnnd_input_error("config: data.mode = stream takes train.global_batch streams; set train.global_batch_tokens = 0");
  if (!cfg->output.dir[0]) rnnd_input_error("config: output.dir must not be empty");
  if (cfg->comm.grad_dtype == RNND_GRAD_DTYPE_AUTO) cfg->comm.grad_dtype = cfg->train.precision;
  if (cfg->amp.min_scale > cfg->amp.max_scale)
    rnnd_input_error("config: amp.min_scale (%g) is larger than amp.max_scale (%g)", cfg->amp.min_scale,
                     cfg->amp.max_scale);
  if (cfg->amp.init_scale < cfg->amp.min_scale || cfg->amp.init_scale > cfg->amp.max_scale)
    rnnd_input_error("config: amp.init_scale = %g is outside [amp.min_scale, amp.max_scale] = [%g, %g]",
                     cfg->amp.init_scale, cfg->amp.min_scale, cfg->amp.max_scale);
}

static void write_value(const rnnd_config *cfg, const config_key *k, FILE *out) {
  const void *p = field_cptr(cfg, k);
  switch (k->type) {
    case KEY_INT: fprintf(out, "%d", *(const int *)p); break;
    case KEY_LONG: fprintf(out, "%ld", *(const long *)p); break;
    case KEY_DOUBLE: fprintf(out, "%.17g", *(const double *)p); break;
    case KEY_BOOL: fputs(*(const int *)p ? "true" : "false", out); break;
    case KEY_ENUM: fputs(k->choices[*(const int *)p], out); break;
    case KEY_STRING: {
      /* After config_finalize an empty split means "none"; writing it so
       * keeps data.dir from filling it in again when the file is read back. */
      const char *v = *(char *const *)p;
      int split = k->offset == offsetof(rnnd_config, data.valid) || k->offset == offsetof(rnnd_config, data.test);
      fputs(split && !v[0] && cfg->data.dir[0] ? "none" : v, out);
      break;
    }
  }
}

void config_write(const rnnd_config *cfg, FILE *out) {
  const char *section = "";
  for (size_t i = 0; i < NUM_KEYS; i++) {
    const config_key *k = &config_keys[i];
    if (strcmp(section, k->section)) {
      fprintf(out, "%s[%s]\n", i ? "\n" : "", k->section);
      section = k->section;
    }
    fprintf(out, "%s = ", k->key);
    write_value(cfg, k, out);
    fputc('\n', out);
  }
}

void config_print_reference(FILE *out) {
  static const char *const type_names[] = {"int", "int", "float", "bool", "choice", "string"};
  for (size_t i = 0; i < NUM_KEYS; i++) {
    const config_key *k = &config_keys[i];
    char name[96];
    snprintf(name, sizeof name, "%s.%s", k->section, k->key);
    fprintf(out, "  %-22s %-7s default %-13s %s\n", name, type_names[k->type],
            k->default_value[0] ? k->default_value : "\"\"", k->help);
  }
}

void config_free(rnnd_config *cfg) {
  for (size_t i = 0; i < NUM_KEYS; i++)
    if (config_keys[i].type == KEY_STRING) {
      char **p = field_ptr(cfg, &config_keys[i]);
      free(*p);
      *p = NULL;
    }
}
