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

# One precompiled <torch/types.h> for the targets that link LibTorch and OpenMP (all but a
# few), used by the units that include LibTorch. Parsing LibTorch's headers costs ~13 s per
# translation unit (measured on 2 cores; 138 of the tree's ~250 units include them); with the
# shared header each unit loads it in ~2 s instead. The header is built with -fopenmp, and GCC
# uses it only in units compiled the same way, so targets without OpenMP parse LibTorch as
# before. Called once, at the end of the top-level
# CMakeLists.txt, when every target exists. -DMNEMO_TORCH_PCH=OFF turns it off.
option(MNEMO_TORCH_PCH "Share one precompiled LibTorch header between targets" ON)

# Memoised walks (links, includes): inside a function, return the answer cached under KEY in
# OUT if there is one; else mark KEY FALSE (which breaks cycles) and carry on.
macro(_mnemo_return_if_known key out)
  get_property(_mnemo_known GLOBAL PROPERTY ${key} SET)
  if(_mnemo_known)
    get_property(_mnemo_value GLOBAL PROPERTY ${key})
    set(${out} ${_mnemo_value} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY ${key} FALSE)
endmacro()

# Caches VALUE under KEY and returns it in OUT (the end of a memoised walk).
macro(_mnemo_remember key out value)
  set_property(GLOBAL PROPERTY ${key} ${value})
  set(${out} ${value} PARENT_SCOPE)
endmacro()

# True in OUT when TARGET links LIB (a target name), directly or through its dependencies.
function(_mnemo_links target lib out)
  set(key _MNEMO_LINKS_${lib}_${target})
  _mnemo_return_if_known(${key} ${out})
  set(result FALSE)
  if(target STREQUAL lib)
    set(result TRUE)
  elseif(TARGET ${target})
    get_target_property(imported ${target} IMPORTED)
    set(deps "")
    if(NOT imported)
      get_target_property(direct ${target} LINK_LIBRARIES)
      if(direct)
        list(APPEND deps ${direct})
      endif()
    endif()
    get_target_property(iface ${target} INTERFACE_LINK_LIBRARIES)
    if(iface)
      list(APPEND deps ${iface})
    endif()
    foreach(dep IN LISTS deps)
      if(dep MATCHES "^\\$<LINK_ONLY:(.+)>$")
        set(dep "${CMAKE_MATCH_1}")
      endif()
      if(dep MATCHES "^[$-]" OR NOT TARGET ${dep})
        continue()
      endif()
      _mnemo_links(${dep} ${lib} dep_links)
      if(dep_links)
        set(result TRUE)
        break()
      endif()
    endforeach()
  endif()
  _mnemo_remember(${key} ${out} ${result})
endfunction()

# True in OUT when FILE includes a LibTorch header (<torch/...>, <ATen/...>, <c10/...>), itself
# or through the repository's own headers ("engine/...", relative to the source root).
function(_mnemo_reaches_torch file out)
  set(key _MNEMO_REACHES_TORCH_${file})
  _mnemo_return_if_known(${key} ${out})
  set(result FALSE)
  file(STRINGS ${file} includes REGEX "^#include [<\"]")
  foreach(line IN LISTS includes)
    if(line MATCHES "^#include <(torch|ATen|c10)/")
      set(result TRUE)
      break()
    elseif(line MATCHES "^#include \"([^\"]+)\"")
      set(header ${PROJECT_SOURCE_DIR}/${CMAKE_MATCH_1})
      if(EXISTS ${header})  # else generated (protobuf) or another project's
        _mnemo_reaches_torch(${header} header_reaches)
        if(header_reaches)
          set(result TRUE)
          break()
        endif()
      endif()
    endif()
  endforeach()
  _mnemo_remember(${key} ${out} ${result})
endfunction()

function(_mnemo_collect_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _mnemo_collect_targets(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(mnemo_share_torch_pch)
  if(NOT MNEMO_TORCH_PCH OR NOT TARGET OpenMP::OpenMP_CXX)
    return()
  endif()
  add_library(mnemo_torch_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cc)
  target_link_libraries(mnemo_torch_pch PRIVATE ${MNEMO_TORCH_LIBS} OpenMP::OpenMP_CXX)
  target_precompile_headers(mnemo_torch_pch PRIVATE <torch/types.h>)
  _mnemo_collect_targets(${PROJECT_SOURCE_DIR} targets)
  set(count 0)
  set(units 0)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$" OR
       target STREQUAL "mnemo_torch_pch")
      continue()
    endif()
    _mnemo_links(${target} torch with_torch)
    _mnemo_links(${target} OpenMP::OpenMP_CXX with_openmp)
    if(NOT with_torch OR NOT with_openmp)
      continue()
    endif()
    target_precompile_headers(${target} REUSE_FROM mnemo_torch_pch)
    math(EXPR count "${count} + 1")
    # Units that never include LibTorch would only pay for loading it (~3 s each).
    get_target_property(sources ${target} SOURCES)
    get_target_property(source_dir ${target} SOURCE_DIR)
    foreach(source IN LISTS sources)
      if(NOT source MATCHES "\\.cc$")
        continue()
      endif()
      get_filename_component(path ${source} ABSOLUTE BASE_DIR ${source_dir})
      _mnemo_reaches_torch(${path} reaches)
      if(reaches)
        math(EXPR units "${units} + 1")
      else()
        set_source_files_properties(${path} TARGET_DIRECTORY ${target} PROPERTIES
                                    SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endforeach()
  endforeach()
  message(STATUS "mnemo: ${units} units in ${count} targets share the precompiled LibTorch "
                 "header")
endfunction()
