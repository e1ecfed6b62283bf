# Runs a multi-rank job that must fail, and fail fast (cmake -P).
#   MPIEXEC, NP, EXE, MODE   the job: MPIEXEC -n NP --oversubscribe EXE MODE
#   BOUND                    seconds within which mpirun must have exited
#   EXPECT                   regex the job's output must match (the cause)
# Passes when mpirun exits non-zero within BOUND seconds, its output names
# the cause, and no rank of EXE outlives it. A job still running at BOUND is
# killed and fails the test: that is the hang this guards against.
foreach(var MPIEXEC NP EXE MODE BOUND EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_job_failure.cmake: ${var} is not set")
  endif()
endforeach()

string(TIMESTAMP started "%s")
execute_process(
  COMMAND "${MPIEXEC}" -n ${NP} --oversubscribe "${EXE}" ${MODE}
  TIMEOUT ${BOUND}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
string(TIMESTAMP finished "%s")
math(EXPR elapsed "${finished} - ${started}")
message("${out}${err}")
message("-- mpirun: '${rc}' after ${elapsed} s")

if(rc MATCHES "timeout|Process terminated")
  message(FATAL_ERROR "the job did not end within ${BOUND} s: a rank hung")
endif()
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0: the fault went unnoticed")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the job failed, but its output does not match '${EXPECT}'")
endif()
# A rank orphaned by mpirun would be a hang in disguise.
find_program(PGREP pgrep)
if(PGREP)
  execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1)
  execute_process(COMMAND "${PGREP}" -f "${EXE} ${MODE}" OUTPUT_VARIABLE left OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT left STREQUAL "")
    message(FATAL_ERROR "ranks still running after mpirun exited (pids: ${left})")
  endif()
endif()
message("-- ok: the job ended with '${rc}' within ${elapsed} s, naming the cause")
