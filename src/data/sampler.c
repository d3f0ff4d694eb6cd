/* sampler.c — pieces, length buckets and the per-epoch batch plan (sampler.h). */
#include "rnnd/sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/rng.h"

/* Room for n pieces (scored: windows, which score only their last rows). */
static void allocate_pieces(rnnd_sampler *s, int64_t n, int scored) {
  RNND_ASSERT(n <= (int64_t)UINT32_MAX); /* the batch order holds 32-bit piece indices */
  s->n_pieces = n;
  s->piece_start = RNND_ALLOC(int64_t, n, "piece starts");
  s->piece_length = RNND_ALLOC(int32_t, n, "piece lengths");
  if (scored) s->piece_scored = RNND_ALLOC(int32_t, n, "piece scored rows");
}

static void set_piece(rnnd_sampler *s, int64_t i, int64_t start, int64_t length) {
  s->piece_start[i] = start;
  s->piece_length[i] = (int32_t)length;
}

rnnd_piece sampler_piece(const rnnd_sampler *s, int64_t i) {
  RNND_ASSERT(i >= 0 && i < s->n_pieces);
  return (rnnd_piece){.start = s->piece_start[i], .length = s->piece_length[i], .id = i,
                      .scored = s->piece_scored ? s->piece_scored[i] : 0};
}

/* Classification: sequence i "w1 .. wn <eos>" is one piece whose inputs
 * are w1 .. wn (its targets, tokens after them, are not used), id = i. */
static void whole_sequence_pieces(rnnd_sampler *s, const rnnd_dataset *ds) {
  allocate_pieces(s, ds->n_sequences, 0);
  for (int64_t i = 0; i < ds->n_sequences; i++) {
    int64_t words = dataset_sequence_length(ds, i) - 1;
    if (words < 1)
      rnnd_input_error("%s: sequence %lld has no tokens before its final <eos> (nothing to classify)", ds->path,
                       (long long)i);
    if (words > s->max_len)
      rnnd_input_error("%s: sequence %lld has %lld tokens but data.max_len is %d: classification reads whole "
                       "sequences (raise data.max_len; train.bptt_segment bounds the memory)",
                       ds->path, (long long)i, (long long)words, s->max_len);
    set_piece(s, i, ds->offsets[i] + 1, words);
  }
}

/* Windows of at most max_len rows of sequence i ending k rows apart;
 * stores them as pieces first_id.. (with store) and returns how many. */
static int64_t sequence_windows(rnnd_sampler *s, const rnnd_dataset *ds, int64_t i, int store, int64_t first_id) {
  const int64_t a = ds->offsets[i], rows = dataset_sequence_length(ds, i), w = s->max_len, k = s->window_stride;
  int64_t end = rows < w ? rows : w, before = end > k ? end - k : 0, n = 0;
  for (;;) {
    int64_t start = end > w ? end - w : 0;
    if (store) {
      set_piece(s, first_id + n, a + start, end - start);
      s->piece_scored[first_id + n] = (int32_t)(end - before);
    }
    n++;
    if (end == rows) return n;
    before = end;
    end = end + k < rows ? end + k : rows;
  }
}

static void window_pieces(rnnd_sampler *s, const rnnd_dataset *ds) {
  int64_t count = 0;
  for (int64_t i = 0; i < ds->n_sequences; i++) count += sequence_windows(s, ds, i, 0, 0);
  allocate_pieces(s, count, 1);
  for (int64_t i = 0, n = 0; i < ds->n_sequences; i++) n += sequence_windows(s, ds, i, 1, n);
}

static void cut_pieces(rnnd_sampler *s, const rnnd_dataset *ds) {
  if (s->whole_sequences) {
    whole_sequence_pieces(s, ds);
    return;
  }
  if (s->window_stride > 0) {
    window_pieces(s, ds);
    return;
  }
  int64_t count = 0;
  for (int64_t i = 0; i < ds->n_sequences; i++)
    count += (dataset_sequence_length(ds, i) + s->max_len - 1) / s->max_len;
  allocate_pieces(s, count, 0);
  int64_t n = 0;
  for (int64_t i = 0; i < ds->n_sequences; i++) {
    int64_t length = dataset_sequence_length(ds, i);
    for (int64_t k = 0; k < length; k += s->max_len, n++)
      set_piece(s, n, ds->offsets[i] + k, length - k < s->max_len ? length - k : s->max_len);
  }
}

static int compare_int32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Sorted piece lengths, ascending; caller frees. */
static int32_t *sorted_lengths(const rnnd_sampler *s) {
  int32_t *lengths = RNND_ALLOC(int32_t, s->n_pieces, "piece lengths");
  memcpy(lengths, s->piece_length, (size_t)s->n_pieces * sizeof *lengths);
  qsort(lengths, (size_t)s->n_pieces, sizeof *lengths, compare_int32);
  return lengths;
}

static void auto_buckets(rnnd_sampler *s, const int32_t *lengths, int num_buckets) {
  s->bucket_upper = RNND_ALLOC(int32_t, num_buckets, "bucket bounds");
  s->n_buckets = 0;
  for (int b = 1; b <= num_buckets; b++) {
    int64_t at = (s->n_pieces * b) / num_buckets - 1;
    int32_t bound = lengths[at < 0 ? 0 : at];
    if (s->n_buckets == 0 || bound > s->bucket_upper[s->n_buckets - 1]) s->bucket_upper[s->n_buckets++] = bound;
  }
}

/* Explicit bounds; a final bucket is added for pieces above the last bound. */
static void explicit_buckets(rnnd_sampler *s, const char *spec, int32_t longest) {
  int capacity = 2;
  for (const char *p = spec; *p; p++) capacity += *p == ',';
  s->bucket_upper = RNND_ALLOC(int32_t, capacity, "bucket bounds");
  const char *p = spec;
  while (*p) {
    char *end;
    errno = 0;
    long bound = strtol(p, &end, 10);
    if (end == p || errno || bound < 1 || (*end && *end != ','))
      rnnd_input_error("config: data.buckets = '%s': expected 'auto' or ascending positive integers like 10,20,40",
                       spec);
    if (s->n_buckets && bound <= s->bucket_upper[s->n_buckets - 1])
      rnnd_input_error("config: data.buckets = '%s': bounds must be strictly ascending", spec);
    s->bucket_upper[s->n_buckets++] = (int32_t)bound;
    p = *end ? end + 1 : end;
  }
  if (s->n_buckets == 0) rnnd_input_error("config: data.buckets is empty (use 'auto')");
  if (s->bucket_upper[s->n_buckets - 1] < longest) s->bucket_upper[s->n_buckets++] = longest;
}

static int bucket_of(const rnnd_sampler *s, int32_t length) {
  int b = 0;
  while (b < s->n_buckets - 1 && length > s->bucket_upper[b]) b++;
  return b;
}

/* Token budget: the most pieces one batch can take is the number of a
 * bucket's shortest pieces that fit in the budget (at least one). */
static int most_pieces_in_budget(const rnnd_sampler *s, const int32_t *lengths) {
  int most = 1;
  int64_t first = 0;
  for (int b = 0; b < s->n_buckets; b++) {
    int64_t end = first;
    while (end < s->n_pieces && (b == s->n_buckets - 1 || lengths[end] <= s->bucket_upper[b])) end++;
    int64_t tokens = 0, fit = 0;
    for (int64_t i = first; i < end && tokens + lengths[i] <= s->batch_tokens; i++) tokens += lengths[i], fit++;
    if (fit > most) most = fit > INT32_MAX ? INT32_MAX : (int)fit;
    first = end;
  }
  return most;
}

static void size_largest_batch(rnnd_sampler *s, const int32_t *lengths) {
  s->largest_batch_steps = lengths[s->n_pieces - 1];
  if (s->batch_tokens > 0) {
    s->largest_batch_pieces = most_pieces_in_budget(s, lengths);
    s->largest_batch_tokens = s->batch_tokens > s->largest_batch_steps ? s->batch_tokens : s->largest_batch_steps;
    return;
  }
  s->largest_batch_pieces = s->batch < s->n_pieces ? s->batch : (int)s->n_pieces;
  for (int64_t i = 0; i < s->largest_batch_pieces; i++) s->largest_batch_tokens += lengths[s->n_pieces - 1 - i];
}

void sampler_init(rnnd_sampler *s, const rnnd_dataset *ds, const rnnd_sampler_options *o) {
  RNND_ASSERT(o->max_len >= 1 && o->batch >= 1 && o->batch_tokens >= 0);
  memset(s, 0, sizeof *s);
  s->max_len = o->max_len;
  s->batch = o->batch;
  s->batch_tokens = o->batch_tokens;
  s->seed = o->seed;
  s->shuffle = o->shuffle;
  s->whole_sequences = o->whole_sequences;
  s->window_stride = o->window_stride < o->max_len ? o->window_stride : 0; /* k >= max_len: plain pieces */
  cut_pieces(s, ds);
  int32_t *lengths = sorted_lengths(s);
  if (!strcmp(o->buckets, "auto")) auto_buckets(s, lengths, o->num_buckets);
  else explicit_buckets(s, o->buckets, lengths[s->n_pieces - 1]);
  size_largest_batch(s, lengths);
  free(lengths);
  s->order = RNND_ALLOC(uint32_t, s->n_pieces, "batch order");
  s->batches = RNND_ALLOC(rnnd_batch_ref, s->n_pieces, "batch list");
  s->drawn = RNND_ALLOC(rnnd_piece, s->largest_batch_pieces, "drawn batch");
  s->peeked = RNND_ALLOC(rnnd_piece, s->largest_batch_pieces, "next batch");
  s->epoch = -1;
}

rnnd_sampler_options sampler_eval_options(int max_len, int batch) {
  return (rnnd_sampler_options){.max_len = max_len, .batch = batch, .buckets = "auto", .num_buckets = 1};
}

void sampler_shuffle_pieces(uint32_t *p, int64_t n, uint64_t key) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(rng_key2(key, (uint64_t)i) % (uint64_t)(i + 1));
    uint32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

static void shuffle_batches(rnnd_batch_ref *r, int64_t n, uint64_t key) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(rng_key2(key, (uint64_t)i) % (uint64_t)(i + 1));
    rnnd_batch_ref t = r[i];
    r[i] = r[j];
    r[j] = t;
  }
}

/* Evaluation order: longest first, data-set order among equal lengths (a
 * counting sort over lengths, descending). */
static void order_longest_first(rnnd_sampler *s) {
  const int32_t longest = s->largest_batch_steps;
  int64_t *start = RNND_ALLOC(int64_t, (size_t)longest + 2, "length starts");
  for (int64_t i = 0; i < s->n_pieces; i++) start[longest - s->piece_length[i] + 1]++;
  for (int32_t l = 0; l <= longest; l++) start[l + 1] += start[l];
  for (int64_t i = 0; i < s->n_pieces; i++) s->order[start[longest - s->piece_length[i]]++] = (uint32_t)i;
  free(start);
}

/* Groups pieces by bucket (counting sort keeps data-set order inside each). */
static void group_by_bucket(rnnd_sampler *s, int64_t *bucket_start) {
  memset(bucket_start, 0, sizeof(int64_t) * ((size_t)s->n_buckets + 1));
  for (int64_t i = 0; i < s->n_pieces; i++) bucket_start[bucket_of(s, s->piece_length[i]) + 1]++;
  for (int b = 0; b < s->n_buckets; b++) bucket_start[b + 1] += bucket_start[b];
  int64_t *fill = RNND_ALLOC(int64_t, s->n_buckets, "bucket fill");
  memcpy(fill, bucket_start, sizeof(int64_t) * (size_t)s->n_buckets);
  for (int64_t i = 0; i < s->n_pieces; i++) s->order[fill[bucket_of(s, s->piece_length[i])]++] = (uint32_t)i;
  free(fill);
}

/* Cuts the n pieces at order[first..] into consecutive batches. */
static void cut_batches(rnnd_sampler *s, int64_t first, int64_t n) {
  for (int64_t k = 0; k < n;) {
    int64_t count = 0;
    if (s->batch_tokens > 0) {
      int64_t tokens = 0;
      while (k + count < n && (count == 0 || tokens + s->piece_length[s->order[first + k + count]] <= s->batch_tokens))
        tokens += s->piece_length[s->order[first + k + count++]];
    } else {
      count = n - k < s->batch ? n - k : s->batch;
    }
    s->batches[s->n_batches++] = (rnnd_batch_ref){first + k, (int)count};
    k += count;
  }
}

void sampler_start_epoch(rnnd_sampler *s, int64_t epoch) {
  s->epoch = epoch;
  s->next_batch = 0;
  s->n_batches = 0;
  int64_t *bucket_start = RNND_ALLOC(int64_t, (size_t)s->n_buckets + 1, "bucket starts");
  if (s->shuffle) {
    group_by_bucket(s, bucket_start);
  } else {
    /* Evaluation: one "bucket" in length order packs batches tightest. */
    order_longest_first(s);
    bucket_start[0] = 0;
    for (int b = 1; b <= s->n_buckets; b++) bucket_start[b] = s->n_pieces;
  }
  uint64_t epoch_key = rng_key2(s->seed ^ 0x5A3Dull, (uint64_t)epoch);
  for (int b = 0; b < s->n_buckets; b++) {
    int64_t first = bucket_start[b], n = bucket_start[b + 1] - first;
    if (s->shuffle) sampler_shuffle_pieces(s->order + first, n, rng_key2(epoch_key, (uint64_t)b));
    cut_batches(s, first, n);
  }
  if (s->shuffle) shuffle_batches(s->batches, s->n_batches, rng_key2(epoch_key, 0xBA7Cull));
  free(bucket_start);
}

/* Batch k of the epoch's plan as pieces, into out. */
static int materialise(const rnnd_sampler *s, int64_t k, rnnd_piece *out) {
  const rnnd_batch_ref *r = &s->batches[k];
  for (int i = 0; i < r->count; i++) out[i] = sampler_piece(s, s->order[r->first + i]);
  return r->count;
}

int sampler_next_pieces(rnnd_sampler *s, const rnnd_piece **pieces) {
  if (s->next_batch >= s->n_batches) return 0;
  *pieces = s->drawn;
  return materialise(s, s->next_batch++, s->drawn);
}

int sampler_peek_pieces(const rnnd_sampler *s, const rnnd_piece **pieces) {
  if (s->next_batch >= s->n_batches) return 0;
  *pieces = s->peeked;
  return materialise(s, s->next_batch, s->peeked);
}

size_t sampler_bytes(const rnnd_sampler *s) {
  size_t per_piece = sizeof *s->piece_start + sizeof *s->piece_length + sizeof *s->order +
                     (s->piece_scored ? sizeof *s->piece_scored : 0);
  return (size_t)s->n_pieces * per_piece + (size_t)s->n_batches * sizeof *s->batches +
         2 * (size_t)s->largest_batch_pieces * sizeof(rnnd_piece);
}

int sampler_next_batch(rnnd_sampler *s, const rnnd_dataset *ds, rnnd_batch *b) {
  const rnnd_piece *pieces;
  int count = sampler_next_pieces(s, &pieces);
  if (count) batch_fill(b, ds, pieces, count);
  return count > 0;
}

void sampler_free(rnnd_sampler *s) {
  free(s->piece_start);
  free(s->piece_length);
  free(s->piece_scored);
  free(s->bucket_upper);
  free(s->order);
  free(s->drawn);
  free(s->peeked);
  free(s->batches);
  memset(s, 0, sizeof *s);
}
