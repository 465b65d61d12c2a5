cmake_minimum_required(VERSION 3.25)
# Runs one libFuzzer target as a test:
#   -DFUZZER=path -DSECONDS=n -DSEEDS=dir -DCORPUS=dir -DARTIFACTS=dir -DREGRESSIONS=dir
# First every saved regression input (each must now run clean), then fuzzing for SECONDS from the
# seeds, growing CORPUS (kept between runs). A crash, leak, timeout or out-of-memory leaves the input
# in ARTIFACTS and fails the test, printing the report and the input (hex); run_fuzzers.sh copies it to
# REGRESSIONS.
file(REMOVE_RECURSE ${ARTIFACTS})
file(MAKE_DIRECTORY ${CORPUS} ${ARTIFACTS})
get_filename_component(name ${FUZZER} NAME)
set(options -timeout=25 -rss_limit_mb=3072 -artifact_prefix=${ARTIFACTS}/)

file(GLOB regressions ${REGRESSIONS}/*)
list(FILTER regressions EXCLUDE REGEX "/README[^/]*$")
list(LENGTH regressions count)
if(count GREATER 0)
  execute_process(COMMAND ${FUZZER} ${options} ${regressions}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} fails on a saved regression input (${rc}):\n${err}")
  endif()
  message(STATUS "${name}: ${count} regression input(s) run clean")
endif()

if(NOT IS_DIRECTORY ${SEEDS})
  message(FATAL_ERROR "no seed corpus ${SEEDS}: run the fuzz_seed_corpus test first")
endif()
execute_process(COMMAND ${FUZZER} ${options} -max_total_time=${SECONDS} -print_final_stats=1
                        ${CORPUS} ${SEEDS}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(REGEX MATCH "stat::number_of_executed_units: *([0-9]+)" _ "${err}")
set(executions ${CMAKE_MATCH_1})
file(GLOB corpus_files ${CORPUS}/*)
list(LENGTH corpus_files corpus_size)
if(NOT rc EQUAL 0)
  file(GLOB found ${ARTIFACTS}/*)
  # The report first (a sanitizer's, libFuzzer's, a property's), then the input's bytes: the artifact stays in
  # the run's own checkout, and a CI log cut to its last 20000 characters once kept only progress lines.
  string(REGEX MATCH "(==[0-9]+==ERROR|[^\n]*runtime error:|[^\n]*property violated|==[0-9]+== ERROR)[^\n]*" report "${err}")
  if(report)
    string(FIND "${err}" "${report}" start)
  else()
    string(LENGTH "${err}" start)
    math(EXPR start "${start} - 8000")
    if(start LESS 0)
      set(start 0)
    endif()
  endif()
  string(SUBSTRING "${err}" ${start} 8000 err)
  set(bytes "")
  foreach(input ${found})
    file(SIZE ${input} size)
    if(size LESS_EQUAL 16384)
      file(READ ${input} hex HEX)
      string(APPEND bytes "\n${input} (${size} bytes, hex; xxd -r -p turns it back):\n${hex}")
    endif()
  endforeach()
  message(FATAL_ERROR "${name} failed (${rc}) after ${executions} executions; inputs: ${found}\n${err}${bytes}")
endif()
string(REGEX MATCH "[a-z_]+ reached:[^\n]*" reached "${err}")
message(STATUS "${name}: ${executions} executions in ${SECONDS} s, no crash; corpus ${corpus_size} inputs")
if(reached)
  message(STATUS "${reached}")
endif()
