# data_tests.cmake — tests of rnn_prep, data/prepare_bible.sh and the data-set
# reader (dataset_load), all labelled "data". Included from tests/CMakeLists.txt,
# which defines RNND_TEST_DIR, RNND_PYTHON and RNND_WORK.

set(RNND_DATA_WORK ${RNND_WORK}/data)
set(RNND_DATA_IN ${RNND_TEST_DIR}/data)
set(RNND_EXPECT_ERROR ${RNND_TEST_DIR}/expect_error.sh)

add_executable(dataset_check ${RNND_DATA_IN}/dataset_check.c)
target_link_libraries(dataset_check PRIVATE rnnd)
add_executable(test_dataset ${RNND_DATA_IN}/test_dataset.c)
target_link_libraries(test_dataset PRIVATE rnnd)

# add_test() plus the "data" label. A function, not a macro, so that the
# backslashes in the regular expressions below reach the test unchanged.
function(rnnd_data_test name)
  add_test(NAME ${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "data")
endfunction()

# ---- rnn_prep on the hand-written corpus ----------------------------------
rnnd_data_test(data.prep_small_setup
  COMMAND $<TARGET_FILE:rnn_prep> --train ${RNND_DATA_IN}/small_train.txt
          --valid ${RNND_DATA_IN}/small_valid.txt --test ${RNND_DATA_IN}/small_test.txt
          --out ${RNND_DATA_WORK}/small)
set_tests_properties(data.prep_small_setup PROPERTIES FIXTURES_SETUP rnnd_data_small)

rnnd_data_test(data.prep_small_check
  COMMAND ${RNND_PYTHON} ${RNND_DATA_IN}/check_prep.py $<TARGET_FILE:rnn_prep>
          ${RNND_DATA_IN} ${RNND_DATA_WORK}/check_prep)

rnnd_data_test(data.dataset_unit COMMAND test_dataset ${RNND_DATA_WORK}/small)
set_tests_properties(data.dataset_unit PROPERTIES FIXTURES_REQUIRED rnnd_data_small)

# ---- rnn_prep bad input: exit 2 and one line on stderr ---------------------
function(rnnd_prep_error name regex)
  rnnd_data_test(data.prep_error_${name}
    COMMAND ${RNND_EXPECT_ERROR} 2 "${regex}" -- $<TARGET_FILE:rnn_prep> ${ARGN})
endfunction()

set(small_in --valid ${RNND_DATA_IN}/small_valid.txt --out ${RNND_DATA_WORK}/prep_errors)
rnnd_prep_error(missing_train [=[^rnn_prep: error: missing --train FILE]=] ${small_in})
rnnd_prep_error(unreadable_train
  [=[^rnn_prep: error: .*/no_such_file\.txt: cannot open \(No such file or directory\)$]=]
  --train ${RNND_DATA_WORK}/no_such_file.txt ${small_in})
rnnd_prep_error(unknown_option [=[^rnn_prep: error: unknown option '--frobnicate' \(see rnn_prep --help\)$]=]
  --train ${RNND_DATA_IN}/small_train.txt ${small_in} --frobnicate)
rnnd_prep_error(missing_argument [=[^rnn_prep: error: --out: missing value \(see rnn_prep --help\)$]=]
  --train ${RNND_DATA_IN}/small_train.txt --out)
rnnd_prep_error(stray_argument [=[^rnn_prep: error: unexpected argument 'extra\.txt' \(see rnn_prep --help\)$]=]
  --train ${RNND_DATA_IN}/small_train.txt ${small_in} extra.txt)
rnnd_prep_error(option_equals_value [=[^rnn_prep: error: --max-vocab must be 0 \(unlimited\) or at least 2]=]
  --train=${RNND_DATA_IN}/small_train.txt ${small_in} --max-vocab=1)
rnnd_prep_error(bad_number
  [=[^rnn_prep: error: --min-count: expected an integer in \[0, 2147483647\], got 'ten'$]=]
  --train ${RNND_DATA_IN}/small_train.txt ${small_in} --min-count ten)
rnnd_prep_error(max_vocab_1 [=[^rnn_prep: error: --max-vocab must be 0 \(unlimited\) or at least 2]=]
  --train ${RNND_DATA_IN}/small_train.txt ${small_in} --max-vocab 1)
rnnd_prep_error(blank_train
  [=[^rnn_prep: error: .*/blank\.txt: no non-blank lines \(empty data set\)$]=]
  --train ${RNND_DATA_IN}/blank.txt ${small_in})
# A binary file (rnn_prep itself) is not text.
rnnd_prep_error(binary_train [=[^rnn_prep: error: .*rnn_prep:[0-9]+: contains a NUL byte]=]
  --train $<TARGET_FILE:rnn_prep> ${small_in})
rnnd_prep_error(out_is_file [=[^rnn_prep: error: .*/small_train\.txt: (not a directory|cannot create)]=]
  --train ${RNND_DATA_IN}/small_train.txt --valid ${RNND_DATA_IN}/small_valid.txt
  --out ${RNND_DATA_IN}/small_train.txt)

# ---- data-set reader -------------------------------------------------------
rnnd_data_test(data.make_bad_datasets
  COMMAND ${RNND_PYTHON} ${RNND_DATA_IN}/make_bad_datasets.py ${RNND_DATA_WORK}/bad)
set_tests_properties(data.make_bad_datasets PROPERTIES FIXTURES_SETUP rnnd_data_bad)

# Files written by h5py with other integer widths and string kinds load fine.
foreach(name good good_fixed_strings)
  rnnd_data_test(data.reader_ok_${name}
    COMMAND dataset_check ${RNND_DATA_WORK}/bad/${name}.h5)
  set_tests_properties(data.reader_ok_${name} PROPERTIES
    FIXTURES_REQUIRED rnnd_data_bad PASS_REGULAR_EXPRESSION "^ok 3 sequences 10 tokens\n$")
endforeach()
rnnd_data_test(data.reader_ok_prep COMMAND dataset_check ${RNND_DATA_WORK}/small/test.h5)
set_tests_properties(data.reader_ok_prep PROPERTIES
  FIXTURES_REQUIRED rnnd_data_small PASS_REGULAR_EXPRESSION "^ok 2 sequences 8 tokens\n$")

# Each bad file: exit 2, one stderr line naming the file and the problem.
function(rnnd_reader_error name regex)
  rnnd_data_test(data.reader_error_${name}
    COMMAND ${RNND_EXPECT_ERROR} 2 "^dataset_check: error: .*/${name}\\.h5: ${regex}$"
            -- $<TARGET_FILE:dataset_check> ${RNND_DATA_WORK}/bad/${name}.h5)
  set_tests_properties(data.reader_error_${name} PROPERTIES FIXTURES_REQUIRED rnnd_data_bad)
endfunction()

# The same through the on-disk reader (the tokens are read chunk by chunk
# and checked as they are read; these files are contiguous, no chunks).
foreach(name good good_fixed_strings)
  rnnd_data_test(data.reader_on_disk_ok_${name}
    COMMAND dataset_check --on-disk ${RNND_DATA_WORK}/bad/${name}.h5)
  set_tests_properties(data.reader_on_disk_ok_${name} PROPERTIES
    FIXTURES_REQUIRED rnnd_data_bad PASS_REGULAR_EXPRESSION "^ok 3 sequences 10 tokens( on disk)?\n$")
endforeach()
rnnd_data_test(data.reader_on_disk_ok_prep COMMAND dataset_check --on-disk ${RNND_DATA_WORK}/small/test.h5)
set_tests_properties(data.reader_on_disk_ok_prep PROPERTIES
  FIXTURES_REQUIRED rnnd_data_small PASS_REGULAR_EXPRESSION "^ok 2 sequences 8 tokens on disk\n$")
foreach(case "token_range;/tokens\\[2\\] = 10 is outside the vocabulary \\(chunk 0 at byte offset [0-9]+\\)"
             "negative_id;/tokens\\[1\\] = -3 is a negative token id \\(chunk 0 at byte offset [0-9]+\\)")
  list(GET case 0 name)
  list(GET case 1 regex)
  rnnd_data_test(data.reader_on_disk_error_${name}
    COMMAND ${RNND_EXPECT_ERROR} 2 "^dataset_check: error: .*/${name}\\.h5: ${regex}$"
            -- $<TARGET_FILE:dataset_check> --on-disk ${RNND_DATA_WORK}/bad/${name}.h5)
  set_tests_properties(data.reader_on_disk_error_${name} PROPERTIES FIXTURES_REQUIRED rnnd_data_bad)
endforeach()

rnnd_reader_error(token_range
  [=[/tokens\[2\] = 10 is outside the vocabulary \(vocab_size 10\)]=])
rnnd_reader_error(negative_id [=[/tokens\[1\] = -3 is a negative token id]=])
rnnd_reader_error(empty [=[data set is empty \(no sequences\)]=])
rnnd_reader_error(offsets_empty [=[/offsets is empty \(it needs n_sequences \+ 1 entries\)]=])
rnnd_reader_error(offsets_not_increasing
  [=[/offsets\[2\] = 3 is not greater than /offsets\[1\] = 3 \(sequences must be non-empty and offsets increasing\)]=])
rnnd_reader_error(first_offset [=[/offsets\[0\] must be 0 \(it is 1\)]=])
rnnd_reader_error(last_offset [=[last offset 9 != number of tokens 10]=])
rnnd_reader_error(missing_tokens [=[missing dataset /tokens]=])
rnnd_reader_error(missing_offsets [=[missing dataset /offsets]=])
rnnd_reader_error(tokens_group [=[/tokens is not a dataset]=])
rnnd_reader_error(wrong_rank [=[/tokens has rank 2, expected a 1-D dataset]=])
rnnd_reader_error(float_tokens [=[/tokens has floating point type, expected integers]=])
rnnd_reader_error(format_version2
  [=[format_version 2 is newer than this program supports \(1\)]=])
rnnd_reader_error(no_format_version [=[missing root attribute format_version]=])
rnnd_reader_error(wrong_format [=[attribute format is "something-else", expected "rnn_dist-lm" or "rnn_dist-series"]=])
rnnd_reader_error(no_vocab_size [=[missing root attribute vocab_size]=])
# (".0" stands for "[0": an unbalanced bracket would break CMake's list splitting)
rnnd_reader_error(eos_out_of_range [=[eos_id 10 is outside .0, vocab_size 10\)]=])
rnnd_reader_error(unk_negative [=[unk_id -1 is outside .0, vocab_size 10\)]=])
rnnd_reader_error(vocab_length [=[/vocab has 9 entries but vocab_size is 10]=])
rnnd_reader_error(missing_vocab [=[missing dataset /vocab]=])
rnnd_reader_error(not_hdf5 [=[not an HDF5 file]=])
rnnd_reader_error(no_such_file [=[cannot open \(No such file or directory\)]=])

# ---- built-in corpus end to end (skipped without bible-kjv) ---------------
rnnd_data_test(data.bible_end_to_end
  COMMAND ${RNND_DATA_IN}/bible_e2e.sh ${RNND_TEST_DIR}/../data/prepare_bible.sh
          $<TARGET_FILE:rnn_prep> $<TARGET_FILE:dataset_check> ${RNND_DATA_WORK}/bible)
set_tests_properties(data.bible_end_to_end PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)

# ---- tokens read from the file during training (token_store.h) ------------
# A chunk corrupted mid-run, the file replaced or rewritten under the job:
# exit 2 with one line naming the file (and the chunk and byte offset), the
# last checkpoint still resumes.
add_test(NAME data.on_disk_faults
         COMMAND ${RNND_PYTHON} ${RNND_DATA_IN}/on_disk_e2e.py --rnn-dist $<TARGET_FILE:rnn_dist>
                 --data ${RNND_WORK}/bible --work ${RNND_DATA_WORK}/on_disk)
set_tests_properties(data.on_disk_faults PROPERTIES FIXTURES_REQUIRED bible LABELS "data;train" TIMEOUT 300)
