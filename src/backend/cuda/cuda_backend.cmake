# cuda_backend.cmake — finds the CUDA toolkit, cuDNN and NCCL and, when all
# three are there (and RNND_CUDA is ON), enables the CUDA language and sets
#   RNND_HAVE_CUDA        ON
#   RNND_CUDA_SOURCES     the backend's sources, for the rnnd library
#   rnnd_link_cuda_backend(target)  its includes, definitions and libraries.
# Included from the top-level CMakeLists.txt.

set(RNND_HAVE_CUDA OFF)
set(RNND_CUDA_SOURCES "")
if(NOT RNND_CUDA)
  message(STATUS "rnn_dist: CUDA backend disabled (-DRNND_CUDA=OFF), CPU backend only")
  return()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "rnn_dist: no CUDA toolkit, CPU backend only")
  return()
endif()

find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
set(missing "")
foreach(item CUDNN_INCLUDE_DIR CUDNN_LIBRARY NCCL_INCLUDE_DIR NCCL_LIBRARY)
  if(NOT ${item})
    list(APPEND missing ${item})
  endif()
endforeach()
if(missing)
  message(WARNING "rnn_dist: CUDA toolkit ${CUDAToolkit_VERSION} found but not ${missing} "
                  "(set CUDNN_ROOT / NCCL_ROOT); building the CPU backend only")
  return()
endif()

# CUDA 13 dropped Volta (sm_70); CUDA 12 still builds it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  if(CUDAToolkit_VERSION VERSION_GREATER_EQUAL 13)
    set(CMAKE_CUDA_ARCHITECTURES 75 80 90)
  else()
    set(CMAKE_CUDA_ARCHITECTURES 70 80 90)
  endif()
endif()
if(NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
endif()
enable_language(CUDA)
# No separable compilation, so programs link with the C compiler (and its
# flags, e.g. -fsanitize) against cudart; a CUDA object in the rnnd library
# must not turn every program's link over to nvcc.
set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES 0)
# One CUDA runtime in the process: the shared one (CUDA::cudart), which
# cuDNN, cuBLAS and NCCL also use.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_FLAGS_RELEASE "-O3 -DNDEBUG")
set(RNND_HAVE_CUDA ON)
message(STATUS "rnn_dist: CUDA backend ON (CUDA ${CUDAToolkit_VERSION}, architectures "
               "${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${CUDNN_LIBRARY}, NCCL ${NCCL_LIBRARY})")

set(dir ${CMAKE_CURRENT_LIST_DIR})
set(RNND_CUDA_SOURCES ${dir}/cuda_backend.c ${dir}/cuda_device.c ${dir}/cuda_heads.c ${dir}/cuda_kernels.cu ${dir}/cuda_layers.c
                      ${dir}/cuda_segments.c ${dir}/cuda_step.c ${dir}/nccl_comm.c)

function(rnnd_link_cuda_backend target)
  target_compile_definitions(${target} PUBLIC RNND_HAVE_CUDA=1)
  target_include_directories(${target} PRIVATE ${CUDNN_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas ${CUDNN_LIBRARY} ${NCCL_LIBRARY})
  set(nvcc_warnings -Xcompiler=-Wall,-Wextra)
  if(RNND_WERROR)
    list(APPEND nvcc_warnings -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${nvcc_warnings}>")
endfunction()
