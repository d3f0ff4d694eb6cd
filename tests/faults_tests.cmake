# faults_tests.cmake — reliability under faults: no rank is left waiting when
# another dies or hangs (the collective watchdog). Labelled "faults".
# Included from tests/CMakeLists.txt.

add_test(NAME no_hang_when_a_rank_fails
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/faults/no_hang_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/no_hang)
set_tests_properties(no_hang_when_a_rank_fails PROPERTIES FIXTURES_REQUIRED bible LABELS "faults;mpi" PROCESSORS 2
                     TIMEOUT 400)

# SIGKILL at random moments (one during a checkpoint write), resume each time:
# bitwise the uninterrupted run. The seed is printed; SOAK_SEED fixes it.
set(RNND_SOAK_SEED "" CACHE STRING "seed of the kill-and-resume soak test (empty: from the clock, printed)")
set(soak_seed_args "")
if(RNND_SOAK_SEED)
  set(soak_seed_args --seed ${RNND_SOAK_SEED})
endif()
add_test(NAME kill_and_resume_soak
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/faults/soak_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/soak ${soak_seed_args})
set_tests_properties(kill_and_resume_soak PROPERTIES FIXTURES_REQUIRED bible LABELS "faults;mpi;train" PROCESSORS 2
                     TIMEOUT 600)

# A full disk and a read-only one (small tmpfs mounts; skipped, saying so,
# where mounting is not allowed).
add_test(NAME disk_full_and_read_only
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/faults/disk_full_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --data ${RNND_WORK}/bible --work ${RNND_WORK}/disk_full)
set_tests_properties(disk_full_and_read_only PROPERTIES FIXTURES_REQUIRED bible LABELS "faults" SKIP_RETURN_CODE 77
                     TIMEOUT 300)

# A NaN in one rank's gradient: fp32 stops with the step, tensor and last
# checkpoint; fp16's loss scaler skips and counts it.
add_test(NAME nan_gradient_fp32_stops_fp16_skips
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/faults/nan_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/nan)
set_tests_properties(nan_gradient_fp32_stops_fp16_skips PROPERTIES FIXTURES_REQUIRED bible LABELS "faults;mpi"
                     PROCESSORS 2 TIMEOUT 300)

# libFuzzer on the config parser, the data-set reader and the checkpoint
# loader, a bounded time each (tests/fuzz/run_fuzz.sh builds them with clang
# in its own build directory; longer runs: tests/fuzz/run_fuzz.sh 3600).
set(RNND_FUZZ_SECONDS 20 CACHE STRING "seconds per fuzz target in the test suite")
add_test(NAME fuzz_parsers_and_loaders
         COMMAND ${RNND_TEST_DIR}/fuzz/run_fuzz.sh ${RNND_FUZZ_SECONDS})
set_tests_properties(fuzz_parsers_and_loaders PROPERTIES LABELS "faults;fuzz" SKIP_RETURN_CODE 77 TIMEOUT 900
                     PROCESSORS 2 ENVIRONMENT "RNND_FUZZ_BUILD=${CMAKE_BINARY_DIR}/fuzz")

# valgrind memcheck of rnn_prep, a short CPU training run and eval, and short
# runs of streams with segments, a classifier and a forecaster: no errors, no
# definite leaks (third-party suppressions in tests/faults/valgrind.supp).
# On binaries of its own, built without AVX-512, which valgrind cannot
# decode (valgrind_build.sh).
add_test(NAME valgrind_clean_cpu_run
         COMMAND ${RNND_TEST_DIR}/faults/valgrind_build.sh ${CMAKE_BINARY_DIR}/valgrind
                 ${RNND_WORK}/bible/text ${RNND_WORK}/valgrind)
set_tests_properties(valgrind_clean_cpu_run PROPERTIES FIXTURES_REQUIRED bible LABELS "faults;valgrind"
                     SKIP_RETURN_CODE 77 TIMEOUT 1200 PROCESSORS 2)

# The sanitizer job: an ASan + UBSan build of its own, running the unit and
# MPI tests there.
add_test(NAME sanitizer_build_unit_and_mpi_tests
         COMMAND ${RNND_TEST_DIR}/sanitize/run_sanitized.sh ${CMAKE_BINARY_DIR}/sanitize)
set_tests_properties(sanitizer_build_unit_and_mpi_tests PROPERTIES LABELS "faults;sanitize" TIMEOUT 1500
                     PROCESSORS 2)

# SIGTERM during start-up: step-0 checkpoint, preemption exit code, resumable.
add_test(NAME signal_during_startup
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/faults/startup_signal_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/startup_signal)
set_tests_properties(signal_during_startup PROPERTIES FIXTURES_REQUIRED bible LABELS "faults;mpi" PROCESSORS 2
                     TIMEOUT 300)
