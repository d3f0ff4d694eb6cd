# gpu_tests.cmake — the CUDA backend and the CUDA step against the CPU
# reference, and checkpoints moving between GPU and CPU. Built only with
# the CUDA backend. One ctest test per case (label "gpu"), so one GPU run
# reports every finding; without a CUDA device each prints
# "SKIPPED: no CUDA device" and exits 77, which ctest reports as skipped.
# The same cases also run with the CPU standing in for the GPU (label
# "core"), which checks their harness and expectations on every machine.
# Included from tests/CMakeLists.txt.

if(NOT RNND_HAVE_CUDA)
  return()
endif()

# test_cuda_backend: loss, every gradient and eval, CELL_lLAYERS_DIR[_tied]_pDROPOUT_DTYPE;
# clip + Adam through train_batch; a decoder in several blocks; batch shapes under one capacity.
set(gpu_backend_cases "")
foreach(dtype fp32 fp16 bf16)
  foreach(shape gru_l1_uni_p0 gru_l3_uni_tied_p3 gru_l1_bi_p0 gru_l3_bi_tied_p3
                lstm_l1_uni_tied_p0 lstm_l3_uni_p3 lstm_l1_bi_tied_p3 lstm_l3_bi_p0)
    list(APPEND gpu_backend_cases ${shape}_${dtype})
  endforeach()
endforeach()
list(APPEND gpu_backend_cases train_gru train_lstm)
foreach(dtype fp32 fp16 bf16)
  list(APPEND gpu_backend_cases big_decoder_${dtype} shape_sweep_${dtype})
endforeach()
# test_cuda_tasks: segments, carried stream state, classify, regress.
set(gpu_tasks_cases segments_gru_k7 segments_lstm_k64 carry_gru carry_lstm_segments_k64 carry_lstm_bf16
    classify_gru_bi classify_lstm_segments_k64 classify_gru_bi_bf16 classify_gru_bi_fp16 regress_lstm
    regress_lstm_segments_k7 regress_lstm_bf16 regress_lstm_fp16)
# test_cuda_step: the device-resident step against the CPU optimizer step.
set(gpu_step_cases fp32 fp16_scaled nan_skip clip_sgd bf16_clip)

foreach(program backend tasks step)
  add_executable(test_cuda_${program} ${RNND_TEST_DIR}/gpu/test_cuda_${program}.c)
  target_link_libraries(test_cuda_${program} PRIVATE rnnd)
  set(names ${gpu_${program}_cases})
  set(case_args "")
  foreach(name ${names})
    add_test(NAME gpu.${program}.${name} COMMAND test_cuda_${program} --case ${name})
    set_tests_properties(gpu.${program}.${name} PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 300)
    list(APPEND case_args --case ${name})
  endforeach()
  # Every case with the CPU standing in; and the list above is the program's whole list.
  add_test(NAME gpu_harness_cpu.${program} COMMAND test_cuda_${program} --cpu-standin ${case_args})
  add_test(NAME gpu_case_list.${program}
           COMMAND ${RNND_TEST_DIR}/gpu/check_case_list.sh $<TARGET_FILE:test_cuda_${program}> ${names})
  set_tests_properties(gpu_harness_cpu.${program} gpu_case_list.${program} PROPERTIES LABELS "core" TIMEOUT 600)
endforeach()

add_test(NAME gpu.checkpoints_gpu_cpu
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/gpu/gpu_ckpt_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/gpu_ckpt)
set_tests_properties(gpu.checkpoints_gpu_cpu PROPERTIES FIXTURES_REQUIRED bible LABELS "gpu;train;mpi"
                     SKIP_RETURN_CODE 77 PROCESSORS 2 TIMEOUT 600)
