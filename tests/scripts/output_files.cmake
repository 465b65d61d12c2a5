cmake_minimum_required(VERSION 3.25)
# The files a run writes at the paths its settings name (LAZYRT_REPORT, LAZYRT_TRACE, LAZYRT_DEBUG_FILE)
# never hang it or kill it: a FIFO with no reader, a directory, and a file size limit (ulimit -f) that the
# report would exceed each give a warning, and the program finishes with its result.
#   -DEXAMPLE=path/to/trace_graph -DWORK=scratch dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/a_directory)
execute_process(COMMAND mkfifo ${WORK}/fifo_report ${WORK}/fifo_debug RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed: ${rc}")
endif()

function(run_expecting name env_settings expected_warnings)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LAZYRT_PERSISTENT_CACHE=0 ${env_settings} ${EXAMPLE}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: the program did not finish normally (${rc}):\n${err}")
  endif()
  if(NOT out MATCHES "softmax row 0")
    message(FATAL_ERROR "${name}: no result printed:\n${out}")
  endif()
  foreach(warning IN LISTS expected_warnings)
    string(FIND "${err}" "${warning}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: no warning '${warning}' in:\n${err}")
    endif()
  endforeach()
endfunction()

run_expecting("FIFOs" "LAZYRT_REPORT=${WORK}/fifo_report;LAZYRT_DEBUG=1;LAZYRT_DEBUG_FILE=${WORK}/fifo_debug"
              "could not write the run report;debug output goes to stderr")
run_expecting("a directory" "LAZYRT_TRACE=${WORK}/a_directory" "could not write the trace")

# ulimit -f 1: one block (512 or 1024 bytes); the report is larger, and writing it would raise SIGXFSZ.
execute_process(COMMAND ${CMAKE_COMMAND} -E env LAZYRT_PERSISTENT_CACHE=0 LAZYRT_REPORT=${WORK}/report.json
                        sh -c "ulimit -f 1 && exec \"$0\"" ${EXAMPLE}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT err MATCHES "file size limit")
  message(FATAL_ERROR "ulimit -f: the run did not finish with a warning (${rc}):\n${err}")
endif()
