# rnn_dist generate and predict, against PyTorch (tests/infer).
add_test(NAME infer_against_torch
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/infer/infer_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --rnn-prep $<TARGET_FILE:rnn_prep> --bible ${RNND_WORK}/bible --work ${RNND_WORK}/infer_e2e)
set_tests_properties(infer_against_torch PROPERTIES FIXTURES_REQUIRED bible LABELS "train;torch" TIMEOUT 900)
