/* prep.c — rnn_prep (prep.h): command line, text reading and tokenising, the
 * vocabulary hash table, encoding, and atomic HDF5 output in the layout that
 * dataset_load() reads (docs/formats.md). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/prep.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/label_table.h"
#include "prep_writer.h"

#define EOS_ID 0
#define UNK_ID 1
#define EOS_WORD "<eos>"
#define UNK_WORD "<unk>"
#define FORMAT_NAME "rnn_dist-lm"
#define FORMAT_VERSION 1

/* ==== command line ===================================================== */

static const char usage_text[] =
    "usage: rnn_prep --train FILE --valid FILE [--test FILE] --out DIR\n"
    "                [--min-count N] [--max-vocab N] [--lowercase] [--labels]\n"
    "       rnn_prep --csv --train FILE.csv --valid FILE.csv [--test FILE.csv] --out DIR\n"
    "\n"
    "Turns whitespace-tokenised text (one paragraph per line, WikiText layout;\n"
    "blank lines are dropped) into DIR/train.h5, DIR/valid.h5 and DIR/test.h5.\n"
    "The vocabulary is built from the training text: <eos> = 0, <unk> = 1, then\n"
    "words by descending count (ties: first occurrence). A literal <unk> in the\n"
    "text is the <unk> id; words outside the vocabulary become <unk>.\n"
    "\n"
    "options:\n"
    "  --train FILE     training text (required); the vocabulary comes from it\n"
    "  --valid FILE     validation text (required)\n"
    "  --test FILE      test text (optional)\n"
    "  --out DIR        output directory, created if missing (required)\n"
    "  --min-count N    drop words seen fewer than N times in train (default 1)\n"
    "  --max-vocab N    at most N vocabulary entries including <eos> and <unk>\n"
    "                   (default 0 = unlimited)\n"
    "  --lowercase      lowercase ASCII letters before counting\n"
    "  --labels         classification data: every line is LABEL<TAB>text; writes\n"
    "                   /labels and /label_names too (model.task = classify)\n"
    "  --csv            time series (model.task = regress): a header of column\n"
    "                   names, one row per step, every column a number except an\n"
    "                   optional series_id (consecutive rows with one id are one\n"
    "                   series); per-feature mean/std from the training file\n"
    "  --help           print this help and exit\n";

static int64_t parse_count(const char *option, const char *text) {
  char *end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || value < 0 || value > INT32_MAX)
    rnnd_input_error("%s: '%s' is not a non-negative integer below 2^31", option, text);
  return value;
}

/* Returns the value of option argv[*i] and advances past it. */
static const char *option_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) rnnd_input_error("option %s needs an argument", argv[*i]);
  *i += 1;
  return argv[*i];
}

static void check_options(const rnnd_prep_options *opt) {
  if (!opt->train) rnnd_input_error("missing --train FILE (see rnn_prep --help)");
  if (!opt->valid) rnnd_input_error("missing --valid FILE (see rnn_prep --help)");
  if (!opt->out_dir) rnnd_input_error("missing --out DIR (see rnn_prep --help)");
  if (opt->out_dir[0] == '\0') rnnd_input_error("--out: the directory name is empty");
  if (opt->min_count < 1) rnnd_input_error("--min-count must be at least 1");
  if (opt->max_vocab == 1)
    rnnd_input_error("--max-vocab must be 0 (unlimited) or at least 2 (<eos> and <unk>)");
  if (opt->csv && (opt->labels || opt->lowercase || opt->max_vocab || opt->min_count != 1))
    rnnd_input_error("--csv takes no text options (--labels, --lowercase, --min-count, --max-vocab)");
}

int prep_parse_args(rnnd_prep_options *opt, int argc, char **argv) {
  memset(opt, 0, sizeof *opt);
  opt->min_count = 1;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      fputs(usage_text, stdout);
      return 1;
    } else if (!strcmp(arg, "--train")) {
      opt->train = option_value(argc, argv, &i);
    } else if (!strcmp(arg, "--valid")) {
      opt->valid = option_value(argc, argv, &i);
    } else if (!strcmp(arg, "--test")) {
      opt->test = option_value(argc, argv, &i);
    } else if (!strcmp(arg, "--out")) {
      opt->out_dir = option_value(argc, argv, &i);
    } else if (!strcmp(arg, "--min-count")) {
      opt->min_count = parse_count(arg, option_value(argc, argv, &i));
    } else if (!strcmp(arg, "--max-vocab")) {
      opt->max_vocab = parse_count(arg, option_value(argc, argv, &i));
    } else if (!strcmp(arg, "--lowercase")) {
      opt->lowercase = 1;
    } else if (!strcmp(arg, "--labels")) {
      opt->labels = 1;
    } else if (!strcmp(arg, "--csv")) {
      opt->csv = 1;
    } else if (arg[0] == '-') {
      rnnd_input_error("unknown option '%s' (see rnn_prep --help)", arg);
    } else {
      rnnd_input_error("unexpected argument '%s' (see rnn_prep --help)", arg);
    }
  }
  check_options(opt);
  return 0;
}

/* ==== text ============================================================= */

typedef struct {
  const char *path;
  char *data; /* owned; not NUL-terminated */
  size_t size;
} text_file;

static void read_all(text_file *t, FILE *f) {
  size_t cap = 1 << 20;
  t->data = rnnd_malloc(cap, "text");
  for (;;) {
    if (t->size == cap) {
      cap *= 2;
      char *grown = realloc(t->data, cap);
      if (!grown) RNND_FAIL("out of memory reading %s (%zu bytes)", t->path, cap);
      t->data = grown;
    }
    size_t got = fread(t->data + t->size, 1, cap - t->size, f);
    t->size += got;
    if (got == 0) break;
  }
}

static long line_of(const text_file *t, size_t byte) {
  long line = 1;
  for (size_t i = 0; i < byte; i++) line += t->data[i] == '\n';
  return line;
}

/* Length of the valid UTF-8 sequence at S (at most N bytes), 0 if invalid. */
static size_t utf8_length(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
  if (s[0] < 0xC2 || s[0] > 0xF4 || len > n) return 0;
  /* The second byte's range excludes overlong forms, surrogates and > U+10FFFF. */
  unsigned char lo = 0x80, hi = 0xBF;
  if (s[0] == 0xE0) lo = 0xA0;
  if (s[0] == 0xED) hi = 0x9F;
  if (s[0] == 0xF0) lo = 0x90;
  if (s[0] == 0xF4) hi = 0x8F;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t k = 2; k < len; k++)
    if (s[k] < 0x80 || s[k] > 0xBF) return 0;
  return len;
}

/* The vocabulary is stored as UTF-8 strings, so the text has to be UTF-8. */
static void check_text(const text_file *t) {
  const unsigned char *s = (const unsigned char *)t->data;
  for (size_t i = 0; i < t->size;) {
    if (s[i] == 0) rnnd_input_error("%s:%ld: contains a NUL byte (not a text file?)", t->path,
                                    line_of(t, i));
    size_t len = utf8_length(s + i, t->size - i);
    if (len == 0) rnnd_input_error("%s:%ld: invalid UTF-8", t->path, line_of(t, i));
    i += len;
  }
}

static void read_text(text_file *t, const char *path, int lowercase) {
  memset(t, 0, sizeof *t);
  t->path = path;
  FILE *f = fopen(path, "rb");
  if (!f) rnnd_input_error("%s: cannot open (%s)", path, strerror(errno));
  read_all(t, f);
  if (ferror(f)) rnnd_input_error("%s: cannot read (%s)", path, strerror(errno));
  fclose(f);
  check_text(t);
  if (lowercase)
    for (size_t i = 0; i < t->size; i++)
      if (t->data[i] >= 'A' && t->data[i] <= 'Z') t->data[i] = (char)(t->data[i] - 'A' + 'a');
}

/* A half-open byte range [pos, end) that the scanners below consume. */
typedef struct {
  const char *pos, *end;
} cursor;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Splits off the next line (without its '\n'); returns 0 at the end of TEXT. */
static int next_line(cursor *text, cursor *line) {
  if (text->pos >= text->end) return 0;
  const char *nl = memchr(text->pos, '\n', (size_t)(text->end - text->pos));
  line->pos = text->pos;
  line->end = nl ? nl : text->end;
  text->pos = nl ? nl + 1 : text->end;
  return 1;
}

/* Splits off the next whitespace-separated word; returns 0 when none is left. */
static int next_word(cursor *line, const char **word, size_t *len) {
  while (line->pos < line->end && is_space(*line->pos)) line->pos++;
  if (line->pos >= line->end) return 0;
  *word = line->pos;
  while (line->pos < line->end && !is_space(*line->pos)) line->pos++;
  *len = (size_t)(line->pos - *word);
  return 1;
}

/* ==== vocabulary hash table (open addressing, linear probing) ========== */

typedef struct {
  const char *text; /* into the training text or a literal; not NUL-terminated */
  size_t len;
  uint64_t hash;
  int64_t count;
  int32_t id; /* -1: not in the vocabulary (maps to <unk>) */
} vocab_entry;

typedef struct {
  vocab_entry *entries; /* in order of first occurrence; 0 and 1 are the specials */
  int64_t n_entries, cap_entries;
  int64_t *slots; /* entry index + 1; 0 = empty */
  uint64_t mask;  /* slot count - 1 (a power of two) */
} vocab_table;

static uint64_t hash_word(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* Slot holding WORD, or the empty slot where it would go. */
static uint64_t find_slot(const vocab_table *t, const char *w, size_t n, uint64_t h) {
  for (uint64_t s = h & t->mask;; s = (s + 1) & t->mask) {
    int64_t e = t->slots[s];
    if (e == 0) return s;
    const vocab_entry *x = &t->entries[e - 1];
    if (x->hash == h && x->len == n && memcmp(x->text, w, n) == 0) return s;
  }
}

/* Doubles the slot array; keeps the load factor at or below one half. */
static void grow_slots(vocab_table *t) {
  uint64_t n_slots = (t->mask + 1) * 2;
  free(t->slots);
  t->slots = RNND_ALLOC(int64_t, n_slots, "vocabulary hash slots");
  t->mask = n_slots - 1;
  for (int64_t e = 0; e < t->n_entries; e++) {
    const vocab_entry *x = &t->entries[e];
    t->slots[find_slot(t, x->text, x->len, x->hash)] = e + 1;
  }
}

static vocab_entry *append_entry(vocab_table *t, const char *w, size_t n, uint64_t h,
                                 uint64_t slot) {
  if (t->n_entries == t->cap_entries) {
    t->cap_entries *= 2;
    vocab_entry *grown = realloc(t->entries, (size_t)t->cap_entries * sizeof *grown);
    if (!grown) RNND_FAIL("out of memory growing the vocabulary to %lld words",
                          (long long)t->cap_entries);
    t->entries = grown;
  }
  vocab_entry *x = &t->entries[t->n_entries++];
  *x = (vocab_entry){.text = w, .len = n, .hash = h, .count = 0, .id = -1};
  t->slots[slot] = t->n_entries;
  if ((uint64_t)t->n_entries * 2 > t->mask + 1) grow_slots(t);
  return x;
}

/* The entry for WORD, added (count 0, no id) if new. */
static vocab_entry *table_intern(vocab_table *t, const char *w, size_t n) {
  uint64_t h = hash_word(w, n);
  uint64_t slot = find_slot(t, w, n, h);
  if (t->slots[slot]) return &t->entries[t->slots[slot] - 1];
  return append_entry(t, w, n, h, slot);
}

static int32_t table_id(const vocab_table *t, const char *w, size_t n) {
  int64_t e = t->slots[find_slot(t, w, n, hash_word(w, n))];
  if (e == 0 || t->entries[e - 1].id < 0) return UNK_ID;
  return t->entries[e - 1].id;
}

/* The specials go in first so that a literal <unk>/<eos> in the text maps to
 * their ids instead of becoming a second word with the same spelling. */
static void table_init(vocab_table *t) {
  memset(t, 0, sizeof *t);
  t->cap_entries = 1 << 12;
  t->entries = RNND_ALLOC(vocab_entry, (size_t)t->cap_entries, "vocabulary");
  t->mask = (1 << 13) - 1;
  t->slots = RNND_ALLOC(int64_t, t->mask + 1, "vocabulary hash slots");
  table_intern(t, EOS_WORD, strlen(EOS_WORD))->id = EOS_ID;
  table_intern(t, UNK_WORD, strlen(UNK_WORD))->id = UNK_ID;
}

static void table_free(vocab_table *t) {
  free(t->entries);
  free(t->slots);
  memset(t, 0, sizeof *t);
}

/* ==== vocabulary ======================================================= */

typedef struct {
  int64_t count, first;
} rank_key;

static int by_count_then_first(const void *pa, const void *pb) {
  const rank_key *a = pa, *b = pb;
  if (a->count != b->count) return a->count > b->count ? -1 : 1;
  return (a->first > b->first) - (a->first < b->first);
}

/* With labels: splits "LABEL<TAB>text" into the label and the text (left in
 * line). Returns 0 for a blank line; a line without a tab or without words
 * after it is an error naming the file and line. */
static int split_label(const text_file *text, cursor *line, cursor *label) {
  const char *p = line->pos;
  while (p < line->end && is_space(*p) && *p != '\t') p++;
  if (p == line->end) return 0;
  const char *tab = memchr(line->pos, '\t', (size_t)(line->end - line->pos));
  if (!tab || tab == line->pos)
    rnnd_input_error("%s:%ld: expected LABEL<TAB>text (--labels)", text->path, line_of(text, (size_t)(p - text->data)));
  *label = (cursor){line->pos, tab};
  line->pos = tab + 1;
  cursor rest = *line;
  const char *w;
  size_t n;
  if (!next_word(&rest, &w, &n))
    rnnd_input_error("%s:%ld: no words after the label", text->path, line_of(text, (size_t)(p - text->data)));
  return 1;
}

static void count_words(vocab_table *t, label_table *labels, const text_file *text) {
  cursor all = {text->data, text->data + text->size}, line, label;
  const char *w;
  size_t n;
  while (next_line(&all, &line)) {
    if (labels) {
      if (!split_label(text, &line, &label)) continue;
      label_table_add(labels, label.pos, (size_t)(label.end - label.pos));
    }
    while (next_word(&line, &w, &n)) table_intern(t, w, n)->count++;
  }
}

/* Gives ids 2.. to the words that pass --min-count/--max-vocab; returns the
 * vocabulary size (specials included). */
static int32_t assign_ids(vocab_table *t, const rnnd_prep_options *opt) {
  int64_t n_words = t->n_entries - 2, kept = 0;
  rank_key *keys = RNND_ALLOC(rank_key, (size_t)n_words, "vocabulary ranking");
  for (int64_t e = 2; e < t->n_entries; e++)
    if (t->entries[e].count >= opt->min_count) keys[kept++] = (rank_key){t->entries[e].count, e};
  qsort(keys, (size_t)kept, sizeof *keys, by_count_then_first);
  if (opt->max_vocab > 0 && kept > opt->max_vocab - 2) kept = opt->max_vocab - 2;
  if (kept > INT32_MAX - 2) rnnd_input_error("%s: more than 2^31 distinct words", opt->train);
  for (int64_t k = 0; k < kept; k++) t->entries[keys[k].first].id = (int32_t)(k + 2);
  free(keys);
  return (int32_t)(kept + 2);
}

/* NUL-terminated copies of the vocabulary in id order. */
static char **vocab_words(const vocab_table *t, int32_t vocab_size) {
  char **words = RNND_ALLOC(char *, (size_t)vocab_size, "vocabulary words");
  for (int64_t e = 0; e < t->n_entries; e++) {
    const vocab_entry *x = &t->entries[e];
    if (x->id < 0) continue;
    words[x->id] = rnnd_malloc(x->len + 1, "vocabulary word");
    memcpy(words[x->id], x->text, x->len);
    words[x->id][x->len] = '\0';
  }
  return words;
}

static void free_words(char **words, int32_t n) {
  for (int32_t i = 0; i < n; i++) free(words[i]);
  free(words);
}

/* ==== encoding ========================================================= */

typedef struct {
  int32_t *tokens;
  int64_t n_tokens, cap_tokens;
  int64_t *offsets; /* n_sequences + 1 */
  int64_t n_sequences, cap_offsets;
  int64_t n_unk;
  int32_t *labels;  /* --labels: one per sequence */
  int64_t cap_labels;
} encoded;

static void *grow_array(void *p, int64_t *cap, size_t elem, const char *what) {
  *cap = *cap ? *cap * 2 : 1 << 16;
  void *grown = realloc(p, (size_t)*cap * elem);
  if (!grown) RNND_FAIL("out of memory growing %s to %lld entries", what, (long long)*cap);
  return grown;
}

static void push_token(encoded *out, int32_t id) {
  if (out->n_tokens == out->cap_tokens)
    out->tokens = grow_array(out->tokens, &out->cap_tokens, sizeof *out->tokens, "tokens");
  out->tokens[out->n_tokens++] = id;
  out->n_unk += id == UNK_ID;
}

static void push_offset(encoded *out, int64_t offset) {
  if (out->n_sequences + 1 >= out->cap_offsets)
    out->offsets = grow_array(out->offsets, &out->cap_offsets, sizeof *out->offsets, "offsets");
  out->offsets[++out->n_sequences] = offset;
}

static void push_label(encoded *out, const text_file *text, const label_table *labels, cursor label) {
  int32_t id = label_table_find(labels, label.pos, (size_t)(label.end - label.pos));
  if (id < 0)
    rnnd_input_error("%s:%ld: label '%.*s' does not occur in the training set", text->path,
                     line_of(text, (size_t)(label.pos - text->data)), (int)(label.end - label.pos), label.pos);
  if (out->n_sequences == out->cap_labels)
    out->labels = grow_array(out->labels, &out->cap_labels, sizeof *out->labels, "labels");
  out->labels[out->n_sequences] = id;
}

/* One sequence "w1 .. wn <eos>" per line that has at least one word. */
static void encode_text(encoded *out, const text_file *text, const vocab_table *t, const label_table *labels) {
  memset(out, 0, sizeof *out);
  out->offsets = grow_array(NULL, &out->cap_offsets, sizeof *out->offsets, "offsets");
  out->offsets[0] = 0;
  cursor all = {text->data, text->data + text->size}, line, label;
  const char *w;
  size_t n;
  while (next_line(&all, &line)) {
    if (labels) {
      if (!split_label(text, &line, &label)) continue;
      push_label(out, text, labels, label);
    }
    int64_t words = 0;
    for (; next_word(&line, &w, &n); words++) push_token(out, table_id(t, w, n));
    if (words == 0) continue;
    push_token(out, EOS_ID);
    push_offset(out, out->n_tokens);
  }
  if (out->n_sequences == 0)
    rnnd_input_error("%s: no non-blank lines (empty data set)", text->path);
}

static void encoded_free(encoded *e) {
  free(e->labels);
  free(e->tokens);
  free(e->offsets);
  memset(e, 0, sizeof *e);
}

/* ==== HDF5 output (prep_writer.h) ===================================== */

static void write_attributes(h5_writer *w, int32_t vocab_size) {
  const char *format = FORMAT_NAME;
  hid_t type = utf8_string_type(w);
  write_attribute(w, "format", type, type, &format);
  WCHECK(w, H5Tclose(type), "cannot close a string type");
  write_int_attribute(w, "format_version", FORMAT_VERSION);
  write_int_attribute(w, "vocab_size", vocab_size);
  write_int_attribute(w, "eos_id", EOS_ID);
  write_int_attribute(w, "unk_id", UNK_ID);
}

static void write_dataset(const char *dir, const char *name, const encoded *data, char **words,
                          int32_t vocab_size, const label_table *labels) {
  h5_writer w;
  writer_open(&w, dir, name);
  write_attributes(&w, vocab_size);
  write_vector(&w, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, data->tokens,
               (hsize_t)data->n_tokens);
  write_vector(&w, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, data->offsets,
               (hsize_t)data->n_sequences + 1);
  write_strings(&w, "vocab", words, vocab_size);
  if (labels) {
    write_int_attribute(&w, "n_classes", labels->count);
    write_vector(&w, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, data->labels, (hsize_t)data->n_sequences);
    write_strings(&w, "label_names", labels->names, labels->count);
  }
  writer_commit(&w);
}

/* ==== driver =========================================================== */

static void print_summary(const char *dir, const char *name, const encoded *e) {
  printf("%s/%s: %lld sequences, %lld tokens (incl. <eos>), %lld <unk> (%.2f%%)\n", dir, name,
         (long long)e->n_sequences, (long long)e->n_tokens, (long long)e->n_unk,
         100.0 * (double)e->n_unk / (double)e->n_tokens);
}

void prep_run(const rnnd_prep_options *opt) {
  if (opt->csv) {
    prep_csv_run(opt);
    return;
  }
  if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) RNND_FAIL("cannot silence HDF5 errors");
  const char *paths[3] = {opt->train, opt->valid, opt->test};
  const char *names[3] = {"train.h5", "valid.h5", "test.h5"};
  int n_files = opt->test ? 3 : 2;
  text_file texts[3];
  encoded data[3];
  vocab_table table;
  table_init(&table);
  label_table label_storage, *labels = opt->labels ? &label_storage : NULL;
  if (labels) label_table_init(labels);
  /* Read and encode everything before writing anything, so bad input never
   * leaves a mix of new and old output files. */
  for (int i = 0; i < n_files; i++) read_text(&texts[i], paths[i], opt->lowercase);
  count_words(&table, labels, &texts[0]);
  if (labels) label_table_finish(labels);
  int32_t vocab_size = assign_ids(&table, opt);
  for (int i = 0; i < n_files; i++) encode_text(&data[i], &texts[i], &table, labels);
  char **words = vocab_words(&table, vocab_size);
  make_directories(opt->out_dir);
  for (int i = 0; i < n_files; i++)
    write_dataset(opt->out_dir, names[i], &data[i], words, vocab_size, labels);
  printf("vocabulary: %d entries (<eos> = %d, <unk> = %d) from %lld word types in %s\n",
         (int)vocab_size, EOS_ID, UNK_ID, (long long)(table.n_entries - 2), opt->train);
  if (labels) printf("labels: %d classes in %s\n", (int)labels->count, opt->train);
  for (int i = 0; i < n_files; i++) print_summary(opt->out_dir, names[i], &data[i]);
  if (labels) label_table_free(labels);
  free_words(words, vocab_size);
  table_free(&table);
  for (int i = 0; i < n_files; i++) {
    encoded_free(&data[i]);
    free(texts[i].data);
  }
}
