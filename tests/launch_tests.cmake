# launch_tests.cmake — the launch scripts (launch/local.sh, scaling.sh,
# slurm.sbatch with srun/scontrol stand-ins, quickstart.sh) end to end.
# Labelled "launch".
# Included from tests/CMakeLists.txt.

add_test(NAME launch_scripts
         COMMAND ${RNND_TEST_DIR}/launch/launch_e2e.sh ${PROJECT_SOURCE_DIR} ${RNND_WORK}/bible
                 ${RNND_WORK}/launch)
set_tests_properties(launch_scripts PROPERTIES FIXTURES_REQUIRED bible LABELS "launch;mpi;train" PROCESSORS 2
                     TIMEOUT 300 ENVIRONMENT "RNND_BIN=$<TARGET_FILE:rnn_dist>;RNND_PYTHON=${RNND_PYTHON}")

# launch/quickstart.sh (the README's first command) on this build and the
# prepared corpus; its cmake step finds the build configured and up to date.
add_test(NAME quickstart_script
         COMMAND ${RNND_TEST_DIR}/launch/quickstart_e2e.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                 ${RNND_WORK}/bible ${RNND_WORK}/quickstart)
set_tests_properties(quickstart_script PROPERTIES FIXTURES_REQUIRED bible LABELS "launch;train" PROCESSORS 2
                     SKIP_RETURN_CODE 77 TIMEOUT 300)
