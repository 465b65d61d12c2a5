#!/usr/bin/env bash
# Makes the fuzzers' seed corpora from real artifacts:
#   make_seed_corpus.sh TRAIN_MLP SEED_CORPUS_TOOL OUT_DIR
# OUT_DIR/<target>/ gets, for
#   cache_entry_fuzzer        the cache entries (*.lzc) of a short train_mlp run;
#   executable_loader_fuzzer  their payloads (serialized executables) and the executables of a few
#                             small graphs that use every device opcode;
#   module_verifier_fuzzer    those graphs lowered (serialized proto::Module).
set -euo pipefail
train=$1 tool=$2 out=$3
# The runtime refuses unknown LAZYRT_* settings, and none of the caller's should change the seeds.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^LAZYRT_' || true)

rm -rf "$out"
mkdir -p "$out/cache" "$out/cache_entry_fuzzer" "$out/executable_loader_fuzzer" "$out/module_verifier_fuzzer"
"$train" --steps 2 --epochs 1 --cache-dir "$out/cache" > "$out/train_mlp.log"
shopt -s nullglob
entries=("$out"/cache/*.lzc)
if ((${#entries[@]} == 0)); then
  echo "make_seed_corpus: train_mlp left no cache entries in $out/cache" >&2
  exit 1
fi
cp "${entries[@]}" "$out/cache_entry_fuzzer/"
"$tool" payloads "$out/cache" "$out/executable_loader_fuzzer"
"$tool" graphs "$out/module_verifier_fuzzer" "$out/executable_loader_fuzzer"
for dir in "$out"/*_fuzzer; do
  echo "make_seed_corpus: $(ls "$dir" | wc -l) seeds in $dir"
done
