# Runs one Task Bench command that must fail (CMD: the words separated by '|'; ENV: NAME=VALUE settings separated
# by '|') and checks how: the exit status (STATUS: a number, or "nonzero") and a line of its stderr matching the
# regular expression EXPECT. A job that does not end within 90 s fails the test (a failing rank must end the
# job, never leave it waiting).
string(REPLACE "|" ";" cmd "${CMD}")
string(REPLACE "|" ";" env "${ENV}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 90)
string(REPLACE ";" " " shown "${cmd}")
set(log "--- stdout ---\n${out}\n--- stderr ---\n${err}")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job did not end within 90 s (${rc}): ${shown}\n${log}")
endif()
if(STATUS STREQUAL "nonzero")
  if(rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "expected a non-zero exit status, got '${rc}': ${shown}\n${log}")
  endif()
elseif(NOT rc STREQUAL "${STATUS}")
  message(FATAL_ERROR "expected exit status ${STATUS}, got '${rc}': ${shown}\n${log}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "no line matching '${EXPECT}' on stderr: ${shown}\n${log}")
endif()
message(STATUS "exit status ${rc}, as expected, with the expected message")
