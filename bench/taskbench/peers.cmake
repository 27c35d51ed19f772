# Task Bench peer implementations, each linking the same GCC-built taskbench_core, and their validation tests
# (every pattern, 1 and 2 threads or ranks; label `taskbench`, plus `mpi` for MPI). A peer whose dependency is
# missing is skipped with a message; the rest of the build goes on.
#   taskbench-omp-for-gcc, taskbench-omp-task-gcc      omp_for.cpp, omp_task.cpp: GCC -fopenmp (libgomp)
#   taskbench-omp-for-clang, taskbench-omp-task-clang  the same sources, clang++-16 -fopenmp=libomp (LLVM OpenMP)
#   taskbench-tbb                                      tbb_flow.cpp: oneTBB flow graph
#   taskbench-starpu                                   starpu.cpp: StarPU tasks on data handles
#   taskbench-mpi                                      mpi.cpp: MPI, run under mpirun, one rank per core
#   taskbench-mpi-nonblock                             mpi_nonblock.cpp: Task Bench's own MPI pattern, the reference
# The OpenMP, TBB and StarPU tests are not labelled `concurrency`: ThreadSanitizer does not see the
# synchronisation inside libgomp, libomp, TBB and StarPU and would report their internals. Under AddressSanitizer
# they all run, except the clang-built ones (see cmake/WeftLibomp.cmake); MPI runs without the leak check, and
# oneTBB's headers need UBSan's vptr check off (see below).

set(_peer_depends ${CMAKE_CURRENT_SOURCE_DIR}/peer_common.hpp ${CMAKE_CURRENT_SOURCE_DIR}/core/core.hpp)

function(_taskbench_peer name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE taskbench_core ${ARGN})
  target_compile_options(${name} PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)
endfunction()

# --- OpenMP, GCC (libgomp) --------------------------------------------------------------------------------
find_package(OpenMP QUIET COMPONENTS CXX)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND OpenMP_CXX_FOUND)
  foreach(kind for task)
    _taskbench_peer(taskbench-omp-${kind}-gcc omp_${kind}.cpp OpenMP::OpenMP_CXX)
    taskbench_add_validation_tests(omp-${kind}-gcc taskbench-omp-${kind}-gcc)
  endforeach()
  message(STATUS "taskbench: OpenMP peers (GCC libgomp, OpenMP ${OpenMP_CXX_VERSION}): taskbench-omp-for-gcc, taskbench-omp-task-gcc")
elseif(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  message(STATUS "taskbench: GCC OpenMP peers skipped: the project compiler is ${CMAKE_CXX_COMPILER_ID}, not GCC")
else()
  message(STATUS "taskbench: GCC OpenMP peers skipped: OpenMP not found for ${CMAKE_CXX_COMPILER}")
endif()

# --- OpenMP, clang (libomp) -------------------------------------------------------------------------------
include(${PROJECT_SOURCE_DIR}/cmake/WeftLibomp.cmake)
weft_find_libomp(_libomp_skip)
if(_libomp_skip STREQUAL "")
  foreach(kind for task)
    set(_exe ${CMAKE_CURRENT_BINARY_DIR}/taskbench-omp-${kind}-clang)
    weft_add_libomp_executable(taskbench_omp_${kind}_clang OUTPUT ${_exe} SOURCES omp_${kind}.cpp
                               DEPENDS ${_peer_depends} LIBRARIES taskbench_core LINK ${TASKBENCH_BLAS_LINK})
    # An imported executable names the file, so that the tests can use $<TARGET_FILE:...> as for the others.
    # (Its name must differ from the file's: CMake drops a custom command whose output is named like a target.)
    add_executable(taskbench_omp_${kind}_clang_exe IMPORTED)
    set_target_properties(taskbench_omp_${kind}_clang_exe PROPERTIES IMPORTED_LOCATION ${_exe})
    taskbench_add_validation_tests(omp-${kind}-clang taskbench_omp_${kind}_clang_exe)
  endforeach()
  message(STATUS "taskbench: OpenMP peers (${WEFT_BENCH_CLANGXX}, ${WEFT_BENCH_LIBOMP}): taskbench-omp-for-clang, taskbench-omp-task-clang")
else()
  message(STATUS "taskbench: LLVM OpenMP peers skipped: ${_libomp_skip}")
endif()

# --- oneTBB flow graph ------------------------------------------------------------------------------------
find_package(TBB CONFIG QUIET COMPONENTS tbb)
if(TBB_FOUND AND TARGET TBB::tbb)
  _taskbench_peer(taskbench-tbb tbb_flow.cpp TBB::tbb)
  if(TASKBENCH_SANITIZED)
    # oneTBB's graph_task::destruct_and_deallocate (flow_graph_impl.h) casts a task to its derived type after
    # destroying it; UBSan's vptr check reports that header code, not ours.
    target_compile_options(taskbench-tbb PRIVATE -fno-sanitize=vptr)
  endif()
  taskbench_add_validation_tests(tbb taskbench-tbb)
  message(STATUS "taskbench: oneTBB peer (TBB ${TBB_VERSION}): taskbench-tbb")
else()
  message(STATUS "taskbench: oneTBB peer skipped: find_package(TBB) found nothing (Debian: libtbb-dev)")
endif()

# --- StarPU -----------------------------------------------------------------------------------------------
# Debian 12 ships StarPU 1.3 (libstarpu-dev), found through pkg-config like StarPU's own examples.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(STARPU QUIET IMPORTED_TARGET starpu-1.3)
endif()
if(STARPU_FOUND)
  _taskbench_peer(taskbench-starpu starpu.cpp PkgConfig::STARPU)
  set(_starpu_env "")
  if(TASKBENCH_SANITIZED)
    # StarPU discovers the machine with hwloc, which loads its PCI plugin (hwloc_pci.so, over libpciaccess) and
    # unloads it at shut-down with its device list still allocated: LeakSanitizer reports ~1 KiB leaked from an
    # unknown module. A CPU-only run needs no PCI topology, so these runs leave that plugin out
    # (HWLOC_COMPONENTS=-pci) and keep every check, leaks included, for the rest.
    set(_starpu_env HWLOC_COMPONENTS=-pci)
  endif()
  taskbench_add_validation_tests(starpu taskbench-starpu ENVIRONMENT ${_starpu_env})
  if(WEFT_BUILD_TESTS)
    # Tasks with more buffers than a StarPU task holds inline (STARPU_NMAXBUFS, 8 in Debian's build: the tests
    # above stay within it) take StarPU's dynamically allocated handle and mode arrays: 13 and 12 inputs here,
    # with reused output slots.
    set(_cmd $<TARGET_FILE:taskbench-starpu> -workers 2
        -steps 12 -width 13 -type all_to_all -kernel compute_bound -iter 8 -output 48 -field 2
        -and -steps 10 -width 16 -type nearest -radix 12 -kernel load_imbalance -iter 16 -imbalance 1 -field 3)
    list(JOIN _cmd "|" _cmd)
    add_test(NAME taskbench.starpu.many_buffers.w2
             COMMAND ${CMAKE_COMMAND} "-DCMD=${_cmd}" -P ${TASKBENCH_VALIDATION_DRIVER})
    set_tests_properties(taskbench.starpu.many_buffers.w2 PROPERTIES LABELS taskbench TIMEOUT 120)
    if(_starpu_env)
      set_tests_properties(taskbench.starpu.many_buffers.w2
                           PROPERTIES ENVIRONMENT "${_starpu_env}")
    endif()
  endif()
  message(STATUS "taskbench: StarPU peer (StarPU ${STARPU_VERSION}): taskbench-starpu")
else()
  message(STATUS "taskbench: StarPU peer skipped: pkg-config found no starpu-1.3 (Debian: libstarpu-dev)")
endif()

# --- MPI --------------------------------------------------------------------------------------------------
# Run as mpirun -np <ranks> taskbench-mpi ...: mpirun's default (kept) aborts the whole job when a rank exits
# with an error, so a failed rank never leaves the others waiting. The tests use Open MPI's
# --oversubscribe (more ranks than cores is allowed; on a loaded machine too), --bind-to none (two tests may
# run at once) and --allow-run-as-root (CI containers run as root); MPICH's mpiexec (Hydra) needs none of them.
set(MPI_DETERMINE_LIBRARY_VERSION TRUE)  # MPI_CXX_LIBRARY_VERSION_STRING: which mpirun flags apply
find_package(MPI QUIET COMPONENTS CXX)
if(NOT MPI_CXX_FOUND)
  message(STATUS "taskbench: MPI peer skipped: find_package(MPI) found no C++ MPI (Debian: libopenmpi-dev openmpi-bin)")
else()
  _taskbench_peer(taskbench-mpi mpi.cpp MPI::MPI_CXX)
  # The pattern of Task Bench's own MPI implementation (mpi/nonblock.cc), the reference taskbench-mpi is
  # measured against (mpi_nonblock.cpp).
  _taskbench_peer(taskbench-mpi-nonblock mpi_nonblock.cpp MPI::MPI_CXX)
  set(_launcher ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} @WORKERS@)
  if(MPI_CXX_LIBRARY_VERSION_STRING MATCHES "Open MPI")
    list(APPEND _launcher --oversubscribe --bind-to none --allow-run-as-root)
  endif()
  list(APPEND _launcher ${MPIEXEC_PREFLAGS})
  set(_mpi_env "")
  if(TASKBENCH_SANITIZED)
    # Open MPI and its plugins never free some start-up allocations, which LeakSanitizer reports at exit:
    # the MPI runs keep every other check (addresses, undefined behaviour) but not the leak check.
    set(_mpi_env "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
  endif()
  # taskbench-mpi-nonblock keeps the original's single output buffer per point: it refuses -field.
  taskbench_add_validation_tests(mpi taskbench-mpi LAUNCHER ${_launcher} ENVIRONMENT ${_mpi_env} LABELS mpi)
  taskbench_add_validation_tests(mpi-nonblock taskbench-mpi-nonblock LAUNCHER ${_launcher} ENVIRONMENT ${_mpi_env}
                                 NO_FIELD LABELS mpi)
  string(REGEX MATCH "^[^,\n]*" _mpi_version "${MPI_CXX_LIBRARY_VERSION_STRING}")
  string(REGEX REPLACE "[ \t]+" " " _mpi_version "${_mpi_version}")  # MPICH: "MPICH Version:<tab>4.0.2"
  message(STATUS "taskbench: MPI peers (${_mpi_version}, ${MPIEXEC_EXECUTABLE}): taskbench-mpi, taskbench-mpi-nonblock")
endif()
