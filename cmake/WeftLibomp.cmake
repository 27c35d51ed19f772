# LLVM OpenMP (clang++-16 + libomp) executables inside the GCC-built project.
#
# One CMake project has one C++ compiler, and libgomp and libomp cannot share a process, so the benchmarks that
# compare GCC's OpenMP runtime with LLVM's build their libomp executables with a custom command that runs
# clang++ directly. clang++ on Debian uses the system libstdc++, so such an executable can link static libraries
# built by GCC (same C++ ABI).
#
#   weft_find_libomp(<skip_var>)
#     Finds clang++-16 (cache WEFT_BENCH_CLANGXX) and libomp in /usr/lib/llvm-16/lib (cache WEFT_BENCH_LIBOMP) and
#     checks, once per configure, that clang++ can build and run an OpenMP program against them. Sets <skip_var>
#     to "" when usable, else to the reason (with the Debian package to install). A project built with a
#     sanitizer gets a reason too: its static libraries need GCC's sanitizer runtime, which clang cannot link.
#
#   weft_add_libomp_executable(<target> OUTPUT <file> SOURCES <src...> [DEPENDS <file...>]
#                              [LIBRARIES <static library target...>] [LINK <file...>]
#                              [DEFINES <NAME=VALUE...>])
#     Builds <file> (an absolute path) from SOURCES with clang++ -fopenmp=libomp -O3 (whatever the build type:
#     these are benchmark executables), linking the given GCC-built static libraries (their interface include
#     directories and compile definitions are used too), the LINK files (the shared libraries those static
#     libraries need: their link dependencies are not followed) and libomp with an rpath. <target> is a custom target
#     in ALL that builds it. Call weft_find_libomp first. No target may be named like <file>'s file name (CMake
#     then drops the custom command); to refer to the file as a target, import it under another name.
include_guard(GLOBAL)

function(weft_find_libomp skip_var)
  get_property(_done GLOBAL PROPERTY WEFT_LIBOMP_PROBED SET)
  if(_done)
    get_property(_skip GLOBAL PROPERTY WEFT_LIBOMP_PROBED)
    set(${skip_var} "${_skip}" PARENT_SCOPE)
    return()
  endif()

  find_program(WEFT_BENCH_CLANGXX NAMES clang++-16 DOC "clang++ that builds the LLVM OpenMP (libomp) benchmark peers")
  find_library(WEFT_BENCH_LIBOMP NAMES omp PATHS /usr/lib/llvm-16/lib NO_DEFAULT_PATH
               DOC "LLVM OpenMP runtime (libomp.so) of the LLVM OpenMP benchmark peers")
  set(_skip "")
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    set(_skip "the project is built with a sanitizer (-fsanitize= in CMAKE_CXX_FLAGS); clang cannot link GCC's sanitizer runtime")
  elseif(NOT WEFT_BENCH_CLANGXX)
    set(_skip "clang++-16 not found (Debian: clang-16)")
  elseif(NOT WEFT_BENCH_LIBOMP)
    set(_skip "libomp.so not found in /usr/lib/llvm-16/lib (Debian: libomp-16-dev)")
  else()
    # Probe: can clang++ compile, link and run an OpenMP program against that libomp?
    get_filename_component(_dir "${WEFT_BENCH_LIBOMP}" DIRECTORY)
    set(_probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/weft_libomp_probe)
    file(MAKE_DIRECTORY ${_probe_dir})
    file(WRITE ${_probe_dir}/probe.cpp
         "#include <omp.h>\nint main() { int n = 0;\n#pragma omp parallel num_threads(2) reduction(+ : n)\n  n += 1;\n  return n == 2 ? 0 : 1; }\n")
    execute_process(
      COMMAND ${WEFT_BENCH_CLANGXX} -std=c++20 -O2 -fopenmp=libomp -L${_dir} -Wl,-rpath,${_dir}
              ${_probe_dir}/probe.cpp -o ${_probe_dir}/probe
      RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(NOT _rc EQUAL 0)
      set(_skip "${WEFT_BENCH_CLANGXX} -fopenmp=libomp cannot build an OpenMP program")
    else()
      execute_process(COMMAND ${_probe_dir}/probe RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
      if(NOT _rc EQUAL 0)
        set(_skip "an OpenMP program built by ${WEFT_BENCH_CLANGXX} does not run")
      endif()
    endif()
  endif()
  set_property(GLOBAL PROPERTY WEFT_LIBOMP_PROBED "${_skip}")
  set(${skip_var} "${_skip}" PARENT_SCOPE)
endfunction()

function(weft_add_libomp_executable target)
  cmake_parse_arguments(ARG "" "OUTPUT" "SOURCES;DEPENDS;LIBRARIES;LINK;DEFINES" ${ARGN})
  if(NOT ARG_OUTPUT OR NOT ARG_SOURCES)
    message(FATAL_ERROR "weft_add_libomp_executable(${target}): OUTPUT and SOURCES are required")
  endif()
  get_filename_component(_dir "${WEFT_BENCH_LIBOMP}" DIRECTORY)
  set(_srcs "")
  foreach(_s IN LISTS ARG_SOURCES)
    get_filename_component(_abs "${_s}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND _srcs ${_abs})
  endforeach()
  set(_deps "")
  foreach(_s IN LISTS ARG_DEPENDS)
    get_filename_component(_abs "${_s}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND _deps ${_abs})
  endforeach()
  set(_flags "")
  foreach(_d IN LISTS ARG_DEFINES)
    list(APPEND _flags "-D${_d}")
  endforeach()
  set(_libs "")
  foreach(_lib IN LISTS ARG_LIBRARIES)
    # Transitive usage requirements of the library (evaluated at generation time); empty ones add no flag.
    set(_inc "$<TARGET_PROPERTY:${_lib},INTERFACE_INCLUDE_DIRECTORIES>")
    set(_def "$<TARGET_PROPERTY:${_lib},INTERFACE_COMPILE_DEFINITIONS>")
    list(APPEND _flags "$<$<BOOL:${_inc}>:-I$<JOIN:${_inc},$<SEMICOLON>-I>>" "$<$<BOOL:${_def}>:-D$<JOIN:${_def},$<SEMICOLON>-D>>")
    list(APPEND _libs "$<TARGET_FILE:${_lib}>")
  endforeach()
  add_custom_command(
    OUTPUT ${ARG_OUTPUT}
    COMMAND ${WEFT_BENCH_CLANGXX} -std=c++20 -O3 -DNDEBUG -Wall -Wextra -pthread -fopenmp=libomp
            ${_flags} ${_srcs} ${_libs} ${ARG_LINK} -L${_dir} -Wl,-rpath,${_dir} -o ${ARG_OUTPUT}
    DEPENDS ${_srcs} ${_deps} ${ARG_LIBRARIES}
    COMMENT "Building the LLVM OpenMP executable ${ARG_OUTPUT} (clang++ -fopenmp=libomp)"
    COMMAND_EXPAND_LISTS VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${ARG_OUTPUT})
endfunction()
