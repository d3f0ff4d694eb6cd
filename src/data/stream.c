/* stream.c — the stream plan of data.mode = stream (stream.h). */
#include "rnnd/stream.h"

#include "rnnd/common.h"

void stream_plan_init(rnnd_stream_plan *p, int64_t n_tokens, int64_t n_streams, int bptt, int rank, int world,
                      const char *role, const char *count_key) {
  if (n_streams < world)
    rnnd_input_error("%s: %lld streams (%s) for %d ranks: every rank needs at least one", role,
                     (long long)n_streams, count_key, world);
  if (n_tokens < n_streams)
    rnnd_input_error("%s: %lld tokens cannot make %lld streams (%s)", role, (long long)n_tokens,
                     (long long)n_streams, count_key);
  *p = (rnnd_stream_plan){.n_tokens = n_tokens, .n_streams = n_streams, .bptt = bptt};
  p->base_length = n_tokens / n_streams;
  p->n_longer = n_tokens % n_streams;
  int64_t longest = p->base_length + (p->n_longer > 0);
  p->n_windows = (longest + bptt - 1) / bptt;
  p->first = n_streams * rank / world;
  p->count = n_streams * (rank + 1) / world - p->first;
}

int64_t stream_start(const rnnd_stream_plan *p, int64_t stream) {
  return stream * p->base_length + (stream < p->n_longer ? stream : p->n_longer);
}

int64_t stream_length(const rnnd_stream_plan *p, int64_t stream) {
  return p->base_length + (stream < p->n_longer);
}

int64_t stream_window_length(const rnnd_stream_plan *p, int64_t stream, int64_t w) {
  int64_t left = stream_length(p, stream) - w * p->bptt;
  return left <= 0 ? 0 : left < p->bptt ? left : p->bptt;
}

int stream_window_pieces(const rnnd_stream_plan *p, int64_t w, rnnd_piece *out) {
  RNND_ASSERT(w >= 0 && w < p->n_windows);
  int n = 0;
  for (int64_t s = p->first; s < p->first + p->count; s++) {
    int64_t length = stream_window_length(p, s, w);
    if (length == 0) continue;
    out[n++] = (rnnd_piece){.start = stream_start(p, s) + w * p->bptt, .length = (int32_t)length, .id = s};
  }
  return n;
}

int64_t stream_window_tokens(const rnnd_stream_plan *p, int64_t w) {
  int64_t total = 0;
  for (int64_t s = 0; s < p->n_streams; s++) total += stream_window_length(p, s, w);
  return total;
}
