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
 *    the host buffer (tests, and under the host step);
 *  - under the CUDA step (cuda_step_create; the trainer and bench_train on
 *    a GPU): the fp32 master weights, gradient and optimizer state live on
 *    the device, gradients are all-reduced through NCCL bucket by bucket
 *    while backward still runs, and clip + update run as kernels.
 * Device memory is taken at creation, sized from the capacity: one arena,
 * and cuDNN's workspace and reserves in an allocation of their own, which
 * grows (counted: workspace_growths) if a batch shape needs more than the
 * capacity's sizing, since cuDNN's needs are not monotonic in the shape. */
#ifndef RNND_CUDA_BACKEND_H
#define RNND_CUDA_BACKEND_H

#include <stddef.h>

#include "rnnd/backend.h"
#include "rnnd/comm.h"
#include "rnnd/optim.h"
#include "rnnd/step.h"

/* Visible CUDA devices; 0 when there is no driver or no device (never fails). */
int cuda_device_count(void);
/* Makes GPU local_rank % count current for this process and writes its
 * description ("NVIDIA H200 (sm_90, 139 GiB), device 3 of 8") into name. */
int cuda_device_bind(int local_rank, char *name, size_t size);
/* Bytes in use on the current device as the driver reports them (every
 * context on it, this one included). */
size_t cuda_device_used_bytes(void);

/* NULL when the CUDA backend runs models of this shape, else what it lacks
 * ("model.decoder = adaptive is not implemented"). */
const char *cuda_backend_supports(const rnnd_model_shape *shape);
/* Free with be->ops->destroy(be). A device must be bound first. */
rnnd_backend *cuda_backend_create(const rnnd_layout *layout, const rnnd_backend_capacity *cap);

/* --- the CUDA step --------------------------------------------------------- */

/* The job's NCCL communicator (one rank per GPU): rank 0's unique id
 * travels over MPI. Create after the device is bound; free with
 * nccl_destroy. No wait on it lasts longer than timeout_s (comm.timeout_s;
 * <= 0: no bound): past it, or on a NCCL error, the communicator is aborted
 * and the process exits with one line naming the rank. */
typedef struct rnnd_nccl rnnd_nccl;
rnnd_nccl *nccl_create(const rnnd_comm *comm, double timeout_s);
void nccl_destroy(rnnd_nccl *nccl);

/* NULL when the CUDA step runs this optimizer, else why not (averaged
 * weights: train.ema_decay); device_open_step then drives the CUDA backend
 * with the host step. */
const char *cuda_step_supports(const rnnd_optimizer *opt);
/* The device-resident training step (step.h) on a CUDA backend: master
 * weights, gradient and optimizer state on the GPU, the gradient summed
 * over the ranks by NCCL (several ranks: it creates the communicator)
 * while backward runs, clip and update as kernels. From creation on the
 * backend's train_batch and eval_batch ignore their params argument and use
 * the device's weights. Loads params and opt at creation. */
rnnd_step *cuda_step_create(rnnd_backend *be, float *params, rnnd_optimizer *opt, const rnnd_step_options *o);

#endif
