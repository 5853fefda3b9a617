# Registers every doctest test case of a test binary with CTest, labelled by its doctest suite
# (unit, multiproc, slow, gpu, fault). Runs at build time (POST_BUILD) as `cmake -P` with:
#   TEST_EXECUTABLE, CTEST_FILE (the include file to write), WORKING_DIR, TIMEOUT, ENV.
# Unlike doctest's own discovery it survives any test name: ';' and ',' (CMake's and doctest's list
# separators) become the single-character wildcard '?' in the filter. Each registered test must
# report at least one test case run and passed, so a filter that matches nothing fails instead of
# passing vacuously. A test case that prints "[zerorun-skip] <reason>" (ZR_SKIP, tests/common/skip.h)
# and returns is reported by CTest as skipped, not passed. A test case outside these suites is
# registered as a failing test.
set(suites unit multiproc slow gpu fault)

function(list_cases out)
  execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --no-version ${ARGN}
                  OUTPUT_VARIABLE text RESULT_VARIABLE rc WORKING_DIRECTORY "${WORKING_DIR}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "listing tests of ${TEST_EXECUTABLE} failed (${rc}): ${text}")
  endif()
  string(REPLACE ";" "@SEMI@" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(cases "")
  foreach(line IN LISTS lines)
    if(line STREQUAL "" OR line MATCHES "^\\[doctest\\]" OR line MATCHES "^=+$")
      continue()
    endif()
    list(APPEND cases "${line}")
  endforeach()
  set(${out} "${cases}" PARENT_SCOPE)
endfunction()

get_filename_component(exe_name "${TEST_EXECUTABLE}" NAME)
set(script "")
foreach(suite IN LISTS suites)
  list_cases(cases --test-suite=${suite})
  foreach(name IN LISTS cases)
    string(REPLACE "@SEMI@" "?" filter "${name}")
    string(REPLACE "," "?" filter "${filter}")
    string(REPLACE "@SEMI@" "," ctest_name "${name}")
    string(APPEND script
      "add_test([==[${ctest_name}]==] [==[${TEST_EXECUTABLE}]==] [==[--test-case=${filter}]==] [==[--test-suite=${suite}]==])\n"
      "set_tests_properties([==[${ctest_name}]==] PROPERTIES LABELS ${suite} TIMEOUT ${TIMEOUT}"
      " WORKING_DIRECTORY [==[${WORKING_DIR}]==] ENVIRONMENT [==[${ENV}]==]"
      " PASS_REGULAR_EXPRESSION [==[test cases: +[1-9][0-9]* \\| +[1-9][0-9]* passed \\| +0 failed]==]"
      " SKIP_REGULAR_EXPRESSION [==[\\[zerorun-skip\\]]==])\n")
  endforeach()
endforeach()
string(REPLACE ";" "," excluded "${suites}")
list_cases(stray --test-suite-exclude=${excluded})
if(stray)
  string(REPLACE ";" "\n  " pretty "${stray}")
  string(APPEND script "add_test([==[${exe_name}.suites]==] ${CMAKE_COMMAND} -E echo [==[test cases outside the unit/multiproc/slow/gpu/fault suites:\n  ${pretty}]==])\n"
                       "set_tests_properties([==[${exe_name}.suites]==] PROPERTIES LABELS unit WILL_FAIL ON)\n")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
