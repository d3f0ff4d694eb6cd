/* cuda_check.h — CHECK macros for every CUDA runtime, cuDNN, cuBLAS and NCCL
 * call: a failure ends the program through RNND_FAIL with the file, line,
 * the call's text and the library's own error string. Each macro needs its
 * library's header included by the file that uses it. */
#ifndef RNND_CUDA_CHECK_H
#define RNND_CUDA_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif
#include "rnnd/common.h"
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t status_ = (call);                                                           \
    if (status_ != cudaSuccess) RNND_FAIL("%s: %s", #call, cudaGetErrorString(status_));    \
  } while (0)

#define CUDNN_CHECK(call)                                                                   \
  do {                                                                                      \
    cudnnStatus_t status_ = (call);                                                         \
    if (status_ != CUDNN_STATUS_SUCCESS) RNND_FAIL("%s: %s", #call, cudnnGetErrorString(status_)); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t status_ = (call);                                                        \
    if (status_ != CUBLAS_STATUS_SUCCESS) RNND_FAIL("%s: %s", #call, cublasGetStatusString(status_)); \
  } while (0)

#define NCCL_CHECK(call)                                                                    \
  do {                                                                                      \
    ncclResult_t status_ = (call);                                                          \
    if (status_ != ncclSuccess) RNND_FAIL("%s: %s", #call, ncclGetErrorString(status_));    \
  } while (0)

/* After a kernel launch: a bad configuration shows up here, not later. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
