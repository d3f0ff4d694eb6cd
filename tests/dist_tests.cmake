# dist_tests.cmake — data parallelism: 16-bit formats, the batch plan and its
# deal to ranks, the communicator's collectives under mpirun, and whole
# training runs at several world sizes. Labelled "dist" (and "mpi" where
# mpirun starts several ranks). Included from tests/CMakeLists.txt.

foreach(name test_half test_plan test_comm)
  add_executable(${name} ${RNND_TEST_DIR}/dist/${name}.c)
  target_link_libraries(${name} PRIVATE rnnd)
endforeach()

add_test(NAME half_conversions COMMAND test_half)
set_tests_properties(half_conversions PROPERTIES LABELS "dist;math")

add_test(NAME sampler_plan_and_deal COMMAND test_plan ${RNND_WORK}/bible/train.h5)
set_tests_properties(sampler_plan_and_deal PROPERTIES FIXTURES_REQUIRED bible LABELS "dist")

foreach(ranks 2 3 4)
  add_test(NAME collectives_np${ranks}
           COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none $<TARGET_FILE:test_comm>)
  set_tests_properties(collectives_np${ranks} PROPERTIES LABELS "dist;mpi" PROCESSORS 2 TIMEOUT 120)
endforeach()

add_test(NAME data_parallel_runs
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/dist/dist_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/dist_e2e)
set_tests_properties(data_parallel_runs PROPERTIES FIXTURES_REQUIRED bible LABELS "dist;mpi;train"
                     PROCESSORS 2 TIMEOUT 900)
