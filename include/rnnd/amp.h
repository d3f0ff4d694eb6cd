/* amp.h — mixed precision: the dynamic loss scaler of fp16 training and the
 * 16-bit rounding of gradients as they leave the backward pass.
 *
 * The scaler follows PyTorch's GradScaler (and apex): the loss is multiplied
 * by `scale` before backward, the gradient divided by it after the
 * all-reduce (so clipping sees true gradients). A step whose gradient holds
 * an inf or NaN is skipped and the scale multiplied by backoff_factor; after
 * growth_interval finite steps in a row it is multiplied by growth_factor;
 * it stays within [min_scale, max_scale]. The decision is taken on the
 * all-reduced gradient, which is bitwise the same on every rank, so every
 * rank skips the same steps. Without fp16 (or with amp.loss_scaling off) the
 * scale is fixed at 1; a non-finite step is still skipped rather than
 * written into the weights.
 *
 * No allocation: the scaler is a plain value. */
#ifndef RNND_AMP_H
#define RNND_AMP_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/config.h"
#include "rnnd/half.h"

typedef struct {
  int dynamic;             /* fp16 with amp.loss_scaling */
  double scale;
  double growth_factor, backoff_factor, min_scale, max_scale;
  long growth_interval;
  long growth_tracker;     /* finite steps in a row since the scale last changed */
  int64_t skipped;         /* steps skipped so far */
} rnnd_loss_scaler;

void loss_scaler_init(rnnd_loss_scaler *s, const rnnd_amp_config *cfg, rnnd_dtype precision);
/* Records one step's outcome and returns 1 if its update is to be applied
 * (finite gradient), 0 if it is skipped. Updates scale and tracker. */
int loss_scaler_update(rnnd_loss_scaler *s, int finite);

/* Rounds x[0..n) to the 16-bit format t in place (values stay floats) and
 * returns how many non-zero values became zero (underflow); *nonzero (when
 * not NULL) gets how many were non-zero before. */
size_t amp_round_to_half(rnnd_dtype t, float *x, size_t n, size_t *nonzero);

#endif
