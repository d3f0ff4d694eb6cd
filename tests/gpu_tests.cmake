# gpu_tests.cmake — the CUDA backend against the CPU reference, and
# checkpoints moving between GPU and CPU. Labelled "gpu"; built only with
# the CUDA backend. Without a CUDA device each test prints
# "SKIPPED: no CUDA device" and exits 77, which ctest reports as skipped.
# Included from tests/CMakeLists.txt.

if(NOT RNND_HAVE_CUDA)
  return()
endif()

add_executable(test_cuda_backend ${RNND_TEST_DIR}/gpu/test_cuda_backend.c)
target_link_libraries(test_cuda_backend PRIVATE rnnd)
add_test(NAME cuda_matches_cpu COMMAND test_cuda_backend)
set_tests_properties(cuda_matches_cpu PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 600)

add_executable(test_cuda_tasks ${RNND_TEST_DIR}/gpu/test_cuda_tasks.c)
target_link_libraries(test_cuda_tasks PRIVATE rnnd)
add_test(NAME cuda_tasks_match_cpu COMMAND test_cuda_tasks)
set_tests_properties(cuda_tasks_match_cpu PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 600)
# The same comparisons with the CPU backend standing in for the GPU: checks
# the harness (segmented against whole batches, carried state, heads) here.
add_test(NAME cuda_tasks_harness_cpu COMMAND test_cuda_tasks --cpu-standin)
set_tests_properties(cuda_tasks_harness_cpu PROPERTIES LABELS "core" TIMEOUT 300)

add_test(NAME checkpoints_gpu_cpu
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/gpu/gpu_ckpt_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/gpu_ckpt)
set_tests_properties(checkpoints_gpu_cpu PROPERTIES FIXTURES_REQUIRED bible LABELS "gpu;train;mpi" SKIP_RETURN_CODE 77 PROCESSORS 2
                     TIMEOUT 600)
