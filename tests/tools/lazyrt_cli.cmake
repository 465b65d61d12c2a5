cmake_minimum_required(VERSION 3.25)
# Runs the `lazyrt` tool as a process against a real cache, filled by examples/train_mlp, and
# against hand-written run reports; checks its output, its JSON and its exit codes.
#   -DLAZYRT=path/to/lazyrt -DTRAIN=path/to/train_mlp -DFRAGMENTED=path/to/fragmented_step -DWORK=dir
foreach(var LAZYRT TRAIN FRAGMENTED WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "pass -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(DIR ${WORK}/cache)

function(train)
  execute_process(COMMAND ${TRAIN} --steps 10 --epochs 1 --cache-dir ${DIR}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_mlp failed (${rc}): ${err}")
  endif()
endfunction()

# lazyrt(<expected exit code> <output variable> args...): runs the tool, fails unless it exits with
# the expected code; sets <output variable> to its stdout and <output variable>_err to its stderr.
function(lazyrt expected out_var)
  execute_process(COMMAND ${LAZYRT} ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc STREQUAL "${expected}")
    message(FATAL_ERROR "lazyrt ${ARGN}: exit ${rc}, expected ${expected}\n--- stdout:\n${out}--- stderr:\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${out_var}_err "${err}" PARENT_SCOPE)
endfunction()

function(expect_match text regex)
  if(NOT "${text}" MATCHES "${regex}")
    message(FATAL_ERROR "expected to match '${regex}':\n${text}")
  endif()
endfunction()

# expect_json(<json> <comparison> <value> GET|LENGTH <path>...)
function(expect_json json op value mode)
  string(JSON got ${mode} "${json}" ${ARGN})
  if(NOT got ${op} ${value})
    message(FATAL_ERROR "${ARGN} = ${got}, expected ${op} ${value}")
  endif()
endfunction()

# The keys in the cache, sorted, from `cache ls --json`.
function(cache_keys out_var)
  lazyrt(0 ls cache ls --dir ${DIR} --json)
  string(JSON n LENGTH "${ls}" entries)
  set(keys)
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON key GET "${ls}" entries ${i} key)
      list(APPEND keys ${key})
    endforeach()
  endif()
  list(SORT keys)
  set(${out_var} ${keys} PARENT_SCOPE)
endfunction()

function(expect_entries count)
  cache_keys(keys)
  list(LENGTH keys n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "expected ${count} cache entries, found ${n}: ${keys}")
  endif()
endfunction()

# --- A real cache: the first run compiles and writes, the second loads (hits) -----------------------
train()
train()

lazyrt(0 ls cache ls --dir ${DIR})
expect_match("${ls}" "KEY +SIZE +RAW +CREATED +LAST USED +SAVES +NODES +PARAMS +OUTPUTS +COMPILER +STATE")
expect_match("${ls}" "2 entries, [0-9.]+ (B|KiB|MiB) in ")
expect_entries(2)
cache_keys(keys)
list(GET keys 0 key0)
list(GET keys 1 key1)
foreach(key ${key0} ${key1})
  expect_match("${ls}" "${key} +[0-9.]+ (B|KiB|MiB) .* m?s +[0-9]+ +[0-9]+ +[0-9]+ +lazyrt-sim-compiler/[0-9]+ +ok")
endforeach()
lazyrt(0 ls cache ls --dir ${DIR} --json)
expect_json("${ls}" GREATER 0 GET entries 0 graph nodes)
expect_json("${ls}" STREQUAL ok GET entries 0 state)

# Without --dir, the runtime's own default: $LAZYRT_CACHE_DIR first.
execute_process(COMMAND ${CMAKE_COMMAND} -E env LAZYRT_CACHE_DIR=${DIR} ${LAZYRT} cache ls --json
                OUTPUT_VARIABLE default_ls RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cache ls with LAZYRT_CACHE_DIR failed (${rc})")
endif()
expect_json("${default_ls}" EQUAL 2 LENGTH entries)

lazyrt(0 stats cache stats --dir ${DIR} --json)
expect_json("${stats}" EQUAL 2 GET entries)
expect_json("${stats}" GREATER 0 GET bytes)
# Two graphs (the step and the evaluation): the first run missed and wrote both, the second hit both.
expect_json("${stats}" EQUAL 2 GET hits)
expect_json("${stats}" EQUAL 2 GET misses)
expect_json("${stats}" EQUAL 2 GET writes)
expect_json("${stats}" EQUAL 2 GET misses_by_reason not_found)
string(JSON hits_before GET "${stats}" hits)
lazyrt(0 stats_text cache stats --dir ${DIR})
expect_match("${stats_text}" "hits +[0-9]+ \\([0-9]+%\\)")
expect_match("${stats_text}" "compile time saved +[0-9.]+ m?s")

# --- show: everything about one entry, and looking is not a use ------------------------------------
set(entry0 ${DIR}/${key0}.lzc)
execute_process(COMMAND touch -d "2020-01-01 00:00:00" ${entry0} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "touch -d failed")
endif()
lazyrt(0 show cache show ${key0} --dir ${DIR})
foreach(section "state +ok" "graph +graph_" "kernels, in schedule order" "KIND +ITERATION +VARIANT +GRAIN +LIBRARY +LABEL"
                "DOT +[^\n]* (blis|openblas|onednn|onednn_matmul|libxsmm) +dot\\("
                "instructions fused away" "arena +[0-9.]+ (B|KiB|MiB)" "ops in the module" "parameters"
                "outputs" "autotuning" "compiler passes" "fusion +[0-9.]+ ms +[0-9]+" "total +[0-9.]+ m?s")
  expect_match("${show}" "${section}")
endforeach()
string(SUBSTRING ${key0} 0 10 prefix)
lazyrt(0 show_json cache show ${prefix} --dir ${DIR} --json)
expect_json("${show_json}" STREQUAL ${key0} GET key)
expect_json("${show_json}" GREATER 0 LENGTH executable kernels)
expect_json("${show_json}" GREATER 0 LENGTH executable pass_timings)
expect_json("${show_json}" GREATER 0 GET executable arena_bytes)
expect_json("${show_json}" GREATER_EQUAL 0 GET executable instructions_fused_away)
file(TIMESTAMP ${entry0} mtime "%Y" UTC)
if(NOT mtime STREQUAL "2020")
  message(FATAL_ERROR "cache show refreshed the last-used time of ${key0} (mtime year ${mtime})")
endif()
lazyrt(0 stats cache stats --dir ${DIR} --json)
expect_json("${stats}" EQUAL ${hits_before} GET hits)

# --- verify, damage, fix ---------------------------------------------------------------------------
lazyrt(0 verify cache verify --dir ${DIR})
expect_match("${verify}" "2 checked, 2 good, 0 bad")
file(APPEND ${entry0} "garbage after the payload")
lazyrt(1 verify cache verify --dir ${DIR})
expect_match("${verify}" "bad ${key0}: [a-z_]+: ")
expect_match("${verify}" "2 checked, 1 good, 1 bad")
lazyrt(1 show cache show ${key0} --dir ${DIR})
expect_match("${show}" "state +[a-z_]+: ")
lazyrt(1 fix cache verify --dir ${DIR} --fix)
expect_match("${fix}" "removed ${key0}")
lazyrt(0 verify cache verify --dir ${DIR})
expect_entries(1)

# --- gc evicts least recently used first -----------------------------------------------------------
train()  # compiles and writes the removed entry again
expect_entries(2)
set(older ${key1})  # the later key, so a tie broken by key would evict the other one
set(newer ${key0})
execute_process(COMMAND touch -d "2021-01-01 00:00:00" ${DIR}/${older}.lzc)
execute_process(COMMAND touch -d "2022-01-01 00:00:00" ${DIR}/${newer}.lzc)
file(SIZE ${DIR}/${newer}.lzc newer_bytes)
lazyrt(0 gc cache gc --max-bytes 10G --dir ${DIR})
expect_match("${gc}" "evicted 0 entries")
lazyrt(0 gc cache gc --max-bytes ${newer_bytes} --dir ${DIR})
expect_match("${gc}" "${older}")
expect_match("${gc}" "evicted 1 entry")
cache_keys(keys)
if(NOT keys STREQUAL newer)
  message(FATAL_ERROR "gc kept ${keys}, expected the more recently used ${newer}")
endif()
lazyrt(0 gc cache gc --max-bytes=1 --dir ${DIR})
expect_entries(0)
lazyrt(0 stats cache stats --dir ${DIR} --json)
expect_json("${stats}" GREATER_EQUAL 2 GET evictions)

train()
expect_entries(2)
lazyrt(0 clear cache clear --dir ${DIR})
expect_match("${clear}" "removed 2 entries")
expect_entries(0)

# --- diag on hand-written run reports ---------------------------------------------------------------
file(WRITE ${WORK}/report.json [[
{"manifest": {}, "counters": {}, "timers": {}, "sync_events": [], "steps": [],
 "findings": [
  {"kind": "extra_sync", "location": "train.cpp:42", "count": 3,
   "message": "item() forced a host sync inside the step"},
  {"kind": "recompile", "location": "model.cpp:88", "count": 17, "message": "the step graph recompiled",
   "cause": "item", "what": "constant value", "before": "0.1", "now": "0.01"}
 ]}
]])
lazyrt(1 diag diag ${WORK}/report.json)
string(FIND "${diag}" "model.cpp:88" worse_at)
string(FIND "${diag}" "train.cpp:42" better_at)
if(worse_at EQUAL -1 OR better_at EQUAL -1 OR NOT worse_at LESS better_at)
  message(FATAL_ERROR "diag must print model.cpp:88 (17x) before train.cpp:42 (3x):\n${diag}")
endif()
expect_match("${diag}" "recompile \\(warning\\): 17 times at 1 place")
expect_match("${diag}" "17x +the step graph recompiled")
expect_match("${diag}" "before: 0.1; now: 0.01")
lazyrt(1 diag_json diag ${WORK}/report.json --json)
expect_json("${diag_json}" EQUAL 2 LENGTH findings)
# --json keeps the report's order, as its help says.
expect_json("${diag_json}" STREQUAL train.cpp:42 GET findings 0 location)
expect_json("${diag_json}" EQUAL 17 GET findings 1 count)
# Information alone (a single recompile) is shown, and is not a failure; a warning is, whatever its order.
file(WRITE ${WORK}/info.json [[
{"findings": [
  {"kind": "recompile", "severity": "info", "location": "train.cpp:50", "count": 1, "stack": ["train.cpp:50", "main.cpp:9"],
   "message": "the last batch is smaller", "what": "shape", "before": "f32[64,8]", "now": "f32[6,8]",
   "sync_site": "train.cpp:60"}
]}
]])
lazyrt(0 info diag ${WORK}/info.json)
expect_match("${info}" "recompile \\(information\\): 1 time at 1 place")
expect_match("${info}" "stack: train.cpp:50 <- main.cpp:9")
expect_match("${info}" "sync_site: train.cpp:60")
file(WRITE ${WORK}/mixed.json [[
{"findings": [
  {"kind": "recompile", "severity": "info", "location": "train.cpp:50", "count": 1, "message": "one"},
  {"kind": "host_wait", "severity": "warning", "location": "train.cpp:70", "count": 9, "message": "waits"}
]}
]])
lazyrt(1 mixed diag ${WORK}/mixed.json)
string(FIND "${mixed}" "train.cpp:70" warning_at)
string(FIND "${mixed}" "train.cpp:50" info_at)
if(NOT warning_at LESS info_at)
  message(FATAL_ERROR "diag must print the warning before the information:\n${mixed}")
endif()
file(WRITE ${WORK}/clean.json [[{"manifest": {}, "steps": [], "findings": []}]])
lazyrt(0 clean diag ${WORK}/clean.json)
expect_match("${clean}" "no findings")

# --- diag on the run report of examples/fragmented_step: its three traps, each at its line -----------
foreach(variant trapped fixed)
  set(flag "")
  if(variant STREQUAL fixed)
    set(flag --fixed)
  endif()
  execute_process(COMMAND ${FRAGMENTED} ${flag} --report ${WORK}/${variant}.json --cache-dir ${WORK}/fragmented-cache
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fragmented_step ${flag} failed (${rc}): ${err}")
  endif()
endforeach()
lazyrt(1 trapped diag ${WORK}/trapped.json)
expect_match("${trapped}" "host_wait")
expect_match("${trapped}" "recompile")
expect_match("${trapped}" "examples/fragmented_step.cpp:[0-9]+")
lazyrt(1 trapped_json diag ${WORK}/trapped.json --json)
string(JSON found LENGTH "${trapped_json}" findings)
if(found LESS 3)
  message(FATAL_ERROR "expected a finding per trap (3), got ${found}:\n${trapped_json}")
endif()
lazyrt(0 fixed diag ${WORK}/fixed.json)
expect_match("${fixed}" "no findings")

# --- usage and I/O errors exit 2 with the reason on stderr ------------------------------------------
file(WRITE ${WORK}/not_a_report.json [[{"steps": []}]])
foreach(bad_call
    "" "frobnicate" "cache" "cache frobnicate" "cache ls --bogus" "cache ls extra" "cache gc"
    "cache gc --max-bytes lots" "cache show" "cache ls --dir ${WORK}/missing" "cache ls --dir"
    "cache stats --dir ${DIR} --dir ${DIR}" "cache show nosuchkey --dir ${DIR}" "diag" "diag ${WORK}/missing.json"
    "diag ${WORK}/not_a_report.json")
  separate_arguments(words UNIX_COMMAND "${bad_call}")
  lazyrt(2 out ${words})
  if(out_err STREQUAL "")
    message(FATAL_ERROR "lazyrt ${bad_call}: exit 2 without a reason on stderr")
  endif()
endforeach()
lazyrt(2 out cache ls --dir ${WORK}/missing)
expect_match("${out_err}" "no cache directory at ${WORK}/missing")

foreach(help_call "--help" "cache --help" "cache ls --help" "cache show --help" "cache stats --help"
                  "cache verify --help" "cache gc --help" "cache clear --help" "diag --help" "version --help")
  separate_arguments(words UNIX_COMMAND "${help_call}")
  lazyrt(0 out ${words})
  expect_match("${out}" "usage: lazyrt")
endforeach()
lazyrt(0 version version)
expect_match("${version}" "^lazyrt [0-9]+\\.[0-9]+\\.[0-9]+\ncompiler lazyrt-sim-compiler/[0-9]+\n")
expect_match("${version}" "cache entry format [0-9]+")
message(STATUS "lazyrt CLI: all checks passed")
