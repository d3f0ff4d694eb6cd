/* cuda_segments.c — the driver of one batch on the CUDA backend, with the
 * two things that pass hidden state across cuDNN calls through hx/hy and
 * dhy/dhx (cb->link):
 *  - carried stream state (data.mode = stream): carry_state's host rows
 *    become the first call's hx/cx; the end state (hy/cy) goes back to the
 *    host rows of the pieces that run to the batch's last step;
 *  - segmented backpropagation (capacity.bptt_segment = K): a forward pass
 *    in cuDNN's inference mode keeps only the state entering every
 *    segment; then each segment, last first, is run again in training mode
 *    from its kept state and back-propagated with dhy = the dhx of the
 *    segment after it (zero rows for pieces that end inside the segment).
 *    The gradient is the whole batch's; activations exist for one segment.
 * The order of it all is schedule.c's, which the CPU backend runs too;
 * these are its primitives on cuDNN. The buffers are carved out of the
 * backend's arena and pinned area. */
#include <string.h>

#include "../schedule.h"
#include "cuda_check.h"
#include "cuda_internal.h"

static size_t state_bytes(const cuda_backend *cb) { return (size_t)cb->cap.max_pieces * cb->hidden * cb->elem; }
static int is_lstm(const cuda_backend *cb) { return cb->base.layout->shape.cell == RNND_CELL_LSTM; }

void cuda_segments_carve(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_segments *g = &cb->seg;
  const size_t one = state_bytes(cb);
  const int streams = cb->directions == 1; /* carry_state is for unidirectional models */
  if (streams) {
    g->state = cuda_carve(base, used, (size_t)cb->cap.max_pieces * rnnd_state_width(&cb->base.layout->shape) *
                                          sizeof(float));
    for (int l = 0; l < cb->layers; l++) {
      g->start_h[l] = cuda_carve(base, used, one);
      g->end_h[l] = cuda_carve(base, used, one);
      g->start_c[l] = is_lstm(cb) ? cuda_carve(base, used, one) : NULL;
      g->end_c[l] = is_lstm(cb) ? cuda_carve(base, used, one) : NULL;
    }
  }
  if (!g->segment) return;
  const size_t all = (size_t)g->boundaries * cb->layers * one;
  g->boundary_h = cuda_carve(base, used, all);
  g->boundary_c = is_lstm(cb) ? cuda_carve(base, used, all) : NULL;
  for (int k = 0; k < 2; k++)
    for (int l = 0; l < cb->layers; l++) {
      g->carry_dh[k][l] = cuda_carve(base, used, one);
      g->carry_dc[k][l] = is_lstm(cb) ? cuda_carve(base, used, one) : NULL;
    }
}

void cuda_segments_carve_host(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_segments *g = &cb->seg;
  if (cb->directions == 1)
    g->host_state = cuda_carve(base, used, (size_t)cb->cap.max_pieces * rnnd_state_width(&cb->base.layout->shape) *
                                               sizeof(float));
  if (g->segment) g->view_offsets = cuda_carve(base, used, (size_t)(g->segment + 1) * sizeof(int64_t));
}

/* --- carried stream state ------------------------------------------------ */

/* carry_state's rows -> each layer's starting h (and c), for n pieces. */
static void load_stream_state(cuda_backend *cb, int n) {
  cuda_segments *g = &cb->seg;
  const int width = rnnd_state_width(&cb->base.layout->shape);
  memcpy(g->host_state, g->stream_in, (size_t)n * width * sizeof(float));
  CUDA_CHECK(cudaMemcpyAsync(g->state, g->host_state, (size_t)n * width * sizeof(float), cudaMemcpyHostToDevice,
                             cb->stream));
  for (int l = 0; l < cb->layers; l++)
    cuda_state_split(g->start_h[l], g->start_c[l], cb->storage, g->state, n, width, l, cb->hidden, cb->stream);
}

/* The end state of the first `rows` pieces (those that ran to the last
 * step) -> carry_state's rows; synchronises the stream. */
static void store_stream_state(cuda_backend *cb, int rows) {
  cuda_segments *g = &cb->seg;
  const int width = rnnd_state_width(&cb->base.layout->shape);
  for (int l = 0; l < cb->layers; l++)
    cuda_state_join(g->state, g->end_h[l], g->end_c[l], cb->storage, rows, width, l, cb->hidden, cb->stream);
  CUDA_CHECK(cudaMemcpyAsync(g->host_state, g->state, (size_t)rows * width * sizeof(float), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  memcpy(g->stream_out, g->host_state, (size_t)rows * width * sizeof(float));
}

/* --- segments -------------------------------------------------------------- */

/* Kept state entering segment slot + 1 (slot < boundaries) of layer l. */
static void *boundary(const cuda_backend *cb, void *all, int slot, int layer) {
  return all ? (char *)all + ((size_t)slot * cb->layers + layer) * state_bytes(cb) : NULL;
}

/* Where segment s (of `segments`) starts from and leaves its state. */
static void link_states(cuda_backend *cb, int s, int segments) {
  cuda_segments *g = &cb->seg;
  for (int l = 0; l < cb->layers; l++) {
    cuda_state_link *k = &cb->link;
    k->hx[l] = s > 0 ? boundary(cb, g->boundary_h, s - 1, l) : g->stream_in ? g->start_h[l] : NULL;
    k->cx[l] = s > 0 ? boundary(cb, g->boundary_c, s - 1, l) : g->stream_in ? g->start_c[l] : NULL;
    k->hy[l] = s + 1 < segments ? boundary(cb, g->boundary_h, s, l) : g->stream_out ? g->end_h[l] : NULL;
    k->cy[l] = s + 1 < segments ? boundary(cb, g->boundary_c, s, l) : g->stream_out ? g->end_c[l] : NULL;
  }
}

/* Backward of segment s: dhy from the segment after it (its dhx, in
 * buffer (s + 1) % 2, covering its `next_pieces` pieces; the rows of the
 * pieces that end here are zeroed), dhx into buffer s % 2 for the segment
 * before. The first segment's starting state gets no gradient. */
static void link_gradients(cuda_backend *cb, int s, int segments, int pieces, int next_pieces) {
  cuda_segments *g = &cb->seg;
  const size_t row = (size_t)cb->hidden * cb->elem;
  for (int l = 0; l < cb->layers; l++) {
    cuda_state_link *k = &cb->link;
    int in = (s + 1) % 2, out = s % 2;
    k->dhy[l] = s + 1 < segments ? g->carry_dh[in][l] : NULL;
    k->dcy[l] = s + 1 < segments ? g->carry_dc[in][l] : NULL;
    k->dhx[l] = s > 0 ? g->carry_dh[out][l] : NULL;
    k->dcx[l] = s > 0 ? g->carry_dc[out][l] : NULL;
    if (s + 1 < segments && pieces > next_pieces) {
      size_t bytes = (size_t)(pieces - next_pieces) * row;
      CUDA_CHECK(cudaMemsetAsync((char *)k->dhy[l] + (size_t)next_pieces * row, 0, bytes, cb->stream));
      if (k->dcy[l]) CUDA_CHECK(cudaMemsetAsync((char *)k->dcy[l] + (size_t)next_pieces * row, 0, bytes, cb->stream));
    }
  }
}

/* --- the schedule's primitives (schedule.h) ------------------------------ */

/* Uploads the view, points cuDNN's hx/hy (and with backward dhy/dhx) at
 * segment s's states, and lets the gradient listener hear only the last
 * segment back-propagated (s == 0), which finishes the gradient. */
static void run_enter(void *context, const rnnd_batch *v, int s, int segments, int backward, int next_pieces) {
  cuda_backend *cb = context;
  if (backward) cb->gradient_ready = s == 0 ? cb->seg.listener : (cuda_gradient_listener){0};
  cuda_layers_upload(cb, v);
  link_states(cb, s, segments);
  if (backward) link_gradients(cb, s, segments, v->n_pieces, next_pieces);
}

static void run_forward(void *context, const rnnd_batch *v, const rnnd_dropout *dr, int training) {
  cuda_layers_forward(context, v, dr, training);
}

/* The loss goes into nll_sum on the device. */
static double run_head(void *context, const rnnd_batch *v, float weight) {
  cuda_backend *cb = context;
  cb->head->pass(cb, v, weight, weight > 0.0f ? cb->grad_a : NULL);
  const rnnd_dropout *dr = cb->regularise;
  if (weight > 0.0f && dr && dr->ar_alpha > 0.0f) /* AR on the decoder input */
    cuda_add_scaled(cb->grad_a, cb->x[cb->layers], cb->storage, v->n_tokens * cb->top,
                    weight * 2.0f * dr->ar_alpha / (float)cb->top, cb->stream);
  return 0.0;
}

static void run_backward(void *context, const rnnd_batch *v, const rnnd_dropout *dr) {
  cuda_layers_backward(context, v, dr);
}

/* cuDNN writes each segment's end state where link_states pointed hy: no leave. */
static const rnnd_schedule_ops cuda_schedule = {
    .enter = run_enter, .forward = run_forward, .head = run_head, .backward = run_backward, .leave = NULL};

void cuda_backend_run(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, float weight) {
  cuda_segments *g = &cb->seg;
  CUDA_CHECK(cudaMemsetAsync(cb->nll_sum, 0, sizeof(double), cb->stream));
  if (cb->head->begin) cb->head->begin(cb);
  if (g->stream_in) load_stream_state(cb, b->n_pieces);
  g->listener = cb->gradient_ready;
  cb->regularise = dr;
  cb->loss_weight = weight;
  cuda_layers_drop_recurrent(cb, dr);
  schedule_run(&cuda_schedule, cb, b, g->segment, g->view_offsets, dr, weight);
  cuda_layers_restore_recurrent(cb);
  cb->regularise = NULL;
  cb->gradient_ready = g->listener;
  if (g->stream_out) store_stream_state(cb, b->batch_sizes[b->n_steps - 1]);
  if (cb->head->finish) {
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    cb->head->finish(cb);
  }
  memset(&cb->link, 0, sizeof cb->link);
  g->stream_in = NULL;
  g->stream_out = NULL;
}
