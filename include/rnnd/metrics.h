/* metrics.h — per-step training metrics in HDF5 (OUTPUT/metrics.h5), one
 * extendible, chunked 1-D dataset per series, so h5py, h5dump and pandas
 * read them directly:
 *   pandas.DataFrame({k: v[:] for k, v in h5py.File(p)["train"].items()})
 *
 *   /train/<series>  one value per optimizer step: step, epoch, loss (mean
 *           NLL of the global batch), tokens (targets in the global batch),
 *           lr, grad_norm (before clipping), imbalance (max/mean tokens over
 *           ranks), compute_s and comm_s (this rank's seconds in the backend
 *           and in the gradient all-reduce), elapsed_s, loss_scale, skipped,
 *           growth_tracker, underflow (mixed precision), ppl, tokens_per_s,
 *           param_norm, update_ratio, memory_bytes, accuracy (model.task =
 *           classify: share of the batch's sequences predicted right; NaN
 *           for language models), rmse (model.task = regress: in original
 *           units; NaN otherwise)
 *   /val/<series>, /test/<series>  one value per evaluation: step, loss,
 *           ppl, tokens (sequences for classify, scored steps for regress),
 *           accuracy (NaN unless classify), rmse and mae (NaN unless regress)
 *   /hist/step, /hist/l<L>_<gate>  every metrics.hist_every steps, the
 *           histogram of each gate's values (after its sigmoid/tanh) of
 *           layer L over that step's batch: rows of `bins` counts on
 *           [-1, 1] (attributes range_min, range_max)
 *
 * Step rows are buffered and appended at every metrics_flush, which the
 * trainer calls once per log interval. The file is closed between writes,
 * because HDF5 locks a file that is open for writing: h5py or h5dump can
 * read it at any time the trainer is not appending. Only rank
 * 0 opens a file; on other ranks every call is a no-op.
 *
 * Ownership: metrics_open creates the file and buffers, metrics_close
 * flushes and releases them. */
#ifndef RNND_METRICS_H
#define RNND_METRICS_H

#include <hdf5.h>
#include <stdint.h>

typedef struct {
  int64_t step, epoch;
  double loss;
  int64_t tokens;
  double lr, grad_norm, imbalance, compute_s, comm_s, elapsed_s;
  double loss_scale;      /* the scale the step's backward used (1 unless fp16) */
  int32_t skipped;        /* 1: non-finite gradient, no update */
  int64_t growth_tracker; /* finite steps in a row since the scale last changed */
  double underflow;       /* share of non-zero gradient values lost to 16-bit rounding */
  double ppl;             /* exp(loss) */
  double tokens_per_s;    /* the whole job's, this step */
  double param_norm;      /* of the fp32 master weights after the step */
  double update_ratio;    /* |update| / |weights| */
  int64_t memory_bytes;   /* bytes held (allocated once: the peak) */
  double accuracy;        /* classify; NaN otherwise */
  double rmse;            /* regress: of the global batch, original units; NaN otherwise */
} rnnd_step_metrics;

typedef struct {
  int64_t step;
  double loss, ppl;
  int64_t tokens;
  double accuracy;        /* classify; NaN otherwise */
  double rmse, mae;       /* regress (original units); NaN otherwise */
} rnnd_eval_metrics;

typedef struct {
  char path[4200];
  int active;                 /* rank 0 */
  hid_t file, train, valid, test; /* open only while writing (readers can open it between) */
  rnnd_step_metrics *pending; /* rows not yet written */
  int n_pending, capacity;
  char *column_buffer;        /* one column of the pending rows */
  int64_t train_rows, valid_rows, test_rows;
  hid_t hist;                 /* /hist, or invalid when histograms are off */
  int hist_series, hist_bins; /* datasets l<L>_<gate> (layers x gates) and bins */
  int64_t hist_rows;
} rnnd_metrics;

/* active = 0 (ranks other than 0): a no-op recorder. resume_step >= 0:
 * a resumed run appends to DIR/metrics.h5 if it exists, after dropping the
 * rows of steps later than resume_step (so no step appears twice). */
void metrics_open(rnnd_metrics *m, const char *dir, int active, int64_t resume_step);
void metrics_add_step(rnnd_metrics *m, const rnnd_step_metrics *row);
/* test = 0: a validation row (/val), 1: a test row (/test). */
void metrics_add_eval(rnnd_metrics *m, int test, const rnnd_eval_metrics *row);
/* Records a histogram row: counts[series * bins], series = layer * gates + gate,
 * named l<layer>_<gate_names[gate]>. The first call creates the datasets. */
void metrics_add_histograms(rnnd_metrics *m, int64_t step, int layers, int gates, const char *const *gate_names,
                            int bins, const int64_t *counts);
/* Writes the pending rows and flushes the file. */
void metrics_flush(rnnd_metrics *m);
void metrics_close(rnnd_metrics *m);

#endif
