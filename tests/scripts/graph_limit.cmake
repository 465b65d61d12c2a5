cmake_minimum_required(VERSION 3.25)
# LAZYRT_GRAPH_LIMIT bounds the pending graph: a long chain traced without any sync is cut into
# several graphs (syncs with cause graph_limit), with the same result.
#   -DEXAMPLE=path/to/trace_graph   (any program reading a result works; trace_graph reads its softmax)
execute_process(COMMAND ${CMAKE_COMMAND} -E env LAZYRT_GRAPH_LIMIT=3 LAZYRT_PERSISTENT_CACHE=0 LAZYRT_DEBUG=2 ${EXAMPLE}
                OUTPUT_VARIABLE limited ERROR_VARIABLE debug RESULT_VARIABLE rc)
execute_process(COMMAND ${CMAKE_COMMAND} -E env LAZYRT_PERSISTENT_CACHE=0 ${EXAMPLE} OUTPUT_VARIABLE whole RESULT_VARIABLE rc2)
if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "trace_graph failed: ${rc} ${rc2} ${debug}")
endif()
string(REGEX MATCH "softmax row 0: [^\n]*" a "${limited}")
string(REGEX MATCH "softmax row 0: [^\n]*" b "${whole}")
if(a STREQUAL "" OR NOT a STREQUAL b)
  message(FATAL_ERROR "results differ: '${a}' vs '${b}'")
endif()
string(FIND "${debug}" "graph_limit at examples/trace_graph.cpp" at)
if(at EQUAL -1)
  message(FATAL_ERROR "no graph_limit sync naming the user's line:\n${debug}")
endif()
