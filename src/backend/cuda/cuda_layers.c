/* cuda_layers.c — the recurrent layers of the CUDA backend: one cuDNN RNN
 * per layer (so the dropout between layers is ours, with the CPU backend's
 * masks), its descriptors, weight spaces and temp spaces, the upload of a
 * batch (or segment view), and forward and backward through the layers.
 *
 * Layout. Activations are packed time-major exactly as rnnd_batch lays them
 * out, which is cuDNN's CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED (pieces sorted
 * longest first): no padding is stored or computed. A bidirectional layer's
 * output row is [forward | reverse], as in the CPU backend and PyTorch.
 *
 * Parameters. The canonical flat buffer (PyTorch names and layout) is
 * uploaded, cast to the activation type, and scattered into each layer's
 * cuDNN weight space through a segment table built from
 * cudnnGetRNNWeightParams (cuDNN's gate order is PyTorch's: r,z,n and
 * i,f,g,o; each gate matrix is row-major [hidden x input]). Weight-space
 * gradients go back through the same table into a canonical fp32 gradient.
 *
 * What feeds the first layer and what sits on the top one are the input and
 * head tables (cuda_heads.c); finished stretches of the gradient are told to
 * the gradient listener. The temp allocation is this file's; the arena's
 * buffers are carved by cuda_backend.c. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "cuda_kernels.h"
#include "rnnd/rng.h"

/* --- descriptors ------------------------------------------------------- */

static void set_data_descriptor(cudnnRNNDataDescriptor_t desc, const cuda_backend *cb, int max_steps, int pieces,
                                int width, const int32_t *lengths) {
  float fill = 0.0f; /* ignored by the packed layout, which has no padding */
  CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc, cb->cudnn_type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, max_steps,
                                        pieces, width, lengths, &fill));
}

static void set_batch_shape(cuda_backend *cb, int max_steps, int pieces, const int32_t *lengths) {
  set_data_descriptor(cb->x_first, cb, max_steps, pieces, cb->embed, lengths);
  set_data_descriptor(cb->x_upper, cb, max_steps, pieces, cb->top, lengths);
  set_data_descriptor(cb->y_desc, cb, max_steps, pieces, cb->top, lengths);
  int dims[3] = {cb->directions, pieces, cb->hidden}, strides[3] = {pieces * cb->hidden, cb->hidden, 1};
  CUDNN_CHECK(cudnnSetTensorNdDescriptor(cb->h_desc, cb->cudnn_type, 3, dims, strides));
}

static cudnnRNNDataDescriptor_t x_desc_of(const cuda_backend *cb, int layer) {
  return layer == 0 ? cb->x_first : cb->x_upper;
}

void cuda_layers_create_descriptors(cuda_backend *cb) {
  const int cell = cb->base.layout->shape.cell;
  for (int l = 0; l < cb->layers; l++) {
    cuda_layer *L = &cb->layer[l];
    L->input_size = cuda_input_width(cb, l);
    CUDNN_CHECK(cudnnCreateRNNDescriptor(&L->desc));
    CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        L->desc, CUDNN_RNN_ALGO_STANDARD, cell == RNND_CELL_LSTM ? CUDNN_LSTM : CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS,
        cb->directions == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, cb->cudnn_type,
        CUDNN_DATA_FLOAT,
        cb->storage == RNND_DTYPE_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH, L->input_size, cb->hidden, cb->hidden,
        1, cb->no_dropout, CUDNN_RNN_PADDED_IO_DISABLED));
    CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(cb->cudnn, L->desc, &L->weight_bytes));
  }
}

/* --- temp spaces (cuda_temp) --------------------------------------------- */

typedef struct {
  size_t workspace, reserve[RNND_MAX_LAYERS];
} temp_sizes;

/* What the shape the descriptors now hold needs: the larger workspace of
 * the training and inference modes, and each layer's reserve. */
static temp_sizes needed_temp_sizes(const cuda_backend *cb) {
  temp_sizes need = {0};
  for (int l = 0; l < cb->layers; l++) {
    size_t work = 0, reserve = 0, infer_work = 0, no_reserve = 0;
    CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(cb->cudnn, cb->layer[l].desc, CUDNN_FWD_MODE_TRAINING, x_desc_of(cb, l),
                                          &work, &reserve));
    CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(cb->cudnn, cb->layer[l].desc, CUDNN_FWD_MODE_INFERENCE,
                                          x_desc_of(cb, l), &infer_work, &no_reserve));
    need.reserve[l] = reserve;
    if (work > need.workspace) need.workspace = work;
    if (infer_work > need.workspace) need.workspace = infer_work;
  }
  return need;
}

/* Points the workspace and reserves into the temp allocation at `base`
 * (base 0: only counts) and returns its size. */
static size_t place_temp(cuda_backend *cb, uintptr_t base) {
  size_t used = 0;
  cb->workspace = cuda_carve(base, &used, cb->cudnn_workspace_bytes);
  for (int l = 0; l < cb->layers; l++) cb->layer[l].reserve = cuda_carve(base, &used, cb->layer[l].reserve_bytes);
  return used;
}

/* (Re)allocates the temp spaces at the sizes now in cb. Nothing on the
 * stream may still use the old allocation, so it is synchronised first. */
static void allocate_temp(cuda_backend *cb) {
  if (cb->temp.base) {
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    CUDA_CHECK(cudaFree(cb->temp.base));
    cb->temp.base = NULL;
  }
  cb->temp.bytes = place_temp(cb, 0);
  CUDA_CHECK(cudaMalloc((void **)&cb->temp.base, cb->temp.bytes ? cb->temp.bytes : 1));
  place_temp(cb, (uintptr_t)cb->temp.base);
}

/* A size that holds `need`, with a quarter of headroom when it grows, so
 * that a run whose shapes creep upwards regrows rarely. */
static size_t grown(size_t have, size_t need) { return need <= have ? have : need + need / 4; }

/* The batch shape now in the descriptors must fit the temp spaces: if it
 * needs more than they hold, they grow (and the growth is counted). */
static void fit_temp_spaces(cuda_backend *cb) {
  temp_sizes need = needed_temp_sizes(cb);
  int fits = need.workspace <= cb->cudnn_workspace_bytes;
  for (int l = 0; l < cb->layers; l++) fits &= need.reserve[l] <= cb->layer[l].reserve_bytes;
  if (fits) return;
  cb->cudnn_workspace_bytes = grown(cb->cudnn_workspace_bytes, need.workspace);
  for (int l = 0; l < cb->layers; l++)
    cb->layer[l].reserve_bytes = grown(cb->layer[l].reserve_bytes, need.reserve[l]);
  allocate_temp(cb);
  cb->temp.growths++;
}

/* The first sizing: for the largest batch (or segment) rectangle, every
 * piece as long as the longest. Other shapes may need more (fit_temp_spaces). */
void cuda_layers_size_temp(cuda_backend *cb) {
  int *lengths = RNND_ALLOC(int, (size_t)cb->cap.max_pieces, "capacity lengths");
  for (int i = 0; i < cb->cap.max_pieces; i++) lengths[i] = cb->held_steps;
  set_batch_shape(cb, cb->held_steps, cb->cap.max_pieces, lengths);
  free(lengths);
  temp_sizes need = needed_temp_sizes(cb);
  cb->cudnn_workspace_bytes = need.workspace;
  for (int l = 0; l < cb->layers; l++) cb->layer[l].reserve_bytes = need.reserve[l];
  allocate_temp(cb);
}

/* --- canonical <-> weight space ------------------------------------------ */

/* One run of `count` floats at `canonical`, found at `address` in layer L's
 * weights; its gradient sits at the same offset in L's dweights. */
static void add_segment(cuda_backend *cb, cuda_weight_segment *table, cuda_weight_segment *grad_table,
                        const cuda_layer *L, size_t canonical, const void *address, int64_t count) {
  if (cb->n_segments == MAX_SEGMENTS) RNND_FAIL("more than %d weight segments", MAX_SEGMENTS);
  int64_t in_layer = (int64_t)((const char *)address - L->weights);
  if (in_layer < 0 || (size_t)in_layer + (size_t)count * cb->elem > L->weight_bytes)
    RNND_FAIL("cuDNN weight matrix outside its weight space (offset %lld)", (long long)in_layer);
  table[cb->n_segments] = (cuda_weight_segment){(int64_t)canonical, (int64_t)(L->weights - cb->arena) + in_layer,
                                                count};
  grad_table[cb->n_segments] = (cuda_weight_segment){(int64_t)canonical,
                                                     (int64_t)(L->dweights - cb->arena) + in_layer, count};
  cb->n_segments++;
  if (count > cb->longest_segment) cb->longest_segment = count;
}

/* A gate block of W_hh (segment w, its gradient gw) for weight dropout:
 * rows first_row.. of matrix `matrix`. */
static void add_hh_block(cuda_backend *cb, cuda_hh_block *hh, const cuda_weight_segment *w,
                         const cuda_weight_segment *gw, int matrix, int first_row) {
  if (cb->n_hh_blocks == MAX_HH_BLOCKS) RNND_FAIL("more than %d hidden-to-hidden blocks", MAX_HH_BLOCKS);
  hh[cb->n_hh_blocks++] = (cuda_hh_block){.canonical_offset = w->canonical_offset, .space_offset = w->space_offset,
                                          .grad_offset = gw->space_offset, .count = w->count,
                                          .first_row = first_row, .matrix = matrix, .width = cb->hidden};
}

/* Where each gate's matrix and bias of each layer and direction lives in
 * the weight space: linear layer k < gates is gate k of weight_ih/bias_ih,
 * gates + k the same gate of weight_hh/bias_hh. */
void cuda_layers_build_segment_table(cuda_backend *cb) {
  cuda_weight_segment table[MAX_SEGMENTS], grad_table[MAX_SEGMENTS];
  cuda_hh_block hh[MAX_HH_BLOCKS];
  const int H = cb->hidden, G = cb->gates;
  cb->n_hh_blocks = 0;
  cudnnTensorDescriptor_t m_desc, b_desc;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_desc));
  cb->n_segments = 0;
  for (int l = 0; l < cb->layers; l++) {
    const cuda_layer *L = &cb->layer[l];
    cb->layer_segments[l][0] = cb->n_segments;
    cb->layer_hh_blocks[l][0] = cb->n_hh_blocks;
    for (int dir = 0; dir < cb->directions; dir++) {
      const rnnd_rnn_offsets *o = &cb->base.layout->rnn[l][dir];
      for (int k = 0; k < 2 * G; k++) {
        void *matrix = NULL, *bias = NULL;
        CUDNN_CHECK(cudnnGetRNNWeightParams(cb->cudnn, L->desc, dir, L->weight_bytes, L->weights, k, m_desc,
                                            &matrix, b_desc, &bias));
        int gate = k % G, recurrent = k >= G, width = recurrent ? H : L->input_size;
        size_t w = (recurrent ? o->weight_hh : o->weight_ih) + (size_t)gate * H * width;
        size_t b = (recurrent ? o->bias_hh : o->bias_ih) + (size_t)gate * H;
        add_segment(cb, table, grad_table, L, w, matrix, (int64_t)H * width);
        add_segment(cb, table, grad_table, L, b, bias, H);
        if (recurrent) add_hh_block(cb, hh, &table[cb->n_segments - 2], &grad_table[cb->n_segments - 2],
                                    2 * l + dir, gate * H);
      }
    }
    cb->layer_segments[l][1] = cb->n_segments - cb->layer_segments[l][0];
    cb->layer_hh_blocks[l][1] = cb->n_hh_blocks - cb->layer_hh_blocks[l][0];
  }
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(m_desc));
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(b_desc));
  /* On the backend's stream (a non-blocking one, which the legacy stream
   * of a plain cudaMemcpy does not order against), then waited for: the
   * tables live on this function's stack. */
  CUDA_CHECK(cudaMemcpyAsync(cb->segments, table, (size_t)cb->n_segments * sizeof *table, cudaMemcpyHostToDevice,
                             cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cb->grad_segments, grad_table, (size_t)cb->n_segments * sizeof *grad_table,
                             cudaMemcpyHostToDevice, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cb->hh_blocks, hh, (size_t)cb->n_hh_blocks * sizeof *hh, cudaMemcpyHostToDevice,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

void cuda_layers_refresh_weights(cuda_backend *cb) {
  const size_t numel = cb->base.layout->numel;
  if (cb->storage != RNND_DTYPE_F32)
    cuda_cast_from_f32(cb->params16, cb->storage, cb->params, (int64_t)numel, cb->stream);
  cuda_canonical_to_space(cb->arena, cb->storage, cb->params, cb->segments, cb->n_segments, cb->longest_segment,
                          cb->stream);
}

/* Device parameters <- the host's, unless the device holds the master
 * weights (the CUDA step); then the 16-bit copy and weight spaces. */
void cuda_layers_upload_params(cuda_backend *cb, const float *params) {
  if (cb->params_resident) return;
  const size_t numel = cb->base.layout->numel;
  CUDA_CHECK(cudaMemcpyAsync(cb->params, params, numel * sizeof(float), cudaMemcpyHostToDevice, cb->stream));
  cuda_layers_refresh_weights(cb);
}

/* --- weight dropout ------------------------------------------------------ */

/* Before a training batch with dr->p_weight > 0: every W_hh block of the
 * weight spaces becomes the batch's dropped weights, computed from the fp32
 * canonical weights (as the CPU backend's dropped copy). */
void cuda_layers_drop_recurrent(cuda_backend *cb, const rnnd_dropout *dr) {
  if (!dr || dr->p_weight <= 0.0f) return;
  cuda_hh_dropout_to_space(cb->arena, cb->storage, cb->params, cb->hh_blocks, cb->n_hh_blocks,
                           (int64_t)cb->hidden * cb->hidden, dr->seed, dr->step, dr->p_weight, cb->stream);
  cb->hh_dropped = 1;
}

/* After it: the undropped weights back, so that evaluation and the next
 * batch see them whether or not an update refreshes the spaces. */
void cuda_layers_restore_recurrent(cuda_backend *cb) {
  if (!cb->hh_dropped) return;
  cuda_hh_dropout_to_space(cb->arena, cb->storage, cb->params, cb->hh_blocks, cb->n_hh_blocks,
                           (int64_t)cb->hidden * cb->hidden, 0, 0, 0.0f, cb->stream);
  cb->hh_dropped = 0;
}

/* --- batch ---------------------------------------------------------------- */

/* A batch longer than the held steps runs by segments (which then fit). */
void cuda_layers_check_batch(const cuda_backend *cb, const rnnd_batch *b) {
  int segmented = cb->seg.segment > 0 && b->n_steps > cb->seg.segment;
  if (b->n_pieces > cb->cap.max_pieces || b->n_steps > cb->cap.max_steps ||
      (!segmented && b->n_tokens > cb->held_tokens))
    RNND_FAIL("batch (%d pieces, %d steps, %lld tokens) exceeds the backend capacity (%d, %d, %lld)", b->n_pieces,
              b->n_steps, (long long)b->n_tokens, cb->cap.max_pieces, cb->cap.max_steps,
              (long long)cb->held_tokens);
}

/* The next staging set, once the copies last enqueued from it have run. */
static cuda_staging *free_staging(cuda_backend *cb) {
  cuda_staging *set = &cb->staging[cb->next_staging];
  CUDA_CHECK(cudaEventSynchronize(set->copied)); /* at once for a set never used */
  cb->next_staging ^= 1;
  return set;
}

/* Copies the batch's index arrays (and the dropout keys of every row) to
 * the device through a staging set, sets the descriptors to its shape and
 * makes the temp spaces fit it. A segment's view counts its pieces' steps
 * within the view. */
void cuda_layers_upload(cuda_backend *cb, const rnnd_batch *b) {
  const int64_t T = b->n_tokens;
  RNND_ASSERT(b->n_steps <= cb->held_steps && T <= cb->held_tokens);
  cuda_staging *set = free_staging(cb);
  for (int i = 0; i < b->n_pieces; i++) set->lengths[i] = 0;
  for (int t = 0; t < b->n_steps; t++)
    for (int i = 0; i < b->batch_sizes[t]; i++) {
      const int64_t row = b->step_offsets[t] + i;
      set->row_piece[row] = b->pieces[i].id;
      set->prev_row[row] = t > 0 ? b->step_offsets[t - 1] + i : -1;
      set->next_row[row] = t + 1 < b->n_steps && i < b->batch_sizes[t + 1] ? b->step_offsets[t + 1] + i : -1;
      set->lengths[i]++;
    }
  memcpy(set->inputs, b->inputs, (size_t)T * sizeof(int32_t));
  memcpy(set->targets, b->targets, (size_t)T * sizeof(int32_t));
  memcpy(set->positions, b->positions, (size_t)T * sizeof(int32_t));
  cudaStream_t s = cb->stream;
  CUDA_CHECK(cudaMemcpyAsync(cb->inputs, set->inputs, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->targets, set->targets, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->positions, set->positions, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->row_piece, set->row_piece, (size_t)T * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->prev_row, set->prev_row, (size_t)T * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->next_row, set->next_row, (size_t)T * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(cb->seq_lengths, set->lengths, (size_t)b->n_pieces * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
  if (cb->head->upload) cb->head->upload(cb, b, set);
  CUDA_CHECK(cudaEventRecord(set->copied, s));
  set_batch_shape(cb, b->n_steps, b->n_pieces, set->lengths);
  fit_temp_spaces(cb);
}

static void apply_dropout(cuda_backend *cb, void *dst, const void *src, int64_t rows, int width,
                          const rnnd_dropout *dr, int slot) {
  uint64_t slot_key = rng_dropout_slot_key(dr->seed, dr->step, slot);
  cuda_dropout(dst, src, cb->storage, rows, width, cb->row_piece, cb->positions, slot_key, dr->p, dr->locked,
               cb->stream);
}

/* --- forward ---------------------------------------------------------------- */

/* Embedding and every layer; x[layers] then holds the decoder input. */
void cuda_layers_forward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, int training) {
  const int64_t T = b->n_tokens;
  const int use_dropout = dr && dr->p > 0.0f;
  cb->input->forward(cb, T, dr); /* from the compute copy (16-bit: the rounded weights) */
  if (use_dropout) apply_dropout(cb, cb->x[0], cb->x[0], T, cb->embed, dr, 0);
  const cuda_state_link *k = &cb->link;
  for (int l = 0; l < cb->layers; l++) {
    cuda_layer *L = &cb->layer[l];
    CUDNN_CHECK(cudnnRNNForward(cb->cudnn, L->desc, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                cb->seq_lengths, x_desc_of(cb, l), cb->x[l], cb->y_desc, cb->y[l], cb->h_desc,
                                k->hx[l], k->hy[l], cb->h_desc, k->cx[l], k->cy[l], L->weight_bytes, L->weights,
                                cb->cudnn_workspace_bytes, cb->workspace, training ? L->reserve_bytes : 0,
                                training ? L->reserve : NULL));
    if (use_dropout) apply_dropout(cb, cb->x[l + 1], cb->y[l], T, cb->top, dr, l + 1);
    else CUDA_CHECK(cudaMemcpyAsync(cb->x[l + 1], cb->y[l], (size_t)T * cb->top * cb->elem,
                                    cudaMemcpyDeviceToDevice, cb->stream));
  }
}

/* --- backward ----------------------------------------------------------- */

/* Layer l's weight-space gradient into the canonical one (with weight
 * dropout, its W_hh blocks first times the batch's factors). */
static void layer_gradient(cuda_backend *cb, int l) {
  const rnnd_dropout *dr = cb->regularise;
  if (cb->hh_dropped && dr)
    cuda_hh_dropout_scale_gradient(cb->arena, cb->storage, cb->hh_blocks + cb->layer_hh_blocks[l][0],
                                   cb->layer_hh_blocks[l][1], (int64_t)cb->hidden * cb->hidden, dr->seed, dr->step,
                                   dr->p_weight, cb->stream);
  cuda_space_add_to_canonical(cb->grads, cb->arena, cb->storage, cb->grad_segments + cb->layer_segments[l][0],
                              cb->layer_segments[l][1], cb->longest_segment, cb->stream);
  cuda_gradient_final(cb, cb->base.layout->rnn[l][0].weight_ih);
}

/* From dL/d(decoder input) in grad_a down to the embedding rows. */
void cuda_layers_backward(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr) {
  const int64_t T = b->n_tokens;
  const int use_dropout = dr && dr->p > 0.0f;
  void *d_out = cb->grad_a, *d_in = cb->grad_b;
  const cuda_state_link *k = &cb->link;
  if (use_dropout && !cb->head->reads_before_dropout) apply_dropout(cb, d_out, d_out, T, cb->top, dr, cb->layers);
  if (dr && dr->tar_beta > 0.0f && cb->loss_weight > 0.0f) /* TAR on the top layer's raw output */
    cuda_add_temporal(d_out, cb->y[cb->layers - 1], cb->storage, cb->prev_row, cb->next_row, T, cb->top,
                      cb->loss_weight * 2.0f * dr->tar_beta / (float)cb->top, cb->stream);
  for (int l = cb->layers - 1; l >= 0; l--) {
    cuda_layer *L = &cb->layer[l];
    /* BackwardData first: BackwardWeights reads what it leaves in the reserve. */
    CUDNN_CHECK(cudnnRNNBackwardData_v8(cb->cudnn, L->desc, cb->seq_lengths, cb->y_desc, cb->y[l], d_out,
                                        x_desc_of(cb, l), d_in, cb->h_desc, k->hx[l], k->dhy[l], k->dhx[l],
                                        cb->h_desc, k->cx[l], k->dcy[l], k->dcx[l], L->weight_bytes, L->weights,
                                        cb->cudnn_workspace_bytes, cb->workspace, L->reserve_bytes, L->reserve));
    /* cuDNN supports only CUDNN_WGRAD_MODE_ADD, which adds into dweights:
     * start the layer's weight-space gradient from zero for this batch. */
    CUDA_CHECK(cudaMemsetAsync(L->dweights, 0, L->weight_bytes, cb->stream));
    CUDNN_CHECK(cudnnRNNBackwardWeights_v8(cb->cudnn, L->desc, CUDNN_WGRAD_MODE_ADD, cb->seq_lengths,
                                           x_desc_of(cb, l), cb->x[l], cb->h_desc, k->hx[l], cb->y_desc, cb->y[l],
                                           L->weight_bytes, L->dweights, cb->cudnn_workspace_bytes, cb->workspace,
                                           L->reserve_bytes, L->reserve));
    layer_gradient(cb, l);
    if (use_dropout) apply_dropout(cb, d_in, d_in, T, cuda_input_width(cb, l), dr, l);
    void *swap = d_out;
    d_out = d_in;
    d_in = swap;
  }
  cb->input->backward(cb, d_out, T, dr);
  cuda_gradient_final(cb, 0);
}

