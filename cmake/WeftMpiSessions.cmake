# weft_isolate_mpi_sessions(): gives each test of the calling directory that is labelled `mpi` an Open MPI
# session directory of its own (OMPI_MCA_orte_tmpdir_base, under the build tree). Open MPI 4.1 puts every job
# of a user under one top directory (/tmp/ompi.<host>.<uid>), which a job removes when it ends: two jobs that
# start and end at the same moment (ctest -j2) race on it, and one fails to start with "A call to mkdir was
# unable to create the desired directory ... File exists" (open-mpi/ompi#8510). MPICH ignores the variable.
# Call it at the end of the directory's CMakeLists.txt, once its tests exist.
function(weft_isolate_mpi_sessions)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    get_test_property(${t} LABELS labels)
    if(labels AND "mpi" IN_LIST labels)
      string(MAKE_C_IDENTIFIER "${t}" dir)
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                   "OMPI_MCA_orte_tmpdir_base=${CMAKE_BINARY_DIR}/mpi-sessions/${dir}")
    endif()
  endforeach()
endfunction()
