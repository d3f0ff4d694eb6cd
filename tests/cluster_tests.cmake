# cluster_tests.cmake — rnn_dist on an emulated cluster of two nodes
# (network namespaces joined by a bridge, tests/cluster/up.sh): Open MPI
# across the nodes, a node that dies, and Slurm preempting and requeueing a
# job. Labelled "cluster"; each skips (77) with its reason where this machine
# cannot make namespaces or lacks Slurm. They take the same names for their
# namespaces and bridge, so they never run at the same time.
# Included from tests/CMakeLists.txt.

foreach(mode mpi slurm)
  add_test(NAME cluster_${mode}
           COMMAND ${RNND_TEST_DIR}/cluster/cluster_e2e.sh ${mode} ${PROJECT_SOURCE_DIR} ${RNND_WORK}/bible
                   ${RNND_WORK}/cluster_${mode})
  set_tests_properties(cluster_${mode} PROPERTIES FIXTURES_REQUIRED bible LABELS "cluster;mpi;train" PROCESSORS 2
                       TIMEOUT 240 SKIP_RETURN_CODE 77 RESOURCE_LOCK emulated_cluster
                       ENVIRONMENT "RNND_BIN=$<TARGET_FILE:rnn_dist>;RNND_PYTHON=${RNND_PYTHON}")
endforeach()
