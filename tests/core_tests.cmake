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
list(APPEND grad_files ${RNND_FIXTURES}/grad_gru_l2_uni_adaptive.h5 ${RNND_FIXTURES}/grad_lstm_l1_bi_adaptive.h5)
foreach(cell gru lstm)
  foreach(layers 1 2)
    foreach(dir uni bi)
      list(APPEND grad_files ${RNND_FIXTURES}/classify_${cell}_l${layers}_${dir}.h5)
    endforeach()
    list(APPEND grad_files ${RNND_FIXTURES}/regress_${cell}_l${layers}.h5)
  endforeach()
endforeach()
# One thread, and two (the recurrent loop then splits hidden units).
foreach(threads 1 2)
  add_test(NAME gradients_vs_torch_t${threads} COMMAND test_gradients --threads ${threads} ${grad_files})
  add_test(NAME adam_vs_torch_t${threads}
           COMMAND test_adam --threads ${threads} ${RNND_FIXTURES}/adam_gru.h5 ${RNND_FIXTURES}/adam_lstm.h5)
  set_tests_properties(gradients_vs_torch_t${threads} adam_vs_torch_t${threads}
                       PROPERTIES FIXTURES_REQUIRED torch LABELS "torch;math")
endforeach()

add_executable(test_bptt_segment ${RNND_TEST_DIR}/core/test_bptt_segment.c)
target_link_libraries(test_bptt_segment PRIVATE rnnd)
foreach(threads 1 2)
  add_test(NAME bptt_segment_equals_full_t${threads} COMMAND test_bptt_segment --threads ${threads})
  set_tests_properties(bptt_segment_equals_full_t${threads} PROPERTIES LABELS "math")
endforeach()

add_executable(test_stream ${RNND_TEST_DIR}/core/test_stream.c)
target_link_libraries(test_stream PRIVATE rnnd)
add_test(NAME stream_plan_and_carry COMMAND test_stream)
set_tests_properties(stream_plan_and_carry PROPERTIES LABELS "math;data")

add_executable(test_dropout ${RNND_TEST_DIR}/core/test_dropout.c)
target_link_libraries(test_dropout PRIVATE rnnd_test_fixture)
add_test(NAME dropout_keyed_by_piece COMMAND test_dropout ${RNND_FIXTURES}/grad_gru_l3_uni_untied.h5)
set_tests_properties(dropout_keyed_by_piece PROPERTIES FIXTURES_REQUIRED torch LABELS "torch;math")
# locked dropout, embedding dropout, AR and TAR against PyTorch (masks drawn in Python)
add_executable(test_regularisers ${RNND_TEST_DIR}/core/test_regularisers.c)
target_link_libraries(test_regularisers PRIVATE rnnd_test_fixture)
add_test(NAME regularisers_match_torch COMMAND test_regularisers ${RNND_FIXTURES}/regularise_gru_locked.h5
         ${RNND_FIXTURES}/regularise_lstm_locked.h5 ${RNND_FIXTURES}/regularise_gru_unlocked.h5)
set_tests_properties(regularisers_match_torch PROPERTIES FIXTURES_REQUIRED torch LABELS "torch;math")

add_executable(test_config ${RNND_TEST_DIR}/core/test_config.c)
target_link_libraries(test_config PRIVATE rnnd)
add_test(NAME config_parser COMMAND test_config ${RNND_TEST_DIR}/core/configs/good.ini ${RNND_WORK})
set_tests_properties(config_parser PROPERTIES LABELS "config")

add_executable(test_bias_init ${RNND_TEST_DIR}/core/test_bias_init.c)
target_link_libraries(test_bias_init PRIVATE rnnd)
add_test(NAME decoder_bias_unigram COMMAND test_bias_init)
set_tests_properties(decoder_bias_unigram PROPERTIES LABELS "math")

# The library's files call each other without cycles (nm on librnnd.a).
add_test(NAME files_without_cycles COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/check_layering.py $<TARGET_FILE:rnnd>)
set_tests_properties(files_without_cycles PROPERTIES LABELS "config")

# ---- the trainer end to end, on the embedded default corpus ---------------
set(RNND_BIBLE ${RNND_WORK}/bible)
add_test(NAME bible_data COMMAND ${RNND_TEST_DIR}/core/prepare_bible_data.sh ${RNND_BIBLE} $<TARGET_FILE:rnn_prep>)
set_tests_properties(bible_data PROPERTIES FIXTURES_SETUP bible LABELS "train")

add_test(NAME train_end_to_end
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/train_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --data ${RNND_BIBLE} --work ${RNND_WORK}/train_e2e --torch-lm ${PROJECT_SOURCE_DIR}/bench/torch_lm.py)
add_test(NAME ranks_match_single_rank
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/ranks_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_BIBLE} --work ${RNND_WORK}/ranks_e2e)
add_test(NAME torch_lm_awd
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/torch_lm_awd.py --torch-lm ${PROJECT_SOURCE_DIR}/bench/torch_lm.py
                 --data ${RNND_BIBLE} --work ${RNND_WORK}/torch_lm_awd)
set_tests_properties(torch_lm_awd PROPERTIES FIXTURES_REQUIRED bible LABELS "train;torch")
set_tests_properties(train_end_to_end ranks_match_single_rank PROPERTIES FIXTURES_REQUIRED bible LABELS "train")
set_tests_properties(ranks_match_single_rank PROPERTIES PROCESSORS 2 LABELS "train;mpi")

# Per-step losses and gradient norms of short runs (precisions, ranks,
# segments, streams, tasks) against values recorded before the step
# interface: restructuring must not change what a step computes.
add_test(NAME step_losses_unchanged
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/step_losses_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --rnn-prep $<TARGET_FILE:rnn_prep> --mpirun ${MPIEXEC_EXECUTABLE} --data ${RNND_BIBLE}
                 --work ${RNND_WORK}/step_losses --fixture ${RNND_TEST_DIR}/core/step_losses.json)
set_tests_properties(step_losses_unchanged PROPERTIES FIXTURES_REQUIRED bible PROCESSORS 2 LABELS "train;mpi")

# ---- bad input to rnn_dist: exit 2 and exactly one line on stderr ---------
set(RNND_CONFIGS ${RNND_TEST_DIR}/core/configs)
function(rnnd_cli_error name regex)
  add_test(NAME cli_error.${name} COMMAND ${RNND_TEST_DIR}/expect_error.sh 2 "${regex}" -- ${ARGN})
  set_tests_properties(cli_error.${name} PROPERTIES LABELS "errors")
endfunction()
set(RD $<TARGET_FILE:rnn_dist>)
rnnd_cli_error(unknown_key [=[unknown_key\.ini:3: unknown key 'model\.hiden' \(did you mean 'model\.hidden'\?\)$]=]
  ${RD} --config ${RNND_CONFIGS}/unknown_key.ini)
rnnd_cli_error(not_integer [=[not_integer\.ini:2: model\.layers = 'two' is not an integer$]=]
  ${RD} --config ${RNND_CONFIGS}/not_integer.ini)
rnnd_cli_error(out_of_range [=[out_of_range\.ini:2: model\.layers = 9 is out of range .1, 8.$]=]
  ${RD} --config ${RNND_CONFIGS}/out_of_range.ini)
rnnd_cli_error(bad_choice [=[bad_choice\.ini:2: model\.cell = 'rnn' is not one of: gru, lstm$]=]
  ${RD} --config ${RNND_CONFIGS}/bad_choice.ini)
rnnd_cli_error(unknown_section [=[unknown_section\.ini:1: unknown section .modle.]=]
  ${RD} --config ${RNND_CONFIGS}/unknown_section.ini)
rnnd_cli_error(not_number [=[not_number\.ini:2: train\.lr = 'fast' is not a number$]=]
  ${RD} --config ${RNND_CONFIGS}/not_number.ini)
rnnd_cli_error(not_bool [=[not_bool\.ini:2: model\.bidirectional = 'maybe' is not a boolean]=]
  ${RD} --config ${RNND_CONFIGS}/not_bool.ini)
rnnd_cli_error(no_section [=[no_section\.ini:1: key outside of any .section.$]=]
  ${RD} --config ${RNND_CONFIGS}/no_section.ini)
rnnd_cli_error(no_equals [=[no_equals\.ini:2: expected 'key = value', got 'cell gru'$]=]
  ${RD} --config ${RNND_CONFIGS}/no_equals.ini)
rnnd_cli_error(tie_mismatch [=[model\.tie_weights needs model\.embed \(100\) = model\.hidden x directions \(64\)$]=]
  ${RD} --config ${RNND_CONFIGS}/tie_mismatch.ini)
rnnd_cli_error(adaptive_tied [=[model\.tie_weights needs model\.decoder = softmax]=]
  ${RD} --set model.tie_weights=true --set model.decoder=adaptive)
rnnd_cli_error(unigram_bias_adaptive [=[model\.decoder_bias_init = unigram needs model\.task = lm and model\.decoder = softmax]=]
  ${RD} --set model.decoder=adaptive --set model.decoder_bias_init=unigram)
rnnd_cli_error(unigram_bias_classify [=[model\.decoder_bias_init = unigram needs model\.task = lm and model\.decoder = softmax]=]
  ${RD} --set model.task=classify --set model.decoder_bias_init=unigram)
rnnd_cli_error(adaptive_cutoffs [=[model\.cutoffs = '2000,100', model\.div_value = 4: cutoffs must ascend and lie in 1\.\.12163 \(vocab size - 1\); 100 does not$]=]
  ${RD} --set data.dir=${RNND_BIBLE} --set model.decoder=adaptive --set model.cutoffs=2000,100)
set_tests_properties(cli_error.adaptive_cutoffs PROPERTIES FIXTURES_REQUIRED bible)
rnnd_cli_error(missing_config [=[nope\.ini: cannot open config file: No such file or directory$]=]
  ${RD} --config ${RNND_WORK}/nope.ini)
rnnd_cli_error(segments_bidirectional [=[train\.bptt_segment = 50 needs a unidirectional model]=]
  ${RD} --set model.bidirectional=true --set train.bptt_segment=50)
# Tasks and modes that do not fit together, or data of the wrong kind (docs/tasks.md).
rnnd_cli_error(stream_bidirectional [=[data\.mode = stream needs a unidirectional model]=]
  ${RD} --set model.bidirectional=true --set data.mode=stream)
rnnd_cli_error(classify_stream [=[model\.task = classify needs whole sequences \(data\.mode = pieces\)$]=]
  ${RD} --set model.task=classify --set data.mode=stream)
rnnd_cli_error(classify_tied [=[model\.task = classify has no vocabulary decoder]=]
  ${RD} --set model.task=classify --set model.tie_weights=true)
rnnd_cli_error(target_last_lm [=[data\.target_last = 5 is for model\.task = regress with data\.mode = pieces]=]
  ${RD} --set data.target_last=5)
rnnd_cli_error(classify_without_labels [=[train\.h5: training set has no /labels but model\.task = classify \(prepare it with rnn_prep --labels\)$]=]
  ${RD} --set data.dir=${RNND_BIBLE} --set model.task=classify)
rnnd_cli_error(classify_max_len [=[valid\.h5: sequence [0-9]+ has [0-9]+ tokens but data\.max_len is 5: classification reads whole sequences]=]
  ${RD} --set data.dir=${RNND_BIBLE}/labels --set model.task=classify --set data.max_len=5)
set_tests_properties(cli_error.classify_without_labels cli_error.classify_max_len PROPERTIES FIXTURES_REQUIRED bible)
rnnd_cli_error(set_unknown_key [=[--set train\.step=5: unknown key 'train\.step' \(did you mean 'train\.steps'\?\)$]=]
  ${RD} --set train.step=5)
rnnd_cli_error(set_wrong_section [=[--set data\.hidden=5: unknown key 'data\.hidden' \(did you mean 'model\.hidden'\?\)$]=]
  ${RD} --set data.hidden=5)
rnnd_cli_error(set_malformed [=[--set lr: expected section\.key=value$]=] ${RD} --set lr)
rnnd_cli_error(unknown_option [=[unknown option '--frobnicate' \(see rnn_dist --help\)$]=] ${RD} --frobnicate)
rnnd_cli_error(config_equals_value [=[unknown_key\.ini:3: unknown key 'model\.hiden']=]
  ${RD} --config=${RNND_CONFIGS}/unknown_key.ini --set=train.steps=1)
rnnd_cli_error(unknown_verb [=[unknown verb 'trian': train, eval, generate or predict]=] ${RD} trian --config x.ini)
rnnd_cli_error(stray_argument [=[unexpected argument 'extra' \(see rnn_dist --help\)$]=] ${RD} eval --checkpoint m.h5 --data d.h5 extra)
rnnd_cli_error(missing_value [=[--config: missing value]=] ${RD} --config)
rnnd_cli_error(no_train_data [=[data\.train is not set \(or set data\.dir\)$]=] ${RD} --set output.dir=${RNND_WORK}/x)
# A GPU requested where there is none: a CPU-only build says so; a CUDA
# build says no device is visible (hidden here with CUDA_VISIBLE_DEVICES).
if(RNND_HAVE_CUDA)
  rnnd_cli_error(cuda_absent [=[train\.device = cuda but no CUDA device is visible to this process]=]
    ${RD} --config ${RNND_CONFIGS}/cuda_absent.ini --set data.dir=${RNND_BIBLE})
  set_tests_properties(cli_error.cuda_absent PROPERTIES ENVIRONMENT "CUDA_VISIBLE_DEVICES=")
else()
  rnnd_cli_error(cuda_absent [=[train\.device = cuda but this rnn_dist was built without the CUDA backend]=]
    ${RD} --config ${RNND_CONFIGS}/cuda_absent.ini --set data.dir=${RNND_BIBLE})
endif()
rnnd_cli_error(missing_data [=[/absent/train\.h5: cannot open \(No such file or directory\)$]=]
  ${RD} --set data.train=/absent/train.h5)
rnnd_cli_error(eval_missing_args [=[eval: --checkpoint and --data are required]=] ${RD} eval --data x.h5)
rnnd_cli_error(eval_bad_number [=[--max-len: expected an integer in \[1, 16777216\], got 'long'$]=]
  ${RD} eval --max-len=long)

# bad data sets (made by the data tests' fixture) reach the trainer's reader
set(RNND_BAD ${RNND_WORK}/data/bad)
rnnd_cli_error(data_token_range [=[token_range\.h5: /tokens\[2\] = 10 is outside the vocabulary]=]
  ${RD} --set data.train=${RNND_BAD}/token_range.h5)
rnnd_cli_error(data_offsets [=[offsets_not_increasing\.h5: /offsets\[2\] = 3 is not greater than /offsets\[1\] = 3]=]
  ${RD} --set data.train=${RNND_BAD}/offsets_not_increasing.h5)
rnnd_cli_error(data_empty [=[empty\.h5: .*empty]=] ${RD} --set data.train=${RNND_BAD}/empty.h5)
set_tests_properties(cli_error.data_token_range cli_error.data_offsets cli_error.data_empty
                     PROPERTIES FIXTURES_REQUIRED rnnd_data_bad)
# the bible splits against another vocabulary, and buckets checked on real data
rnnd_cli_error(valid_other_vocab [=[valid\.h5: validation set has vocab_size [0-9]+ .* but the training set .* has [0-9]+]=]
  ${RD} --set data.dir=${RNND_BIBLE} --set data.valid=${RNND_WORK}/data/small/valid.h5 --set data.test=none)
rnnd_cli_error(buckets_descending [=[data\.buckets = '10,5': bounds must be strictly ascending$]=]
  ${RD} --config ${RNND_CONFIGS}/buckets_descending.ini --set data.dir=${RNND_BIBLE})
set_tests_properties(cli_error.valid_other_vocab cli_error.buckets_descending cli_error.cuda_absent
                     PROPERTIES FIXTURES_REQUIRED "bible;rnnd_data_small")

# --help lists every option and every configuration key; shipped configs parse
add_test(NAME help_lists_everything COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/check_help.py ${RD}
         ${PROJECT_SOURCE_DIR}/src/config.c ${PROJECT_SOURCE_DIR}/configs
         ${PROJECT_SOURCE_DIR}/src/tools/rnn_dist_main.c)
set_tests_properties(help_lists_everything PROPERTIES LABELS "config")

# Forecasting (model.task = regress) on R's monthly sunspots, against the
# naive forecast and bench/torch_forecast.py. Needs Rscript (skips without).
add_test(NAME forecast_sunspots
         COMMAND ${RNND_PYTHON} ${RNND_TEST_DIR}/core/forecast_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --rnn-prep $<TARGET_FILE:rnn_prep> --torch-forecast ${PROJECT_SOURCE_DIR}/bench/torch_forecast.py
                 --config ${PROJECT_SOURCE_DIR}/configs/sunspots_lstm.ini --work ${RNND_WORK}/forecast_e2e
                 --bible ${RNND_WORK}/bible)
set_tests_properties(forecast_sunspots PROPERTIES FIXTURES_REQUIRED bible LABELS "train;torch" SKIP_RETURN_CODE 77
                     TIMEOUT 900)
