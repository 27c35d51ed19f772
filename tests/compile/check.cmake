# Runs one refused compile-time check (tests/CMakeLists.txt, weft_compile_check): the compiler CMD must fail,
# print MESSAGE, and print no other error (a failed assertion of weft's must not be followed by errors from
# deeper in the headers or the standard library, which would bury it).
#   cmake -DCMD=<compiler;args...> -DMESSAGE=<text> -P check.cmake
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "compiled, but must be refused")
endif()
string(FIND "${all}" "${MESSAGE}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "weft's message '${MESSAGE}' is missing from the compiler's output:\n${all}")
endif()
string(REGEX MATCHALL "error:" errors "${all}")
list(LENGTH errors n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${n} errors, where weft's message should be the only one:\n${all}")
endif()
message(STATUS "refused with weft's message alone")
