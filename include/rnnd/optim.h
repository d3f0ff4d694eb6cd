/* optim.h — optimizers on the flat fp32 parameter buffer (Adam with
 * torch.optim.Adam's arithmetic, SGD with momentum), the learning-rate
 * schedule, and global-norm gradient clipping (torch.nn.utils.clip_grad_norm_).
 *
 * The optimizer owns its state buffers: optimizer_init allocates,
 * optimizer_free releases. */
#ifndef RNND_OPTIM_H
#define RNND_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/config.h"
#include "rnnd/half.h"

typedef struct {
  int kind;        /* rnnd_optimizer_kind */
  size_t numel;
  float *m;        /* Adam first moment / SGD momentum buffer */
  float *v;        /* Adam second moment (NULL for SGD) */
  int64_t steps;   /* updates applied so far */
  double beta1, beta2, eps, weight_decay, momentum;
  /* Averaged weights (train.ema_decay > 0; else avg is NULL): after update
   * number ema_start (counted from 1) avg is a copy of the weights, after
   * every later one avg = decay * avg + (1 - decay) * weights. Evaluation,
   * model files and inference use them; checkpoints keep them beside the
   * raw weights. */
  float *avg;
  double ema_decay;
  int64_t ema_start;
} rnnd_optimizer;

void optimizer_init(rnnd_optimizer *opt, const rnnd_train_config *cfg, size_t numel);
/* Applies one update and returns its L2 norm (for the update-to-weight ratio). */
double optimizer_step(rnnd_optimizer *opt, float *params, const float *grads, double lr);
/* Mixed precision's compute copy: the weights rounded through a 16-bit
 * format, into a caller-owned buffer of numel floats. */
typedef struct {
  float *to;
  rnnd_dtype format; /* RNND_DTYPE_F16 or RNND_DTYPE_BF16 */
} rnnd_rounded_copy;

/* The same on the gradient times clip (1: as it is), computed on the fly
 * exactly as grad_clip would have scaled it (grads is not written); in the
 * same pass *param_norm (when not NULL) gets the new weights' L2 norm, and
 * `copy` (when not NULL) the new weights rounded, each piece while it is
 * still in cache. */
double optimizer_update(rnnd_optimizer *opt, float *params, const float *grads, double lr, double clip,
                        double *param_norm, const rnnd_rounded_copy *copy);
/* L2 norm of a flat buffer, accumulated in double. */
double flat_norm(const float *x, size_t n);
size_t optimizer_state_bytes(const rnnd_optimizer *opt);
/* The weights evaluation uses: avg once averaging has started, else params. */
const float *optimizer_eval_weights(const rnnd_optimizer *opt, const float *params);
void optimizer_free(rnnd_optimizer *opt);

/* Learning rate for 0-based step `step` of `total_steps`. */
double lr_at_step(const rnnd_train_config *cfg, int64_t step, int64_t total_steps);

/* L2 norm of the whole gradient (accumulated in double). */
double grad_global_norm(const float *grads, size_t numel);
/* grads /= scale (as a multiply by the float 1 / scale; nothing when scale is
 * 1) and, in the same pass, the L2 norm of the result. */
double grad_unscale_norm(float *grads, size_t numel, double scale);
/* amp_round_to_half to `wire` and then grad_unscale_norm, in one pass (for
 * a gradient that is not all-reduced in between): the same values, norm
 * and counts (*nonzero values before rounding, *lost of them to zero). */
double grad_round_unscale_norm(float *grads, size_t numel, rnnd_dtype wire, double scale, size_t *nonzero,
                               size_t *lost);
/* The coefficient clip_grad_norm_ applies to a gradient of norm `norm`:
 * max_norm / (norm + 1e-6) when that is below 1, else 1 (and 1 when
 * max_norm <= 0: clipping off). Every step implementation uses this one. */
double clip_coefficient(double norm, double max_norm);
/* grads *= (float)coef, unless coef is 1. */
void grad_scale(float *grads, size_t numel, double coef);
/* Both: scales grads so their norm is at most max_norm, as clip_grad_norm_
 * does. Returns the coefficient used (1 when not clipped). */
double grad_clip(float *grads, size_t numel, double norm, double max_norm);

#endif
