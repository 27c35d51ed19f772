# Runs one program with a bad input (CMD: the words separated by '|'; ENV: NAME=VALUE settings separated by '|',
# a VALUE may be empty) and fails unless it exits with status 2 and every line of its stderr matches EXPECT (a
# regular expression naming the input): no abort, no uncaught exception, no exit status 0 with data lost.
string(REPLACE "|" ";" cmd "${CMD}")
string(REPLACE "|" ";" env "${ENV}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
string(REPLACE ";" " " shown "${env} ${cmd}")
if(NOT rc STREQUAL "2")
  message(FATAL_ERROR "exit status ${rc}, expected 2: ${shown}\n--- stderr ---\n${err}")
endif()
string(STRIP "${err}" lines)
if(lines STREQUAL "")
  message(FATAL_ERROR "nothing on stderr: ${shown}")
endif()
string(REPLACE "\n" ";" lines "${lines}")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "${EXPECT}")
    message(FATAL_ERROR "stderr line does not match '${EXPECT}': ${shown}\n--- stderr ---\n${err}")
  endif()
endforeach()
