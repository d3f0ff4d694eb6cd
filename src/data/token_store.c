/* token_store.c — /tokens read chunk by chunk from the file (token_store.h). */
#define _POSIX_C_SOURCE 200809L /* pread, posix_fadvise */
#include "rnnd/token_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "rnnd/common.h"

#define TOKEN_STORE_SLOTS 16
#define CONTIGUOUS_CHUNK 16384

typedef struct {
  haddr_t address;  /* byte offset in the file */
  hsize_t size;     /* stored bytes (compressed) */
  unsigned skipped; /* HDF5's filter mask: bit k set = filter k not applied to this chunk */
  int present;
} stored_chunk;

typedef struct {
  int64_t chunk; /* -1: empty */
  uint64_t used; /* last use, for LRU */
  int32_t *ids;
} cache_slot;

struct rnnd_token_store {
  char *path;
  int fd;
  struct stat identity;
  int64_t n_tokens, chunk_elems, n_chunks;
  int32_t vocab_size;
  int shuffled, deflated; /* the filter pipeline, in HDF5's order: shuffle, then deflate */
  int contiguous;         /* not chunked by HDF5: chunks are ours, the last one short */
  stored_chunk *chunks;   /* [n_chunks]; contiguous storage: one chunk of n_tokens */
  cache_slot slots[TOKEN_STORE_SLOTS];
  uint64_t clock;
  int64_t reads;
  unsigned char *raw, *plain; /* stored bytes of one chunk, and the deflated ones undone */
  size_t raw_size;
};

/* --- opening ------------------------------------------------------------ */

/* Reads the filter pipeline; 0 when it holds a filter the store cannot undo. */
static int read_filters(rnnd_token_store *s, hid_t dcpl) {
  int n = H5Pget_nfilters(dcpl);
  for (int k = 0; k < n; k++) {
    unsigned flags = 0, config = 0;
    size_t values = 0;
    H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)k, &flags, &values, NULL, 0, NULL, &config);
    if (id == H5Z_FILTER_SHUFFLE && k == 0) s->shuffled = 1;
    else if (id == H5Z_FILTER_DEFLATE && k == n - 1) s->deflated = 1;
    else return 0;
  }
  return 1;
}

static int read_chunk_table(rnnd_token_store *s, hid_t dset, hid_t dcpl) {
  hsize_t dims = 0, count = 0;
  if (H5Pget_chunk(dcpl, 1, &dims) != 1 || dims == 0 || !read_filters(s, dcpl)) return 0;
  hid_t space = H5Dget_space(dset);
  int ok = space >= 0 && H5Dget_num_chunks(dset, space, &count) >= 0;
  if (!ok) {
    if (space >= 0) H5Sclose(space);
    return 0;
  }
  s->chunk_elems = (int64_t)dims;
  s->n_chunks = (s->n_tokens + s->chunk_elems - 1) / s->chunk_elems;
  s->chunks = RNND_ALLOC(stored_chunk, s->n_chunks ? (size_t)s->n_chunks : 1, "token chunk table");
  for (hsize_t i = 0; i < count; i++) {
    hsize_t first = 0, size = 0;
    unsigned mask = 0;
    haddr_t address = 0;
    ok = H5Dget_chunk_info(dset, space, i, &first, &mask, &address, &size) >= 0;
    int64_t k = ok ? (int64_t)first / s->chunk_elems : -1;
    ok = ok && k >= 0 && k < s->n_chunks;
    if (!ok) break;
    s->chunks[k] = (stored_chunk){.address = address, .size = size, .skipped = mask, .present = 1};
  }
  H5Sclose(space);
  return ok;
}

/* Contiguous storage is read in pieces of CONTIGUOUS_CHUNK ids, unfiltered;
 * the last one is short. */
static int read_contiguous(rnnd_token_store *s, hid_t dset) {
  haddr_t address = H5Dget_offset(dset);
  if (address == HADDR_UNDEF) return 0;
  s->contiguous = 1;
  s->chunk_elems = s->n_tokens < CONTIGUOUS_CHUNK ? s->n_tokens : CONTIGUOUS_CHUNK;
  s->n_chunks = (s->n_tokens + s->chunk_elems - 1) / s->chunk_elems;
  s->chunks = RNND_ALLOC(stored_chunk, (size_t)s->n_chunks, "token chunk table");
  for (int64_t k = 0; k < s->n_chunks; k++) {
    int64_t ids = s->n_tokens - k * s->chunk_elems < s->chunk_elems ? s->n_tokens - k * s->chunk_elems : s->chunk_elems;
    s->chunks[k] = (stored_chunk){.address = address + (haddr_t)(k * s->chunk_elems * 4), .size = (hsize_t)ids * 4,
                                  .present = 1};
  }
  return 1;
}

static int read_layout(rnnd_token_store *s, hid_t dset) {
  hid_t type = H5Dget_type(dset), dcpl = H5Dget_create_plist(dset);
  int ok = type >= 0 && dcpl >= 0 && H5Tequal(type, H5T_STD_I32LE) > 0;
  if (ok) {
    H5D_layout_t layout = H5Pget_layout(dcpl);
    ok = layout == H5D_CHUNKED ? read_chunk_table(s, dset, dcpl) : layout == H5D_CONTIGUOUS && read_contiguous(s, dset);
  }
  if (type >= 0) H5Tclose(type);
  if (dcpl >= 0) H5Pclose(dcpl);
  return ok;
}

rnnd_token_store *token_store_open(const char *path, hid_t dset, int64_t n_tokens, int32_t vocab_size) {
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  return NULL; /* the store decodes little-endian ids by copying bytes */
#endif
  if (n_tokens <= 0) return NULL;
  rnnd_token_store *s = RNND_ALLOC(rnnd_token_store, 1, "token store");
  s->n_tokens = n_tokens, s->vocab_size = vocab_size, s->fd = -1;
  if (!read_layout(s, dset)) {
    token_store_close(s);
    return NULL;
  }
  s->path = rnnd_strdup(path);
  s->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (s->fd < 0 || fstat(s->fd, &s->identity) != 0)
    rnnd_input_error("%s: cannot open for reading tokens (%s)", path, strerror(errno));
  size_t plain_bytes = (size_t)s->chunk_elems * 4;
  for (int i = 0; i < TOKEN_STORE_SLOTS; i++)
    s->slots[i] = (cache_slot){.chunk = -1, .ids = RNND_ALLOC(int32_t, (size_t)s->chunk_elems, "token chunk cache")};
  s->plain = RNND_ALLOC(unsigned char, plain_bytes, "token chunk buffer");
  return s;
}

/* --- reading ------------------------------------------------------------ */

/* The file must still be the one opened: the same inode at the path, the
 * same size and modification time. */
static void check_identity(const rnnd_token_store *s) {
  struct stat now, at_path;
  if (fstat(s->fd, &now) != 0 || stat(s->path, &at_path) != 0 || at_path.st_ino != s->identity.st_ino ||
      at_path.st_dev != s->identity.st_dev)
    rnnd_input_error("%s: the data file was replaced or removed while training (restart from the last checkpoint "
                     "with the file as it was)", s->path);
  if (now.st_size != s->identity.st_size || now.st_mtim.tv_sec != s->identity.st_mtim.tv_sec ||
      now.st_mtim.tv_nsec != s->identity.st_mtim.tv_nsec)
    rnnd_input_error("%s: the data file changed while training (size %lld -> %lld bytes); restart from the last "
                     "checkpoint with the file as it was", s->path, (long long)s->identity.st_size,
                     (long long)now.st_size);
}

/* The stored bytes of chunk k into s->raw. */
static void read_stored(rnnd_token_store *s, int64_t k) {
  const stored_chunk *c = &s->chunks[k];
  if (!c->present)
    rnnd_input_error("%s: /tokens chunk %lld (tokens from %lld) is missing from the file (truncated?)", s->path,
                     (long long)k, (long long)(k * s->chunk_elems));
  if (c->size > s->raw_size) {
    free(s->raw);
    s->raw_size = (size_t)c->size;
    s->raw = RNND_ALLOC(unsigned char, s->raw_size, "token chunk read buffer");
  }
  size_t done = 0;
  while (done < c->size) {
    ssize_t got = pread(s->fd, s->raw + done, (size_t)c->size - done, (off_t)(c->address + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      rnnd_input_error("%s: /tokens chunk %lld at byte offset %llu: %s after %zu of %llu bytes (truncated file?)",
                       s->path, (long long)k, (unsigned long long)c->address, got < 0 ? strerror(errno) : "end of file",
                       done, (unsigned long long)c->size);
    done += (size_t)got;
  }
}

/* Undoes deflate (into s->plain) and shuffle (into ids). */
static void decode(rnnd_token_store *s, int64_t k, int32_t *ids) {
  const stored_chunk *c = &s->chunks[k];
  /* HDF5 stores edge chunks whole; our pieces of contiguous storage are exact */
  const size_t bytes = s->contiguous ? (size_t)c->size : (size_t)s->chunk_elems * 4;
  const unsigned char *plain = s->raw;
  int deflated = s->deflated && !(c->skipped & (1u << (s->shuffled ? 1 : 0)));
  int shuffled = s->shuffled && !(c->skipped & 1u);
  size_t have = (size_t)c->size;
  if (deflated) {
    uLongf out = (uLongf)bytes;
    int z = uncompress(s->plain, &out, s->raw, (uLong)c->size);
    if (z != Z_OK)
      rnnd_input_error("%s: /tokens chunk %lld at byte offset %llu is corrupted (zlib: %s)", s->path, (long long)k,
                       (unsigned long long)c->address, zError(z));
    plain = s->plain, have = (size_t)out;
  }
  if (have != bytes)
    rnnd_input_error("%s: /tokens chunk %lld at byte offset %llu holds %zu bytes, %zu expected", s->path,
                     (long long)k, (unsigned long long)c->address, have, bytes);
  if (!shuffled) {
    memcpy(ids, plain, bytes);
    return;
  }
  const size_t n = (size_t)s->chunk_elems; /* shuffle stores byte j of every id together */
  unsigned char *out = (unsigned char *)ids;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < 4; j++) out[4 * i + j] = plain[j * n + i];
}

static void validate(const rnnd_token_store *s, int64_t k, const int32_t *ids) {
  int64_t first = k * s->chunk_elems, n = s->n_tokens - first < s->chunk_elems ? s->n_tokens - first : s->chunk_elems;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= s->vocab_size)
      rnnd_input_error("%s: /tokens[%lld] = %d is %s (chunk %lld at byte offset %llu)", s->path, (long long)(first + i),
                       (int)ids[i], ids[i] < 0 ? "a negative token id" : "outside the vocabulary", (long long)k,
                       (unsigned long long)s->chunks[k].address);
}

/* Chunk k's ids, from the cache or decoded from the file into the least
 * recently used slot. */
static const int32_t *chunk_ids(rnnd_token_store *s, int64_t k) {
  cache_slot *victim = &s->slots[0];
  for (int i = 0; i < TOKEN_STORE_SLOTS; i++) {
    cache_slot *slot = &s->slots[i];
    if (slot->chunk == k) {
      slot->used = ++s->clock;
      return slot->ids;
    }
    if (slot->used < victim->used) victim = slot;
  }
  check_identity(s);
  victim->chunk = -1; /* not valid until decoded and checked */
  read_stored(s, k);
  decode(s, k, victim->ids);
  validate(s, k, victim->ids);
  victim->chunk = k, victim->used = ++s->clock;
  s->reads++;
  return victim->ids;
}

void token_store_read(rnnd_token_store *s, int64_t begin, int64_t count, int32_t *out) {
  RNND_ASSERT(begin >= 0 && count >= 0 && begin + count <= s->n_tokens);
  while (count > 0) {
    int64_t k = begin / s->chunk_elems, at = begin - k * s->chunk_elems;
    int64_t n = s->chunk_elems - at < count ? s->chunk_elems - at : count;
    memcpy(out, chunk_ids(s, k) + at, (size_t)n * sizeof *out);
    out += n, begin += n, count -= n;
  }
}

void token_store_prefetch(rnnd_token_store *s, int64_t begin, int64_t count) {
  if (count <= 0) return;
  for (int64_t k = begin / s->chunk_elems; k <= (begin + count - 1) / s->chunk_elems; k++)
    if (s->chunks[k].present)
      (void)posix_fadvise(s->fd, (off_t)s->chunks[k].address, (off_t)s->chunks[k].size, POSIX_FADV_WILLNEED);
}

size_t token_store_bytes(const rnnd_token_store *s) {
  return (size_t)s->n_chunks * sizeof *s->chunks + (size_t)TOKEN_STORE_SLOTS * (size_t)s->chunk_elems * 4 +
         (size_t)s->chunk_elems * 4 + s->raw_size;
}

int64_t token_store_chunk_reads(const rnnd_token_store *s) { return s->reads; }

void token_store_close(rnnd_token_store *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  for (int i = 0; i < TOKEN_STORE_SLOTS; i++) free(s->slots[i].ids);
  free(s->chunks);
  free(s->raw);
  free(s->plain);
  free(s->path);
  free(s);
}
