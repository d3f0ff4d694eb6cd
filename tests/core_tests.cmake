# Core tests: the model's math against PyTorch, the optimizer, the trainer,
# the configuration and bad input to rnn_dist.
add_library(rnnd_test_fixture STATIC ${RNND_TEST_DIR}/core/fixture.c)
target_link_libraries(rnnd_test_fixture PUBLIC rnnd)
foreach(name test_gradients test_adam)
  add_executable(${name} ${RNND_TEST_DIR}/core/${name}.c)
  target_link_libraries(${name} PRIVATE rnnd_test_fixture)
endforeach()

set(RNND_FIXTURES ${RNND_WORK}/fixtures)
add_test(NAME torch_fixtures
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/torch_reference.py --out ${RNND_FIXTURES})
set_tests_properties(torch_fixtures PROPERTIES FIXTURES_SETUP torch LABELS "torch")

set(grad_files "")
foreach(cell gru lstm)
  foreach(layers 1 3)
    foreach(dir uni bi)
      foreach(tie tied untied)
        list(APPEND grad_files ${RNND_FIXTURES}/grad_${cell}_l${layers}_${dir}_${tie}.h5)
      endforeach()
    endforeach()
  endforeach()
endforeach()
list(APPEND grad_files ${RNND_FIXTURES}/grad_gru_l2_uni_untied_maxlen4.h5)
# One thread, and two (the recurrent loop then splits hidden units).
foreach(threads 1 2)
  add_test(NAME gradients_vs_torch_t${threads} COMMAND test_gradients --threads ${threads} ${grad_files})
  add_test(NAME adam_vs_torch_t${threads}
           COMMAND test_adam --threads ${threads} ${RNND_FIXTURES}/adam_gru.h5 ${RNND_FIXTURES}/adam_lstm.h5)
  set_tests_properties(gradients_vs_torch_t${threads} adam_vs_torch_t${threads}
                       PROPERTIES FIXTURES_REQUIRED torch LABELS "torch;math")
endforeach()
