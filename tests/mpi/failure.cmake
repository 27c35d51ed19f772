# Failure of one rank must end the whole job, never leave it hanging (run by ctest, see tests/mpi/CMakeLists.txt).
# Open MPI's mpirun and MPICH's mpiexec (Hydra) both end the job as soon as a rank dies or calls MPI_Abort.
#   -DMODE=kill   rank 1 dies by SIGKILL inside a handler (mid-poll): the job must end with a failure status
#                 within 10 s of the death (measured from the time rank 1 wrote just before dying, so that a
#                 slow start on a loaded machine does not count).
#   -DMODE=abort  rank 1 calls abort_job: the job must end with a failure status and the rank-tagged line.
#   -DMODE=flowkill   as kill, but rank 1 dies inside a flow task, mid-graph, while rank 0 is in fence().
#   -DMODE=watchdog   a flow task blocks on rank 1 with a 2 s watchdog: the job must end with a failure status,
#                     every rank's view and the watchdog's line saying that every rank answered.
#                     watchdogsilent: rank 1's only worker blocks, so it cannot answer: the watchdog's line must
#                     name it, and rank 1 prints no view.
#   -DMODE=clusterkill   as kill, but rank 1 dies inside a task offloaded to it, while rank 0 waits for it.
#   -DMODE=clusterwatchdog   a task offloaded to rank 1 blocks, with a 2 s watchdog: the job must end with a
#                     failure status, every rank's view and the watchdog's line; clusterwatchdogsilent: as
#                     watchdogsilent.
#   -DMODE=clusterexit   as kill, but rank 1 calls exit(1) inside a task offloaded to it; clusterexitmain: its
#                     main thread calls exit(1) between two runs; clusterexit0: exit(0) inside the task. The job
#                     must end within 10 s with a failure status, with weft's line.
#                     clusterexitlast: rank 1 calls exit(0) after the run, its Runtime alive, while rank 0
#                     destroys its own: rank 0's line must name rank 1, which never takes part in that step.
#   -DMODE=flowexit0  as flowkill, but rank 1 calls exit(0) inside the flow task.
#   -DMODE=mpiexit0   rank 1 calls exit(0) inside a task of a plain Runtime while rank 0's task waits for its
#                     message (weft::mpi): rank 1 must leave with status 1 and its line.
#   -DMODE=flowleave  rank 1 calls exit(0) after the first fence, rank 0 starts a second epoch that needs it;
#                     clusterleave: rank 1 calls exit(0) between two runs of a cluster; clusterleave0: rank 0
#                     calls exit(0) after the first run while rank 1 calls run() again. The job must end within
#                     10 s with a failure status and the waiting rank's line naming the rank that left.
#                     flowreturn, clusterreturn, clusterreturn0: the same, the rank returning instead (its
#                     graph and Runtime are destroyed, collectively, as when main returns).
#   -DMODE=flowthrow  a flow task throws on rank 1: the job must end with a failure status and a line naming
#                     rank 1, the task, its key and the exception.
#   -DMODE=flowseed   the same for an invoke() queued for a fence that throws there (a keymap out of range).
#   -DMODE=flowextra  rank 0 makes a flow graph that rank 1, which destroys its only graph and leaves, never
#                     makes: the job must end with a line from rank 0 naming rank 1.
# CMD: the mpiexec command line, words separated by '|'; ENV: NAME=VALUE settings separated by '|'.
string(REPLACE "|" ";" cmd "${CMD}")
string(REPLACE "|" ";" env "${ENV}")
set(stamp "${WORK_DIR}/weft-killed-rank-${MODE}.time")
file(REMOVE "${stamp}")
if(MODE STREQUAL "kill")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}")
  list(APPEND cmd "--gtest_filter=Failure.KilledRankEndsJob")
elseif(MODE STREQUAL "abort")
  list(APPEND env "WEFT_TEST_ABORT=1")
  list(APPEND cmd "--gtest_filter=Failure.AbortJobEndsJob")
elseif(MODE STREQUAL "flowkill")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}")
  list(APPEND cmd "--gtest_filter=FlowFailure.KilledRankMidGraph")
elseif(MODE STREQUAL "clusterkill")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}")
  list(APPEND cmd "--gtest_filter=ClusterFailure.KilledRankInOffloadedTask")
elseif(MODE STREQUAL "flowexit0")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}" "WEFT_TEST_EXIT0=1")
  list(APPEND cmd "--gtest_filter=FlowFailure.KilledRankMidGraph")
elseif(MODE MATCHES "^clusterexit")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}")
  if(MODE STREQUAL "clusterexit0")
    list(APPEND env "WEFT_TEST_EXIT_WHERE=task" "WEFT_TEST_EXIT_STATUS=0")
  elseif(MODE STREQUAL "clusterexitlast")
    list(APPEND env "WEFT_TEST_EXIT_WHERE=last" "WEFT_TEST_EXIT_STATUS=0")
  elseif(MODE STREQUAL "clusterexit")
    list(APPEND env "WEFT_TEST_EXIT_WHERE=task")
  else()
    list(APPEND env "WEFT_TEST_EXIT_WHERE=main")
  endif()
  list(APPEND cmd "--gtest_filter=ClusterFailure.ExitOnOneRank")
elseif(MODE MATCHES "^flow(leave|return)$")
  list(APPEND env "WEFT_TEST_LEAVE_FILE=${stamp}")
  list(APPEND cmd "--gtest_filter=FlowFailure.RankEndsBeforeAFence")
elseif(MODE MATCHES "^cluster(leave|return)$")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}" "WEFT_TEST_EXIT_WHERE=main" "WEFT_TEST_EXIT_STATUS=0")
  list(APPEND cmd "--gtest_filter=ClusterFailure.ExitOnOneRank")
elseif(MODE MATCHES "^cluster(leave|return)0$")
  list(APPEND env "WEFT_TEST_LEAVE_FILE=${stamp}")
  list(APPEND cmd "--gtest_filter=ClusterFailure.RankZeroEndsFirst")
elseif(MODE STREQUAL "watchdog")
  list(APPEND env "WEFT_TEST_WATCHDOG=1")
  list(APPEND cmd "--gtest_filter=FlowFailure.WatchdogEndsAStuckJob")
elseif(MODE STREQUAL "watchdogsilent")
  list(APPEND env "WEFT_TEST_WATCHDOG=silent")
  list(APPEND cmd "--gtest_filter=FlowFailure.WatchdogEndsAStuckJob")
elseif(MODE STREQUAL "clusterwatchdog")
  list(APPEND env "WEFT_TEST_WATCHDOG=1")
  list(APPEND cmd "--gtest_filter=ClusterFailure.WatchdogEndsAStuckRun")
elseif(MODE STREQUAL "clusterwatchdogsilent")
  list(APPEND env "WEFT_TEST_WATCHDOG=silent")
  list(APPEND cmd "--gtest_filter=ClusterFailure.WatchdogEndsAStuckRun")
elseif(MODE STREQUAL "flowthrow")
  list(APPEND env "WEFT_TEST_THROW=1")
  list(APPEND cmd "--gtest_filter=FlowFailure.TaskThrowsOnRank1")
elseif(MODE STREQUAL "flowextra")
  list(APPEND env "WEFT_TEST_EXTRA=1")
  list(APPEND cmd "--gtest_filter=FlowFailure.OneRankMakesAnExtraGraph")
elseif(MODE STREQUAL "mpiexit0")
  list(APPEND env "WEFT_TEST_KILL_FILE=${stamp}")
  list(APPEND cmd "--gtest_filter=RequestsFailure.ExitZeroInTask")
elseif(MODE STREQUAL "flowseed")
  list(APPEND env "WEFT_TEST_SEED=1")
  list(APPEND cmd "--gtest_filter=FlowFailure.QueuedInvokeThrowsOnRank1")
else()
  set(unknown_mode 1)
endif()
if(MODE MATCHES "return")
  list(APPEND env "WEFT_TEST_RETURN=1")
endif()
if(unknown_mode)
  message(FATAL_ERROR "MODE=${MODE}: expected kill, abort, flowkill, flowexit0, flowleave, clusterkill, "
                      "clusterexit, clusterexitmain, clusterexit0, clusterexitlast, mpiexit0, clusterleave, clusterleave0, flowthrow, flowseed, flowextra, "
                      "watchdog, "
                      "watchdogsilent, clusterwatchdog, clusterwatchdogsilent, or flowreturn, clusterreturn, "
                      "clusterreturn0")
endif()
# The hang guard: far above the 10 s bound; the surviving rank gives up by itself after 60 s.
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 90)
string(TIMESTAMP now "%s" UTC)
string(REPLACE ";" " " shown "${cmd}")
set(log "--- stdout ---\n${out}\n--- stderr ---\n${err}")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job did not end within 90 s (${rc}): ${shown}\n${log}")
endif()
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job ended with status 0 after a rank's failure: ${shown}\n${log}")
endif()
if(err MATCHES "mpirun did not end the job")
  message(FATAL_ERROR "a surviving rank was not ended by mpirun: ${shown}\n${log}")
endif()
if(MODE MATCHES "kill|exit|leave|return")
  if(MODE MATCHES "^cluster(leave|return)0$")
    set(gone 0)
    set(waiter 1)
  else()
    set(gone 1)
    set(waiter 0)
  endif()
  if(NOT EXISTS "${stamp}")
    message(FATAL_ERROR "rank ${gone} never reached the point of its death (status ${rc}): ${shown}\n${log}")
  endif()
  file(READ "${stamp}" died)
  string(STRIP "${died}" died)
  math(EXPR elapsed "${now} - ${died}")
  if(elapsed GREATER 10)
    message(FATAL_ERROR "the job ended ${elapsed} s after rank ${gone} died (bound: 10 s): ${shown}\n${log}")
  endif()
  # A rank that returns from main destroys its graph or cluster Runtime first: the line names what it was doing.
  if(MODE MATCHES "^flow")
    set(teardown "is destroying a flow graph across ranks")
  else()
    set(teardown "is destroying its cluster Runtime")
  endif()
  if(MODE MATCHES "leave|return" AND
     NOT err MATCHES "weft: rank ${waiter}: rank ${gone} (has ended its program \\(returned from main or called exit\\(\\)\\)|${teardown} \\(a collective step\\)) after 1 run\\(s\\) across ranks \\(cluster runs and flow-graph fences\\), but this rank is in its run 2")
    message(FATAL_ERROR "no line from rank ${waiter} naming rank ${gone}, which left: ${shown}\n${log}")
  elseif(MODE STREQUAL "mpiexit0" AND NOT err MATCHES "weft: rank 1: exit\\(0\\) inside a task: other ranks may wait")
    message(FATAL_ERROR "no rank-tagged line from the rank that exited: ${shown}\n${log}")
  elseif(MODE MATCHES "^(cluster|flow)exit0$" AND NOT err MATCHES "weft: rank 1: exit\\(0\\) during a run that other ranks take part in")
    message(FATAL_ERROR "no rank-tagged line from the rank that exited: ${shown}\n${log}")
  elseif(MODE STREQUAL "clusterexitlast" AND NOT err MATCHES "weft: rank 0: rank 1 has ended its program \\(returned from main or called exit\\(\\)\\) having destroyed 0 cluster Runtime\\(s\\) and flow graph\\(s\\) across ranks, but this rank is destroying its number 1")
    message(FATAL_ERROR "no line from rank 0 naming rank 1, which left without destroying its Runtime: ${shown}\n${log}")
  elseif(MODE MATCHES "exit" AND NOT MODE MATCHES "exit0|exitlast" AND
         NOT err MATCHES "weft: rank 1: exiting with status 1 before MPI_Finalize")
    message(FATAL_ERROR "no rank-tagged line from the rank that exited: ${shown}\n${log}")
  endif()
  message(STATUS "job ended with status ${rc}, ${elapsed} s after rank ${gone} was killed or exited")
  file(REMOVE "${stamp}")
elseif(MODE MATCHES "watchdog")
  # Rank 0's view and the last line; rank 1's view, or (silent) the last line naming it. Both ranks see no
  # progress, so either may fire first and end the job (silent: rank 1's only worker is stuck, so rank 0).
  if(MODE MATCHES "cluster")
    set(view "cluster watchdog view: run 1")
  else()
    set(view "watchdog view: epoch 1")
  endif()
  if(MODE MATCHES "silent")
    set(firing "0")
  else()
    set(firing "[01]")
  endif()
  set(last "weft: rank ${firing}: [^\n]*watchdog: no progress on this rank for 2 s[^\n]*; the views of the")
  if(MODE MATCHES "silent")
    set(lines "weft: rank 0: ${view}"
              "${last} ranks that answered[^\n]*no answer within a second from rank\\(s\\) 1 \\(")
    if(err MATCHES "weft: rank 1: ${view}")
      message(FATAL_ERROR "rank 1 printed its view although its only worker was blocked: ${shown}\n${log}")
    endif()
  else()
    set(lines "weft: rank 0: ${view}" "weft: rank 1: ${view}"
              "${last} other ranks are printed above \\(every rank answered: ")
  endif()
  foreach(line ${lines})
    if(NOT err MATCHES "${line}")
      message(FATAL_ERROR "no '${line}' in the output: ${shown}\n${log}")
    endif()
  endforeach()
  message(STATUS "job ended with status ${rc} after the watchdog fired (${MODE})")
elseif(MODE STREQUAL "flowthrow")
  if(NOT err MATCHES "weft: rank 1: weft::flow: the task of 'boom', key 7, threw an exception: deliberate failure in a task")
    message(FATAL_ERROR "no rank-tagged line naming the task that threw: ${shown}\n${log}")
  endif()
  message(STATUS "job ended with status ${rc} after a task threw on rank 1")
elseif(MODE STREQUAL "flowextra")
  if(NOT err MATCHES "weft: rank 0: rank 1 (is destroying a flow graph across ranks|has ended its program)[^\n]*having made 1 [^\n]*making its number 2")
    message(FATAL_ERROR "no rank-tagged line naming the rank that never made the graph: ${shown}\n${log}")
  endif()
  message(STATUS "job ended with status ${rc} after rank 0 made a graph that rank 1 never made")
elseif(MODE STREQUAL "flowseed")
  if(NOT err MATCHES "weft: rank 1: weft::flow: invoke\\(\\) on 'seeded', queued for this fence, threw an exception: [^\n]*key 5")
    message(FATAL_ERROR "no rank-tagged line naming the invoke() that threw: ${shown}\n${log}")
  endif()
  message(STATUS "job ended with status ${rc} after a queued invoke() threw on rank 1")
else()
  if(NOT err MATCHES "weft: rank 1: deliberate abort from the test")
    message(FATAL_ERROR "no rank-tagged line from abort_job: ${shown}\n${log}")
  endif()
  message(STATUS "job ended with status ${rc} after abort_job on rank 1")
endif()
