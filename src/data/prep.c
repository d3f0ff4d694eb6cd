/* prep.c — rnn_prep (prep.h): command line, streamed text reading and
 * tokenising, the vocabulary hash table, encoding, and atomic HDF5 output in
 * the layout that dataset_load() reads (docs/formats.md). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/prep.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rnnd/common.h"
#include "rnnd/label_table.h"
#include "rnnd/options.h"
#include "rnnd/words.h"
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
    "  --deflate N      compress /tokens, /offsets and /labels with zlib level N\n"
    "                   (1-9; default 0 = stored as they are: fastest to write,\n"
    "                   and to read a batch's pieces during training)\n"
    "  --labels         classification data: every line is LABEL<TAB>text; writes\n"
    "                   /labels and /label_names too (model.task = classify)\n"
    "  --csv            time series (model.task = regress): a header of column\n"
    "                   names, one row per step, every column a number except an\n"
    "                   optional series_id (consecutive rows with one id are one\n"
    "                   series); per-feature mean/std from the training file\n"
    "  --help           print this help and exit\n";

static void check_options(const rnnd_prep_options *opt) {
  if (!opt->train) rnnd_input_error("missing --train FILE (see rnn_prep --help)");
  if (!opt->valid) rnnd_input_error("missing --valid FILE (see rnn_prep --help)");
  if (!opt->out_dir) rnnd_input_error("missing --out DIR (see rnn_prep --help)");
  if (opt->out_dir[0] == '\0') rnnd_input_error("--out: the directory name is empty");
  if (opt->min_count < 1) rnnd_input_error("--min-count must be at least 1");
  if (opt->max_vocab == 1)
    rnnd_input_error("--max-vocab must be 0 (unlimited) or at least 2 (<eos> and <unk>)");
  if (opt->deflate > 9) rnnd_input_error("--deflate must be 0 (no compression) to 9");
  if (opt->csv && (opt->labels || opt->lowercase || opt->max_vocab || opt->min_count != 1 || opt->deflate))
    rnnd_input_error("--csv takes no text options (--labels, --lowercase, --min-count, --max-vocab, --deflate)");
}

static const struct option prep_options[] = {
    {"train", required_argument, NULL, 't'},     {"valid", required_argument, NULL, 'v'},
    {"test", required_argument, NULL, 'x'},      {"out", required_argument, NULL, 'o'},
    {"min-count", required_argument, NULL, 'm'}, {"max-vocab", required_argument, NULL, 'M'},
    {"deflate", required_argument, NULL, 'z'},   {"lowercase", no_argument, NULL, 'l'},
    {"labels", no_argument, NULL, 'L'},          {"csv", no_argument, NULL, 'c'},
    {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0}};

int prep_parse_args(rnnd_prep_options *opt, int argc, char **argv) {
  memset(opt, 0, sizeof *opt);
  opt->min_count = 1;
  int c;
  while ((c = options_next(argc, argv, ":h", prep_options, "rnn_prep")) != -1) {
    switch (c) {
      case 'h': fputs(usage_text, stdout); return 1;
      case 't': opt->train = optarg; break;
      case 'v': opt->valid = optarg; break;
      case 'x': opt->test = optarg; break;
      case 'o': opt->out_dir = optarg; break;
      case 'm': opt->min_count = options_int("--min-count", optarg, 0, INT32_MAX); break;
      case 'M': opt->max_vocab = options_int("--max-vocab", optarg, 0, INT32_MAX); break;
      case 'z': opt->deflate = options_int("--deflate", optarg, 0, INT32_MAX); break;
      case 'l': opt->lowercase = 1; break;
      case 'L': opt->labels = 1; break;
      case 'c': opt->csv = 1; break;
    }
  }
  check_options(opt);
  return 0;
}

/* ==== text, streamed ==================================================== */

/* Reads a text file a block at a time and hands out whole lines, validated
 * (no NUL byte, valid UTF-8: the vocabulary is stored as UTF-8 strings) and
 * lowercased if asked, so memory is the block, or the longest line if
 * longer, whatever the file's size. */
typedef struct {
  const char *path;
  FILE *file;
  int lowercase;
  char *buf;          /* owned; [pos, len) not handed out yet */
  size_t cap, len, pos;
  long line;          /* number of the line last handed out (1-based) */
  int at_end;
} text_stream;

#define TEXT_BLOCK ((size_t)1 << 23)
#define TEXT_PAD 8 /* bytes allocated past the buffer's capacity: word_head reads 8 bytes at a word */

static void stream_open(text_stream *t, const char *path, int lowercase) {
  *t = (text_stream){.path = path, .lowercase = lowercase, .cap = TEXT_BLOCK};
  t->file = fopen(path, "rb");
  if (!t->file) rnnd_input_error("%s: cannot open (%s)", path, strerror(errno));
  t->buf = rnnd_calloc(t->cap + TEXT_PAD, 1, "text block");
}

static void stream_close(text_stream *t) {
  fclose(t->file);
  free(t->buf);
}

/* Moves what is left to the front, grows the buffer if a line fills it,
 * and reads more; sets at_end once the file is exhausted. */
static void stream_fill(text_stream *t) {
  memmove(t->buf, t->buf + t->pos, t->len - t->pos);
  t->len -= t->pos, t->pos = 0;
  if (t->len == t->cap) {
    t->cap *= 2;
    char *grown = realloc(t->buf, t->cap + TEXT_PAD);
    if (!grown) RNND_FAIL("out of memory reading %s (a line of %zu bytes)", t->path, t->len);
    t->buf = grown;
  }
  size_t got = fread(t->buf + t->len, 1, t->cap - t->len, t->file);
  if (got == 0 && ferror(t->file)) rnnd_input_error("%s: cannot read (%s)", t->path, strerror(errno));
  t->len += got;
  t->at_end = got == 0;
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

/* 8 bytes, all ASCII and none zero: the common case, checked a word at a time. */
static int plain_ascii8(const unsigned char *s) {
  uint64_t v;
  memcpy(&v, s, sizeof v);
  const uint64_t high = 0x8080808080808080ull, ones = 0x0101010101010101ull;
  return !(v & high) && !((v - ones) & ~v & high);
}

static void check_line(const text_stream *t, const char *line, size_t n) {
  const unsigned char *s = (const unsigned char *)line;
  for (size_t i = 0; i < n;) {
    if (i + 8 <= n && plain_ascii8(s + i)) {
      i += 8;
      continue;
    }
    if (s[i] == 0) rnnd_input_error("%s:%ld: contains a NUL byte (not a text file?)", t->path, t->line);
    size_t len = utf8_length(s + i, n - i);
    if (len == 0) rnnd_input_error("%s:%ld: invalid UTF-8", t->path, t->line);
    i += len;
  }
}


typedef rnnd_text_cursor cursor;

/* The next line (without its '\n'), checked; 0 at the end of the file. The
 * line stays valid until the next call. */
static int stream_line(text_stream *t, cursor *line) {
  char *nl;
  while (!(nl = memchr(t->buf + t->pos, '\n', t->len - t->pos))) {
    if (t->at_end) {
      if (t->pos == t->len) return 0;
      nl = t->buf + t->len; /* a last line without its newline */
      break;
    }
    stream_fill(t);
  }
  char *start = t->buf + t->pos;
  t->pos = nl < t->buf + t->len ? (size_t)(nl - t->buf) + 1 : t->len;
  t->line++;
  check_line(t, start, (size_t)(nl - start));
  if (t->lowercase) words_lowercase_ascii(start, nl);
  *line = (cursor){start, nl};
  return 1;
}



/* ==== vocabulary hash table (open addressing, linear probing) ========== */

/* A word of the vocabulary, in order of first occurrence. */
typedef struct {
  const char *text; /* in the table's word arena; not NUL-terminated */
  size_t len;
  int64_t count;    /* training occurrences (table_collect_counts fills it in) */
  int32_t id;       /* -1: not in the vocabulary (maps to <unk>) */
} vocab_entry;

/* A slot is 16 bytes and says whether it holds a word without looking
 * further for words of at most 8 bytes (most words: the text has no NUL, so
 * the zero-padded first 8 bytes are the word), so a look-up usually touches
 * one cache line of a small array: look-ups are most of rnn_prep's time. */
typedef struct {
  uint32_t tag;   /* the hash's high half */
  uint32_t entry; /* index + 1 into entries; 0 = empty */
  uint64_t head;  /* the word's first 8 bytes, zero-padded (word_head) */
} vocab_slot;

/* The words' bytes, in blocks that never move (entries point into them). */
typedef struct word_block {
  struct word_block *next;
  size_t used, cap;
  char bytes[];
} word_block;

typedef struct {
  word_block *words;    /* newest block first */
  vocab_entry *entries; /* in order of first occurrence; 0 and 1 are the specials */
  int64_t *counts;      /* [cap_entries] running counts, by entry (table_collect_counts) */
  int64_t n_entries, cap_entries;
  vocab_slot *slots;
  uint64_t mask; /* slot count - 1 (a power of two) */
} vocab_table;

/* The first 8 bytes of a word as one number, zero-padded. Reads 8 bytes
 * at w: words come from the text buffer, which has TEXT_PAD bytes to spare
 * after its end, or from padded literals. */
static uint64_t word_head(const char *w, size_t n) {
  uint64_t v;
  memcpy(&v, w, sizeof v);
  return n >= 8 ? v : v & ((1ull << (8 * n)) - 1);
}

/* A word's hash: 8 bytes at a time (a multiply per 8 bytes, not per byte),
 * mixed so the low bits the table uses depend on every byte. */
static uint64_t hash_word(const char *s, size_t n) {
  const uint64_t k = 0x9E3779B97F4A7C15ull;
  uint64_t h = (uint64_t)n * k;
  for (; n >= 8; s += 8, n -= 8) {
    uint64_t v;
    memcpy(&v, s, 8);
    h = (h ^ v) * k;
    h ^= h >> 29;
  }
  if (n) h = (h ^ word_head(s, n)) * k; /* the last 1..7 bytes, zero-padded */
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  return h ^ (h >> 32);
}

/* next_word, with the word's hash_word. */
static int next_hashed_word(cursor *line, const char **word, size_t *len, uint64_t *hash) {
  if (!words_next(line, word, len)) return 0;
  *hash = hash_word(*word, *len);
  return 1;
}

static int slot_holds(const vocab_table *t, const vocab_slot *x, const char *w, size_t n, uint64_t h, uint64_t head) {
  if (x->tag != (uint32_t)(h >> 32) || x->head != head) return 0;
  if (n <= 8) return 1;
  const vocab_entry *e = &t->entries[x->entry - 1];
  return e->len == n && memcmp(e->text + 8, w + 8, n - 8) == 0;
}

/* Slot holding WORD, or the empty slot where it would go. */
static uint64_t find_slot(const vocab_table *t, const char *w, size_t n, uint64_t h) {
  const uint64_t head = word_head(w, n);
  for (uint64_t s = h & t->mask;; s = (s + 1) & t->mask)
    if (t->slots[s].entry == 0 || slot_holds(t, &t->slots[s], w, n, h, head)) return s;
}

/* Doubles the slot array; keeps the load factor at or below one half. */
static void grow_slots(vocab_table *t) {
  uint64_t n_slots = (t->mask + 1) * 2;
  vocab_slot *old = t->slots;
  uint64_t old_slots = t->mask + 1;
  t->slots = RNND_ALLOC(vocab_slot, n_slots, "vocabulary hash slots");
  t->mask = n_slots - 1;
  for (uint64_t i = 0; i < old_slots; i++) {
    if (!old[i].entry) continue;
    const vocab_entry *e = &t->entries[old[i].entry - 1];
    uint64_t s = hash_word(e->text, e->len) & t->mask;
    while (t->slots[s].entry) s = (s + 1) & t->mask;
    t->slots[s] = old[i];
  }
  free(old);
}

/* A lasting copy of the n bytes at w. */
static const char *keep_word(vocab_table *t, const char *w, size_t n) {
  word_block *b = t->words;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > ((size_t)1 << 20) ? n : (size_t)1 << 20;
    word_block *fresh = rnnd_calloc(1, sizeof *fresh + cap + 8, "vocabulary words"); /* + 8: word_head */
    *fresh = (word_block){.next = b, .used = 0, .cap = cap};
    t->words = b = fresh;
  }
  char *copy = b->bytes + b->used;
  memcpy(copy, w, n);
  b->used += n;
  return copy;
}

static vocab_slot *append_entry(vocab_table *t, const char *w, size_t n, uint64_t h, uint64_t slot) {
  if (n > UINT32_MAX) RNND_FAIL("a word of %zu bytes", n);
  if (t->n_entries == t->cap_entries) {
    t->cap_entries *= 2;
    vocab_entry *grown = realloc(t->entries, (size_t)t->cap_entries * sizeof *grown);
    int64_t *counts = realloc(t->counts, (size_t)t->cap_entries * sizeof *counts);
    if (!grown || !counts) RNND_FAIL("out of memory growing the vocabulary to %lld words", (long long)t->cap_entries);
    t->entries = grown, t->counts = counts;
  }
  t->counts[t->n_entries] = 0;
  t->entries[t->n_entries++] = (vocab_entry){.text = keep_word(t, w, n), .len = n, .id = -1};
  vocab_slot *x = &t->slots[slot];
  *x = (vocab_slot){.tag = (uint32_t)(h >> 32), .entry = (uint32_t)t->n_entries, .head = word_head(w, n)};
  if ((uint64_t)t->n_entries * 2 > t->mask + 1) {
    grow_slots(t);
    x = &t->slots[find_slot(t, w, n, h)];
  }
  return x;
}

/* The slot of WORD, added (count 0, no id) if new; h: hash_word(w, n). */
static vocab_slot *table_intern(vocab_table *t, const char *w, size_t n, uint64_t h) {
  uint64_t slot = find_slot(t, w, n, h);
  if (t->slots[slot].entry) return &t->slots[slot];
  return append_entry(t, w, n, h, slot);
}

static int32_t table_id(const vocab_table *t, const char *w, size_t n, uint64_t h) {
  uint32_t e = t->slots[find_slot(t, w, n, h)].entry;
  if (e == 0 || t->entries[e - 1].id < 0) return UNK_ID;
  return t->entries[e - 1].id;
}

/* The running counts into the entries (after counting). */
static void table_collect_counts(vocab_table *t) {
  for (int64_t e = 0; e < t->n_entries; e++) t->entries[e].count = t->counts[e];
}

/* The specials go in first so that a literal <unk>/<eos> in the text maps to
 * their ids instead of becoming a second word with the same spelling. */
static void table_init(vocab_table *t) {
  memset(t, 0, sizeof *t);
  t->cap_entries = 1 << 12;
  t->entries = RNND_ALLOC(vocab_entry, (size_t)t->cap_entries, "vocabulary");
  t->counts = RNND_ALLOC(int64_t, (size_t)t->cap_entries, "word counts");
  t->mask = (1 << 13) - 1;
  t->slots = RNND_ALLOC(vocab_slot, t->mask + 1, "vocabulary hash slots");
  static const char eos[16] = EOS_WORD, unk[16] = UNK_WORD; /* padded: word_head reads 8 bytes */
  table_intern(t, eos, strlen(eos), hash_word(eos, strlen(eos)));
  table_intern(t, unk, strlen(unk), hash_word(unk, strlen(unk)));
  t->entries[0].id = EOS_ID, t->entries[1].id = UNK_ID;
}

static void table_free(vocab_table *t) {
  while (t->words) {
    word_block *next = t->words->next;
    free(t->words);
    t->words = next;
  }
  free(t->entries);
  free(t->counts);
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
static int split_label(const text_stream *text, cursor *line, cursor *label) {
  const char *p = line->pos;
  while (p < line->end && words_is_space(*p) && *p != '\t') p++;
  if (p == line->end) return 0;
  const char *tab = memchr(line->pos, '\t', (size_t)(line->end - line->pos));
  if (!tab || tab == line->pos) rnnd_input_error("%s:%ld: expected LABEL<TAB>text (--labels)", text->path, text->line);
  *label = (cursor){line->pos, tab};
  line->pos = tab + 1;
  cursor rest = *line;
  const char *w;
  size_t n;
  if (!words_next(&rest, &w, &n)) rnnd_input_error("%s:%ld: no words after the label", text->path, text->line);
  return 1;
}

/* The next line that may make a sequence (with labels "LABEL<TAB>words",
 * label set); 0 at the end of the file. Without labels it may hold no word
 * (a blank line), which makes no sequence. */
static int next_sequence(text_stream *text, int labelled, cursor *line, cursor *label) {
  while (stream_line(text, line))
    if (!labelled || split_label(text, line, label)) return 1;
  return 0;
}

/* The training set's id of a split's label, or an error naming the line. */
static int32_t label_id(const text_stream *text, const label_table *labels, cursor label) {
  int32_t id = label_table_find(labels, label.pos, (size_t)(label.end - label.pos));
  if (id < 0)
    rnnd_input_error("%s:%ld: label '%.*s' does not occur in the training set", text->path, text->line,
                     (int)(label.end - label.pos), label.pos);
  return id;
}

/* The training text as the vocabulary entries of its words, in order, with
 * END_OF_SEQUENCE after each sequence: written by pass 1 to a file in the
 * output directory, or its nearest existing parent before it is made
 * (unlinked as soon as it is made, so it never outlives the process), read
 * back by pass 2, which then needs no second look-up of every word. A
 * buffer at a time: 4 bytes a word on disk, not in memory. */
typedef struct {
  int fd;
  uint32_t *buf;
  size_t n, at, cap;
  const char *dir;
} entry_stream;

#define END_OF_SEQUENCE UINT32_MAX
#define ENTRY_BUFFER ((size_t)1 << 20)

/* The output directory if it exists, else its nearest existing ancestor
 * (the same file system, and nothing is created before the input is
 * checked); caller frees. */
static char *scratch_dir(const char *out_dir) {
  char *dir = rnnd_strdup(out_dir);
  struct stat st;
  while (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    char *slash = strrchr(dir, '/');
    if (!slash) {
      free(dir);
      return rnnd_strdup(".");
    }
    if (slash == dir) {
      dir[1] = '\0'; /* "/" */
      break;
    }
    *slash = '\0';
  }
  return dir;
}

static void entries_open(entry_stream *e, const char *out_dir) {
  char *dir = scratch_dir(out_dir), *path = join_path(dir, ".rnn_prep_entries.tmp");
  free(dir);
  *e = (entry_stream){.fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), .cap = ENTRY_BUFFER,
                      .dir = out_dir};
  if (e->fd < 0) rnnd_input_error("%s: cannot create a scratch file (%s)", path, strerror(errno));
  unlink(path);
  free(path);
  e->buf = RNND_ALLOC(uint32_t, e->cap, "word entries buffer");
}

static void entries_flush(entry_stream *e) {
  const char *p = (const char *)e->buf;
  size_t left = e->n * sizeof *e->buf;
  while (left > 0) {
    ssize_t done = write(e->fd, p, left);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) rnnd_input_error("%s: cannot write the scratch file (%s)", e->dir, strerror(errno));
    p += done, left -= (size_t)done;
  }
  e->n = 0;
}

static void entries_put(entry_stream *e, uint32_t value) {
  if (e->n == e->cap) entries_flush(e);
  e->buf[e->n++] = value;
}

/* Back to the start, for reading. */
static void entries_rewind(entry_stream *e) {
  entries_flush(e);
  if (lseek(e->fd, 0, SEEK_SET) != 0) rnnd_input_error("%s: cannot read the scratch file (%s)", e->dir, strerror(errno));
  e->n = e->at = 0;
}

/* The next value into *value; 0 at the end. */
static int entries_next(entry_stream *e, uint32_t *value) {
  if (e->at == e->n) {
    ssize_t got;
    do got = read(e->fd, e->buf, e->cap * sizeof *e->buf);
    while (got < 0 && errno == EINTR);
    if (got < 0) rnnd_input_error("%s: cannot read the scratch file (%s)", e->dir, strerror(errno));
    e->n = (size_t)got / sizeof *e->buf, e->at = 0;
    if (e->n == 0) return 0;
  }
  *value = e->buf[e->at++];
  return 1;
}

static void entries_close(entry_stream *e) {
  close(e->fd);
  free(e->buf);
}

/* Pass 1 over the training text: word counts and labels; without labels
 * also the entry stream of the text (entries != NULL). */
static void count_words(vocab_table *t, label_table *labels, const rnnd_prep_options *opt, entry_stream *entries) {
  text_stream text;
  stream_open(&text, opt->train, opt->lowercase);
  cursor line, label;
  int64_t sequences = 0;
  const char *w;
  size_t n;
  uint64_t h;
  while (next_sequence(&text, labels != NULL, &line, &label)) {
    if (labels) label_table_add(labels, label.pos, (size_t)(label.end - label.pos));
    int64_t words = 0;
    for (; next_hashed_word(&line, &w, &n, &h); words++) {
      uint32_t e = table_intern(t, w, n, h)->entry - 1;
      t->counts[e]++;
      if (entries) entries_put(entries, e);
    }
    if (words > 0 && entries) entries_put(entries, END_OF_SEQUENCE);
    sequences += words > 0;
  }
  if (sequences == 0) rnnd_input_error("%s: no non-blank lines (empty data set)", opt->train);
  table_collect_counts(t);
  if (t->n_entries >= (int64_t)END_OF_SEQUENCE) rnnd_input_error("%s: more than 2^32 distinct words", opt->train);
  stream_close(&text);
}

/* Pass 1 over the other splits: readable text, labels the training set
 * has, at least one sequence; so that writing never meets bad input. */
static void check_split(const char *path, const rnnd_prep_options *opt, const label_table *labels) {
  text_stream text;
  stream_open(&text, path, opt->lowercase);
  cursor line, label;
  int64_t sequences = 0;
  const char *w;
  size_t n;
  while (next_sequence(&text, labels != NULL, &line, &label)) {
    if (labels) label_id(&text, labels, label);
    sequences += words_next(&line, &w, &n);
  }
  if (sequences == 0) rnnd_input_error("%s: no non-blank lines (empty data set)", path);
  stream_close(&text);
}

/* Gives ids 2.. to the words that pass --min-count/--max-vocab; returns the
 * vocabulary size (specials included). */
static int32_t assign_ids(vocab_table *t, const rnnd_prep_options *opt) {
  int64_t n_words = t->n_entries - 2, kept = 0;
  rank_key *keys = RNND_ALLOC(rank_key, (size_t)(n_words > 0 ? n_words : 1), "vocabulary ranking");
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

/* ==== pass 2: encoding, straight into the output file ================== */

#define TOKEN_BUFFER ((size_t)1 << 20)
#define ROW_BUFFER ((size_t)1 << 16)
/* Chunks of /tokens: a batch reads its pieces chunk by chunk (token_store.h),
 * so small enough that a piece costs little more than its own bytes. */
#define TOKEN_CHUNK ((hsize_t)1 << 14)

typedef struct {
  int64_t n_sequences, n_tokens, n_unk;
} split_counts;

/* One split's arrays on their way to the file, a buffer at a time. */
typedef struct {
  h5_appender tokens, offsets, labels;
  int32_t *token_buf, *label_buf;
  int64_t *offset_buf;
  size_t n_token_buf, n_offset_buf, n_label_buf;
  split_counts counts;
} split_writer;

static void split_flush(split_writer *s) {
  appender_add(&s->tokens, s->token_buf, s->n_token_buf);
  appender_add(&s->offsets, s->offset_buf, s->n_offset_buf);
  if (s->label_buf) appender_add(&s->labels, s->label_buf, s->n_label_buf);
  s->n_token_buf = s->n_offset_buf = s->n_label_buf = 0;
}

static void push_token(split_writer *s, int32_t id) {
  if (s->n_token_buf == TOKEN_BUFFER) split_flush(s);
  s->token_buf[s->n_token_buf++] = id;
  s->counts.n_tokens++;
  s->counts.n_unk += id == UNK_ID;
}

/* Ends a sequence: its <eos>, its end offset and (with labels) its label. */
static void end_sequence(split_writer *s, int32_t label) {
  push_token(s, EOS_ID);
  if (s->n_offset_buf == ROW_BUFFER || s->n_label_buf == ROW_BUFFER) split_flush(s);
  s->offset_buf[s->n_offset_buf++] = s->counts.n_tokens;
  if (s->label_buf) s->label_buf[s->n_label_buf++] = label;
  s->counts.n_sequences++;
}

static void split_open(split_writer *s, h5_writer *w, int labelled, int deflate) {
  memset(s, 0, sizeof *s);
  appender_open(&s->tokens, w, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, TOKEN_CHUNK, deflate);
  appender_open(&s->offsets, w, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, TOKEN_CHUNK, deflate);
  s->token_buf = RNND_ALLOC(int32_t, TOKEN_BUFFER, "token buffer");
  s->offset_buf = RNND_ALLOC(int64_t, ROW_BUFFER, "offset buffer");
  s->offset_buf[s->n_offset_buf++] = 0;
  if (labelled) {
    appender_open(&s->labels, w, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, TOKEN_CHUNK, deflate);
    s->label_buf = RNND_ALLOC(int32_t, ROW_BUFFER, "label buffer");
  }
}

static void split_close(split_writer *s) {
  split_flush(s);
  appender_close(&s->tokens);
  appender_close(&s->offsets);
  if (s->label_buf) appender_close(&s->labels);
  free(s->token_buf);
  free(s->offset_buf);
  free(s->label_buf);
}

/* lowercase: what --lowercase did to the text, so that a model trained on
 * the set tokenises new text the same way (rnn_dist generate). */
static void write_attributes(h5_writer *w, int32_t vocab_size, int lowercase) {
  const char *format = FORMAT_NAME;
  hid_t type = utf8_string_type(w);
  write_attribute(w, "format", type, type, &format);
  WCHECK(w, H5Tclose(type), "cannot close a string type");
  write_int_attribute(w, "format_version", FORMAT_VERSION);
  write_int_attribute(w, "vocab_size", vocab_size);
  write_int_attribute(w, "eos_id", EOS_ID);
  write_int_attribute(w, "unk_id", UNK_ID);
  write_int_attribute(w, "lowercase", lowercase);
}

/* The vocabulary and what every split shares. */
typedef struct {
  const vocab_table *table;
  char **words;
  int32_t vocab_size;
  const label_table *labels;
} vocabulary;

/* Pass 2 over one split: one sequence "w1 .. wn <eos>" per line with at
 * least one word, written to w's temporary file (renamed by the caller once
 * every split is written). */
static split_counts encode_split(h5_writer *w, const char *path, const rnnd_prep_options *opt,
                                 const vocabulary *v) {
  write_attributes(w, v->vocab_size, opt->lowercase);
  split_writer out;
  split_open(&out, w, v->labels != NULL, opt->deflate);
  text_stream text;
  stream_open(&text, path, opt->lowercase);
  cursor line, label;
  const char *word;
  size_t n;
  uint64_t h;
  while (next_sequence(&text, v->labels != NULL, &line, &label)) {
    int64_t words = 0;
    for (; next_hashed_word(&line, &word, &n, &h); words++) push_token(&out, table_id(v->table, word, n, h));
    if (words) end_sequence(&out, v->labels ? label_id(&text, v->labels, label) : 0);
  }
  stream_close(&text);
  split_close(&out);
  write_strings(w, "vocab", v->words, v->vocab_size);
  if (v->labels) {
    write_int_attribute(w, "n_classes", v->labels->count);
    write_strings(w, "label_names", v->labels->names, v->labels->count);
  }
  return out.counts;
}

/* Pass 2 over the training text, from pass 1's entry stream: ids from the
 * entries, no text to read or words to look up. */
static split_counts encode_from_entries(h5_writer *w, entry_stream *entries, const rnnd_prep_options *opt,
                                        const vocabulary *v) {
  write_attributes(w, v->vocab_size, opt->lowercase);
  split_writer out;
  split_open(&out, w, 0, opt->deflate);
  entries_rewind(entries);
  /* entry -> id, compact enough to stay in cache */
  int32_t *id_of = RNND_ALLOC(int32_t, (size_t)v->table->n_entries, "entry ids");
  for (int64_t e = 0; e < v->table->n_entries; e++)
    id_of[e] = v->table->entries[e].id >= 0 ? v->table->entries[e].id : UNK_ID;
  uint32_t e;
  while (entries_next(entries, &e)) {
    if (e == END_OF_SEQUENCE) end_sequence(&out, 0);
    else push_token(&out, id_of[e]);
  }
  free(id_of);
  split_close(&out);
  write_strings(w, "vocab", v->words, v->vocab_size);
  return out.counts;
}

/* ==== driver =========================================================== */

static void print_summary(const char *dir, const char *name, const split_counts *c) {
  printf("%s/%s: %lld sequences, %lld tokens (incl. <eos>), %lld <unk> (%.2f%%)\n", dir, name,
         (long long)c->n_sequences, (long long)c->n_tokens, (long long)c->n_unk,
         100.0 * (double)c->n_unk / (double)c->n_tokens);
}

/* Two passes over the text, a block at a time: count the training words
 * (and check the other splits), then encode every split into its file.
 * Memory is the vocabulary and fixed buffers, whatever the corpus size. All
 * files are written under temporary names and renamed only when every one
 * is complete, so bad input or a full disk never leaves a mix of new and old
 * output files. */
void prep_run(const rnnd_prep_options *opt) {
  if (opt->csv) {
    prep_csv_run(opt);
    return;
  }
  if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) RNND_FAIL("cannot silence HDF5 errors");
  const char *paths[3] = {opt->train, opt->valid, opt->test};
  const char *names[3] = {"train.h5", "valid.h5", "test.h5"};
  int n_files = opt->test ? 3 : 2;
  vocab_table table;
  table_init(&table);
  label_table label_storage, *labels = opt->labels ? &label_storage : NULL;
  if (labels) label_table_init(labels);
  entry_stream entries; /* labelled text is read twice instead */
  if (!labels) entries_open(&entries, opt->out_dir);
  count_words(&table, labels, opt, labels ? NULL : &entries);
  if (labels) label_table_finish(labels);
  for (int i = 1; i < n_files; i++) check_split(paths[i], opt, labels);
  make_directories(opt->out_dir); /* only now: bad input leaves nothing behind */
  vocabulary v = {.table = &table, .vocab_size = assign_ids(&table, opt), .labels = labels};
  v.words = vocab_words(&table, v.vocab_size);
  h5_writer writers[3] = {0};
  split_counts counts[3];
  for (int i = 0; i < n_files; i++) {
    writer_open_in_group(&writers[i], opt->out_dir, names[i], writers, n_files);
    counts[i] = i == 0 && !labels ? encode_from_entries(&writers[i], &entries, opt, &v)
                                  : encode_split(&writers[i], paths[i], opt, &v);
    writer_finish(&writers[i]);
  }
  if (!labels) entries_close(&entries);
  for (int i = 0; i < n_files; i++) writer_rename(&writers[i]);
  printf("vocabulary: %d entries (<eos> = %d, <unk> = %d) from %lld word types in %s\n", (int)v.vocab_size, EOS_ID,
         UNK_ID, (long long)(table.n_entries - 2), opt->train);
  if (labels) printf("labels: %d classes in %s\n", (int)labels->count, opt->train);
  for (int i = 0; i < n_files; i++) print_summary(opt->out_dir, names[i], &counts[i]);
  if (labels) label_table_free(labels);
  free_words(v.words, v.vocab_size);
  table_free(&table);
}
