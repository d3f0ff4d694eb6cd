# faults_tests.cmake — reliability under faults: no rank is left waiting when
# another dies or hangs (the collective watchdog). Labelled "faults".
# Included from tests/CMakeLists.txt.

add_test(NAME no_hang_when_a_rank_fails
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/faults/no_hang_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/no_hang)
set_tests_properties(no_hang_when_a_rank_fails PROPERTIES FIXTURES_REQUIRED bible LABELS "faults;mpi" PROCESSORS 2
                     TIMEOUT 400)

