# amp_tests.cmake — mixed precision: the loss scaler on the real trainer
# under mpirun, and fp16/bf16 training against fp32 on a WikiText-2 slice.
# Labelled "amp". Included from tests/CMakeLists.txt.

add_executable(test_amp ${RNND_TEST_DIR}/amp/test_amp.c)
target_link_libraries(test_amp PRIVATE rnnd)
foreach(ranks 1 2 3)
  add_test(NAME loss_scaler_np${ranks}
           COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none $<TARGET_FILE:test_amp>
                   ${RNND_WORK}/bible ${RNND_WORK}/amp_np${ranks})
  set_tests_properties(loss_scaler_np${ranks} PROPERTIES FIXTURES_REQUIRED bible LABELS "amp;mpi" PROCESSORS 2
                       TIMEOUT 300)
endforeach()

# WikiText-2 is not shipped with the project; CI has it beside the clone.
set(RNND_WIKITEXT2 "${PROJECT_SOURCE_DIR}/../shared/data/wikitext-2" CACHE PATH
    "WikiText-2 (train.txt, valid.txt, test.txt) for the precision comparison test")
add_test(NAME precision_vs_fp32_wikitext2
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/amp/precision_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --rnn-prep $<TARGET_FILE:rnn_prep> --wikitext ${RNND_WIKITEXT2} --work ${RNND_WORK}/precision)
set_tests_properties(precision_vs_fp32_wikitext2 PROPERTIES LABELS "amp;train" SKIP_RETURN_CODE 77 TIMEOUT 900
                     PROCESSORS 2)

add_test(NAME activation_memory_halves COMMAND ${RNND_TEST_DIR}/amp/memory_halves.sh $<TARGET_FILE:bench_train>)
set_tests_properties(activation_memory_halves PROPERTIES LABELS "amp")

# bf16 products through oneDNN: gradients and losses against fp32 on small models.
add_executable(test_bf16_products ${RNND_TEST_DIR}/amp/test_bf16_products.c)
target_link_libraries(test_bf16_products PRIVATE rnnd)
add_test(NAME bf16_products_match_fp32 COMMAND test_bf16_products)
set_tests_properties(bf16_products_match_fp32 PROPERTIES LABELS "amp;math" SKIP_RETURN_CODE 77)
add_test(NAME bf16_trains_like_fp32
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/amp/bf16_quality_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --data ${RNND_WORK}/bible --work ${RNND_WORK}/bf16_quality)
set_tests_properties(bf16_trains_like_fp32 PROPERTIES FIXTURES_REQUIRED bible LABELS "amp;train" SKIP_RETURN_CODE 77
                     PROCESSORS 2 TIMEOUT 600)
