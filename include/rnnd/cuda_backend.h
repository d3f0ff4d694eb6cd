/* cuda_backend.h — the CUDA backend (cuDNN RNN layers on packed batches,
 * cuBLAS decoder, a few kernels) and the choice of GPU for a rank. Present
 * only in builds with RNND_HAVE_CUDA; it implements rnnd_backend_ops and
 * computes the same function as the CPU reference backend (same dropout
 * masks, same parameter layout), in fp32 or with fp16/bf16 activations and
 * fp32 math (capacity.storage).
 *
 * Two ways to drive it:
 *  - as any backend: each train_batch uploads the parameters it is given,
 *    converts them into cuDNN's weight space, and adds the gradient into
 *    the host buffer (tests, benchmarks, evaluation);
 *  - device-resident (the trainer on a GPU; capacity.optimizer_state > 0):
 *    the fp32 master weights, gradient and optimizer state live on the
 *    device, gradients are all-reduced through NCCL bucket by bucket while
 *    backward still runs, and clip + update run as kernels. train_batch and
 *    eval_batch then ignore their params argument and use the device's.
 * All device memory is taken in one cudaMalloc at creation, sized from the
 * capacity; no step allocates. */
#ifndef RNND_CUDA_BACKEND_H
#define RNND_CUDA_BACKEND_H

#include <stddef.h>

#include "rnnd/backend.h"
#include "rnnd/comm.h"
#include "rnnd/optim.h"

/* Visible CUDA devices; 0 when there is no driver or no device (never fails). */
int cuda_device_count(void);
/* Makes GPU local_rank % count current for this process and writes its
 * description ("NVIDIA H200 (sm_90, 139 GiB), device 3 of 8") into name. */
int cuda_device_bind(int local_rank, char *name, size_t size);
/* Bytes in use on the current device as the driver reports them (every
 * context on it, this one included). */
size_t cuda_device_used_bytes(void);

/* Free with be->ops->destroy(be). A device must be bound first. */
rnnd_backend *cuda_backend_create(const rnnd_layout *layout, const rnnd_backend_capacity *cap);

/* --- device-resident training -------------------------------------------- */

/* The NCCL communicator of the job (one rank per GPU): rank 0's unique id
 * travels over MPI. Create after the device is bound; free with
 * nccl_destroy. */
typedef struct rnnd_nccl rnnd_nccl;
rnnd_nccl *nccl_create(const rnnd_comm *comm);
void nccl_destroy(rnnd_nccl *nccl);

/* Master weights and optimizer state host -> device (start, resume, after
 * a test hook edits them), and device -> host (checkpoints, model files,
 * replica checks). */
void cuda_resident_load(rnnd_backend *be, const rnnd_optimizer *opt, const float *params);
void cuda_resident_store(rnnd_backend *be, rnnd_optimizer *opt, float *params);

typedef struct {
  double nll;          /* target NLL summed over every rank's share */
  double grad_norm;    /* global L2 norm of the reduced gradient after unscaling */
  double underflow;    /* share of this rank's non-zero gradient values the 16-bit wire lost */
  double exposed_comm_s; /* all-reduce time not hidden behind backward */
} cuda_gradient_result;

typedef struct {
  rnnd_dtype wire;       /* gradient format on the wire (fp32, fp16, bf16) */
  size_t bucket_elems;   /* gradient elements per all-reduce bucket */
  double loss_scale;     /* the gradient is divided by it after the reduce */
  int inject_nan;        /* test hook: a NaN in this rank's gradient before the reduce */
} cuda_reduce_options;

/* Forward and backward of this rank's share `b` (NULL: an empty share that
 * only joins the reduce), the gradient summed over ranks in buckets (last
 * parameters first, each started as soon as backward has finished it),
 * then unscaled; the loss is summed on the device too. nccl may be NULL
 * for one rank. */
void cuda_resident_gradients(rnnd_backend *be, rnnd_nccl *nccl, const rnnd_batch *b, const rnnd_dropout *dr,
                             float loss_weight, const cuda_reduce_options *options, cuda_gradient_result *out);
/* Clip (multiply by `clip`, 1 = none) and one optimizer update with opt's
 * hyperparameters at opt->steps (already counted), then the compute copy;
 * returns the update's L2 norm and the new weights' norm in *param_norm. */
double cuda_resident_update(rnnd_backend *be, const rnnd_optimizer *opt, double lr, double clip, double *param_norm);
/* The reduced, unscaled gradient of the last cuda_resident_gradients -> host. */
void cuda_resident_fetch_gradient(rnnd_backend *be, float *grads);
/* L2 norm of the device's master weights. */
double cuda_resident_param_norm(rnnd_backend *be);

#endif
