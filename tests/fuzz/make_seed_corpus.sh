#!/usr/bin/env bash
# Makes the fuzzers' seed corpora from real artifacts:
#   make_seed_corpus.sh TRAIN_MLP SEED_CORPUS_TOOL OUT_DIR
# OUT_DIR/<target>/ gets, for
#   cache_entry_fuzzer        the cache entries (*.lzc) of a short train_mlp run;
#   executable_loader_fuzzer  their payloads (serialized executables) and the executables of a few
#                             small graphs that use every device opcode;
#   module_verifier_fuzzer    those graphs lowered (serialized proto::Module);
#   entry_signature_fuzzer    each entry's metadata with its own payload and with another's;
#   run_report_fuzzer         the run report of the train_mlp run, and a report with findings;
#   idx_fuzzer                small IDX image and label files (the first items of Fashion-MNIST's
#                             test split, and tiny made-up ones).
set -euo pipefail
train=$1 tool=$2 out=$3
# The runtime refuses unknown LAZYRT_* settings, and none of the caller's should change the seeds.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^LAZYRT_' || true)

rm -rf "$out"
mkdir -p "$out/cache" "$out/cache_entry_fuzzer" "$out/executable_loader_fuzzer" "$out/module_verifier_fuzzer" \
         "$out/entry_signature_fuzzer" "$out/run_report_fuzzer" "$out/idx_fuzzer"
"$train" --steps 2 --epochs 1 --cache-dir "$out/cache" --report "$out/run_report_fuzzer/train_mlp.json" \
  > "$out/train_mlp.log"
cat > "$out/run_report_fuzzer/findings.json" <<'REPORT'
{"findings": [{"kind": "extra_sync", "location": "train.cc:42", "count": 12, "message": "item() forced a sync",
  "cause": "item()", "what": "loss", "before": null, "now": 3},
 {"kind": "recompile", "location": "train.cc:7", "count": 5, "message": "a shape changed",
  "before": "f32[64,784]", "now": "f32[48,784]"}]}
REPORT
shopt -s nullglob
entries=("$out"/cache/*.lzc)
if ((${#entries[@]} == 0)); then
  echo "make_seed_corpus: train_mlp left no cache entries in $out/cache" >&2
  exit 1
fi
cp "${entries[@]}" "$out/cache_entry_fuzzer/"
"$tool" payloads "$out/cache" "$out/executable_loader_fuzzer" "$out/entry_signature_fuzzer"
"$tool" idx "$out/idx_fuzzer"
"$tool" graphs "$out/module_verifier_fuzzer" "$out/executable_loader_fuzzer"
for dir in "$out"/*_fuzzer; do
  echo "make_seed_corpus: $(ls "$dir" | wc -l) seeds in $dir"
done
