# fuzz.cmake — the libFuzzer targets (built with -DRNND_FUZZ=ON and clang;
# tests/fuzz/run_fuzz.sh does both). Included from the top-level CMakeLists.txt.
foreach(target fuzz_config fuzz_dataset fuzz_checkpoint)
  add_executable(${target} ${CMAKE_CURRENT_LIST_DIR}/${target}.c)
  target_link_libraries(${target} PRIVATE rnnd)
  target_link_options(${target} PRIVATE -fsanitize=fuzzer)
endforeach()
