#!/usr/bin/env bash
# memory_halves.sh BENCH_TRAIN — the activations the CPU backend keeps for
# backward take exactly half the bytes in fp16 and bf16 that they take in
# fp32 (GRU and LSTM, 1 and 3 layers), as bench_train reports them.
set -u
bin=$1 fail=0 checks=0
for cell in gru lstm; do
  for extra in "" "--layers 3"; do
    declare -A act=()
    for p in fp32 fp16 bf16; do
      # shellcheck disable=SC2086
      act[$p]=$("$bin" --cell $cell --precision $p --vocab 500 --embed 32 --hidden 48 --batch 4 --steps 1 \
                --warmup 0 --threads 1 $extra | awk '/^memory/ {print $11}')
    done
    for p in fp16 bf16; do
      checks=$((checks + 1))
      if [ -z "${act[$p]}" ] || [ $((2 * act[$p])) -ne "${act[fp32]}" ]; then
        echo "FAIL $cell $extra $p: activations ${act[$p]} bytes, fp32 ${act[fp32]}"; fail=$((fail + 1))
      else
        echo "ok $cell $extra $p: activations ${act[$p]} bytes = fp32 ${act[fp32]} / 2"
      fi
    done
  done
done
echo "$((checks - fail)) passed, $fail failed"
[ $fail -eq 0 ]
