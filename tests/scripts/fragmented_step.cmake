cmake_minimum_required(VERSION 3.25)
# Runs examples/fragmented_step with and without its traps and checks the run reports: one finding per
# trap, each naming the line marked "TRAP: ..." in the source; none with --fixed. Also checks the
# debug output and the Chrome trace.
#   -DEXAMPLE=path -DSOURCE=examples/fragmented_step.cpp -DWORK=dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(line_of marker out_var)
  file(STRINGS ${SOURCE} lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "TRAP: ${marker}")
      set(${out_var} ${n} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "no line marked 'TRAP: ${marker}' in ${SOURCE}")
endfunction()

function(run out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${ENV_SETTINGS} ${EXAMPLE} ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fragmented_step ${ARGN} failed (${rc}): ${err}")
  endif()
  message(STATUS "fragmented_step ${ARGN}:\n${out}")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Finds a finding of `kind` (and `what`, unless empty) at examples/fragmented_step.cpp:<line>.
function(expect_finding report kind what line)
  string(JSON n LENGTH "${report}" findings)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON k GET "${report}" findings ${i} kind)
    string(JSON loc GET "${report}" findings ${i} location)
    string(JSON count GET "${report}" findings ${i} count)
    set(w "")
    if(NOT what STREQUAL "")
      string(JSON w ERROR_VARIABLE no_what GET "${report}" findings ${i} what)
    endif()
    if(k STREQUAL kind AND w STREQUAL what AND loc MATCHES "examples/fragmented_step.cpp:${line}$" AND count GREATER 0)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "no ${kind} ${what} finding at examples/fragmented_step.cpp:${line} in ${report}")
endfunction()

line_of("item" item_line)
line_of("static scalar" scalar_line)
line_of("batch shape" batch_line)

set(ENV_SETTINGS LAZYRT_DEBUG=3 LAZYRT_DEBUG_FILE=${WORK}/debug.txt LAZYRT_TRACE=${WORK}/trace.json)
run(trapped --report ${WORK}/trapped.json --cache-dir ${WORK}/cache)
file(READ ${WORK}/trapped.json trapped)
# The loss is read after the step's update: nothing is cut, the host waits for the device.
expect_finding("${trapped}" host_wait "" ${item_line})
expect_finding("${trapped}" recompile "constant value" ${scalar_line})
expect_finding("${trapped}" recompile "shape" ${batch_line})
string(JSON manifest_version GET "${trapped}" manifest compiler_version)
string(JSON events LENGTH "${trapped}" sync_events)
if(events LESS 12)
  message(FATAL_ERROR "expected a sync event per step, got ${events}")
endif()

# LAZYRT_DEBUG=2: a line per sync, a warning for the late compile, the analysis at exit; 3: the device's
# time by kind of kernel, then by kernel.
file(READ ${WORK}/debug.txt debug)
foreach(expected "sync #0 step 0.0 item at examples/fragmented_step.cpp:${item_line}" "warning: step"
                 "analysis at exit" "device time by kernel: " "  GRAPH ")
  string(FIND "${debug}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "debug output lacks '${expected}':\n${debug}")
  endif()
endforeach()

if(NOT debug MATCHES "\n  by kind: [A-Z_]+ [0-9.]+ ms \\([0-9]+%\\)")
  message(FATAL_ERROR "debug output lacks the device time by kind of kernel:\n${debug}")
endif()

# The Chrome trace: host phases and device executions.
file(READ ${WORK}/trace.json trace)
string(JSON spans LENGTH "${trace}" traceEvents)
if(spans LESS 24)
  message(FATAL_ERROR "trace has only ${spans} events")
endif()
string(FIND "${trace}" "\"execute " has_execute)
if(has_execute EQUAL -1)
  message(FATAL_ERROR "trace has no execute spans")
endif()

set(ENV_SETTINGS "")
run(fixed --fixed --report ${WORK}/fixed.json --cache-dir ${WORK}/cache-fixed)
file(READ ${WORK}/fixed.json fixed)
string(JSON n LENGTH "${fixed}" findings)
if(NOT n EQUAL 0)
  message(FATAL_ERROR "the fixed loop has ${n} finding(s): ${fixed}")
endif()

# LAZYRT_KERNEL_PROFILE=N: the kernel table alone, its N longest kernels, none of the debug levels' lines.
set(ENV_SETTINGS LAZYRT_KERNEL_PROFILE=2 LAZYRT_DEBUG_FILE=${WORK}/profile.txt)
file(REMOVE ${WORK}/profile.txt)
run(profiled --fixed --cache-dir ${WORK}/cache-fixed)
file(READ ${WORK}/profile.txt profile)
if(NOT profile MATCHES "device time by kernel: [0-9.]+ ms in [0-9]+ kernels of the loaded executables, the 2 longest\n")
  message(FATAL_ERROR "LAZYRT_KERNEL_PROFILE=2 printed no table of the 2 longest kernels:\n${profile}")
endif()
string(REGEX MATCHALL "\n  [0-9a-f]+ +[0-9]+  [A-Z_]+ " kernel_rows "${profile}")
list(LENGTH kernel_rows shown)
if(NOT shown EQUAL 2)
  message(FATAL_ERROR "LAZYRT_KERNEL_PROFILE=2 printed ${shown} kernel rows:\n${profile}")
endif()
foreach(unexpected "analysis at exit" "sync #" "memory on ")
  string(FIND "${profile}" "${unexpected}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "LAZYRT_KERNEL_PROFILE printed '${unexpected}', a debug level's line:\n${profile}")
  endif()
endforeach()

# LAZYRT_KERNEL_PROFILE_RERUNS=1: the same table with each kernel's time run again at once (RERUN us), and what
# running at once spared the kernels.
set(ENV_SETTINGS LAZYRT_KERNEL_PROFILE=2 LAZYRT_KERNEL_PROFILE_RERUNS=1 LAZYRT_DEBUG_FILE=${WORK}/reruns.txt)
file(REMOVE ${WORK}/reruns.txt)
run(rerun --fixed --cache-dir ${WORK}/cache-fixed)
file(READ ${WORK}/reruns.txt reruns)
if(NOT reruns MATCHES "reruns \\(LAZYRT_KERNEL_PROFILE_RERUNS\\): the kernels run again took [0-9.]+ ms after their first runs and [0-9.]+ ms run again at once, [-+][0-9.]+ ms \\([-+][0-9]+%\\)"
   OR NOT reruns MATCHES "MEAN us  RERUN us  SHARE")
  message(FATAL_ERROR "LAZYRT_KERNEL_PROFILE_RERUNS=1 printed no reruns:\n${reruns}")
endif()
set(ENV_SETTINGS "")
