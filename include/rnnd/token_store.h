/* token_store.h — the /tokens of a data set read on demand from its HDF5
 * file instead of held in memory, so a rank holds the offsets of the corpus
 * and the few chunks its batches touch, not the corpus.
 *
 * token_store_open looks at how /tokens is stored. Contiguous storage, or
 * chunks with no filter, shuffle and/or deflate (what rnn_prep writes), of
 * little-endian 32-bit integers: the store keeps the file's byte address of
 * every chunk and reads them itself (pread, zlib, its own unshuffle), so no
 * HDF5 call happens after open. Anything else returns NULL and the caller
 * loads the tokens into memory as before.
 *
 * Reads go through a small cache of decoded chunks (TOKEN_STORE_SLOTS).
 * Every chunk read from disk is checked as it is decoded: a short read, a
 * chunk zlib rejects, or an id outside [0, vocab_size) ends the program
 * with one line naming the file, the chunk, its byte offset and the token
 * (exit 2). Before each read from disk the store also checks that the file
 * is still the one it opened (same inode at the path, same size and
 * modification time), so a data file replaced or rewritten under a running
 * job is reported rather than read as garbage.
 *
 * token_store_prefetch asks the kernel to read the chunks of a token range
 * ahead (posix_fadvise WILLNEED): the next batch's chunks arrive while this
 * step computes.
 *
 * Not thread-safe: one store per data set per rank, used by one thread.
 * Ownership: token_store_open allocates, token_store_close frees. */
#ifndef RNND_TOKEN_STORE_H
#define RNND_TOKEN_STORE_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rnnd_token_store rnnd_token_store;

/* dset: the open /tokens of `path` (n_tokens ids); NULL when the layout is
 * not one the store reads (see above). */
rnnd_token_store *token_store_open(const char *path, hid_t dset, int64_t n_tokens, int32_t vocab_size);
/* out[i] = token begin + i for i < count (validated ids). */
void token_store_read(rnnd_token_store *s, int64_t begin, int64_t count, int32_t *out);
void token_store_prefetch(rnnd_token_store *s, int64_t begin, int64_t count);
/* Bytes the store holds (chunk table, cache, read buffer). */
size_t token_store_bytes(const rnnd_token_store *s);
/* Chunks decoded from disk so far (cache misses). */
int64_t token_store_chunk_reads(const rnnd_token_store *s);
void token_store_close(rnnd_token_store *s);

#endif
