# ckpt_tests.cmake — checkpoints, resume (bitwise, and at another world
# size), preemption by signal, retention and bad checkpoints. Labelled
# "ckpt". Included from tests/CMakeLists.txt.
add_test(NAME checkpoint_resume
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/ckpt/resume_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/resume_e2e
                 --plot ${PROJECT_SOURCE_DIR}/src/tools/rnn_plot.py --torch-lm ${PROJECT_SOURCE_DIR}/bench/torch_lm.py)
set_tests_properties(checkpoint_resume PROPERTIES FIXTURES_REQUIRED bible LABELS "ckpt;mpi;train" PROCESSORS 2
                     TIMEOUT 900)

add_test(NAME stream_mode_ranks_resume
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/ckpt/stream_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/stream_e2e
                 --torch-lm ${PROJECT_SOURCE_DIR}/bench/torch_lm.py)
set_tests_properties(stream_mode_ranks_resume PROPERTIES FIXTURES_REQUIRED bible LABELS "ckpt;mpi;train;torch" PROCESSORS 2
                     TIMEOUT 600)

add_test(NAME regularisers_resume_bitwise
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/ckpt/regularised_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_WORK}/bible --work ${RNND_WORK}/regularised_e2e)
set_tests_properties(regularisers_resume_bitwise PROPERTIES FIXTURES_REQUIRED bible LABELS "ckpt;mpi;train"
                     PROCESSORS 2 TIMEOUT 600)
