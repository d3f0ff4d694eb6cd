/* cuda_device.c — which GPU a rank uses, and what the device reports. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda_check.h"
#include "rnnd/cuda_backend.h"

int cuda_device_count(void) {
  int count = 0;
  /* No driver or no device is an answer here, not an error. */
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

int cuda_device_bind(int local_rank, char *name, size_t size) {
  int count = cuda_device_count();
  if (count == 0)
    rnnd_input_error("config: train.device = cuda but no CUDA device is visible to this process (use train.device = "
                     "cpu or auto)");
  int device = local_rank % count;
  CUDA_CHECK(cudaSetDevice(device));
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  snprintf(name, size, "%s (sm_%d%d, %.0f GiB), device %d of %d", prop.name, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), device, count);
  return device;
}

size_t cuda_device_used_bytes(void) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}
