# Small helpers shared by every CMakeLists in the tree.

# mnemo_library(NAME SRCS ... DEPS ...): a static library with our warnings.
function(mnemo_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${MNEMO_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# mnemo_binary(NAME SRCS ... DEPS ...): an executable with our warnings.
function(mnemo_binary name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${MNEMO_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# mnemo_test(NAME SRCS ... DEPS ...): a GoogleTest binary registered with CTest.
function(mnemo_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${MNEMO_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "MNEMO_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  # Test mains are GoogleTest's, so they cannot call util::ConfigureCpuRuntime; link a static
  # initializer that does (see engine/util/cpu_backend.h).
  target_link_libraries(${name} PRIVATE mnemo_cpu_runtime_init)
endfunction()

# Torch's imported targets carry their own flags; mark its headers as system headers so
# -Wall -Wextra report only our code.
set(MNEMO_TORCH_LIBS ${TORCH_LIBRARIES})
