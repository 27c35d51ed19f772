# OpenBLAS (CBLAS) and LAPACKE for the dense applications across ranks (bench/apps/cluster) and OpenBLAS alone
# for Task Bench's BLAS kernels (bench/taskbench), through pkg-config: Debian's libopenblas-dev and
# liblapacke-dev ship openblas.pc and lapacke.pc.
#
#   weft_find_openblas(<skip_var>)
#     Defines the global imported target PkgConfig::WEFT_OPENBLAS and sets <skip_var> to "", or to the reason it
#     is missing (with the package to install).
#   weft_find_dense_blas(<skip_var>)
#     Defines the global imported targets PkgConfig::WEFT_OPENBLAS and PkgConfig::WEFT_LAPACKE and sets
#     <skip_var> to "", or to the reason they are missing (with the packages to install). Any number of calls:
#     tests/mpi asks before bench/apps/cluster defines the program.
include_guard(GLOBAL)

function(weft_find_openblas skip_var)
  if(TARGET PkgConfig::WEFT_OPENBLAS)
    set(${skip_var} "" PARENT_SCOPE)
    return()
  endif()
  find_package(PkgConfig QUIET)
  if(NOT PkgConfig_FOUND)
    set(${skip_var} "needs pkg-config to find OpenBLAS" PARENT_SCOPE)
    return()
  endif()
  # OpenBLAS itself, not the generic blas.pc: the programs call openblas_set_num_threads.
  pkg_check_modules(WEFT_OPENBLAS QUIET IMPORTED_TARGET GLOBAL openblas)
  if(NOT WEFT_OPENBLAS_FOUND)
    set(${skip_var} "needs OpenBLAS (Debian: libopenblas-dev; scripts/install-deps.sh)" PARENT_SCOPE)
    return()
  endif()
  set(${skip_var} "" PARENT_SCOPE)
endfunction()

function(weft_find_dense_blas skip_var)
  if(TARGET PkgConfig::WEFT_OPENBLAS AND TARGET PkgConfig::WEFT_LAPACKE)
    set(${skip_var} "" PARENT_SCOPE)
    return()
  endif()
  weft_find_openblas(_openblas_skip)
  if(NOT PkgConfig_FOUND)
    set(${skip_var} "needs pkg-config to find OpenBLAS and LAPACKE" PARENT_SCOPE)
    return()
  endif()
  pkg_check_modules(WEFT_LAPACKE QUIET IMPORTED_TARGET GLOBAL lapacke)
  if(NOT _openblas_skip STREQUAL "" OR NOT WEFT_LAPACKE_FOUND)
    set(${skip_var} "needs OpenBLAS and LAPACKE (Debian: libopenblas-dev liblapacke-dev; scripts/install-deps.sh)"
        PARENT_SCOPE)
    return()
  endif()
  set(${skip_var} "" PARENT_SCOPE)
endfunction()
