# Runs one Task Bench validation command (CMD: the words separated by '|') and fails unless it exits 0 and
# prints the summary (a run whose validation fails exits 1 with a message naming the task and the input).
string(REPLACE "|" ";" cmd "${CMD}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE ";" " " shown "${cmd}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exit status ${rc}: ${shown}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
endif()
foreach(line "Total Tasks [0-9]+\n" "Total Dependencies [0-9]+\n" "Elapsed Time [0-9.e+-]+ seconds\n")
  if(NOT out MATCHES "${line}")
    message(FATAL_ERROR "no line matching '${line}' in the output of ${shown}\n--- stdout ---\n${out}")
  endif()
endforeach()
