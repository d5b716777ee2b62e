# The layers of DESIGN.md, enforced by the build: common < wire < transport < store <
# roles (head, agent, worker) < controller < cli (python sits on top, on the public headers).
#
# Every private include is written relative to src/ ("common/log.h", "agent/agent.h"). Instead
# of src/ itself, a layer's sources get an include directory of their own,
# ${CMAKE_BINARY_DIR}/layers/<layer>/, holding one symbolic link per source folder of that layer
# and of the layers below it (made at configure time). A source that includes a higher layer's
# header therefore fails to compile with "No such file or directory". include/ (the public
# headers) is visible to every layer.
#
# troupe_layer(NAME FOLDERS folder...) declares the next layer up; layers must be declared
# lowest first. troupe_layer_library(NAME sources...) builds a declared layer's sources as the
# OBJECT library troupe_<NAME>. troupe_layer_includes(TARGET NAME) gives any other target (the
# cli executable) a declared layer's view.

set(TROUPE_LAYER_ROOT "${CMAKE_BINARY_DIR}/layers")
set(TROUPE_LAYER_FOLDERS_SO_FAR "")
set(TROUPE_LAYER_NAMES "")

function(troupe_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "FOLDERS")
  set(folders ${TROUPE_LAYER_FOLDERS_SO_FAR} ${ARG_FOLDERS})
  set(dir "${TROUPE_LAYER_ROOT}/${name}")
  file(MAKE_DIRECTORY "${dir}")
  # Stale links (a folder that moved to another layer) would keep a forbidden path visible.
  file(GLOB existing LIST_DIRECTORIES true "${dir}/*")
  foreach(path ${existing})
    get_filename_component(folder "${path}" NAME)
    if(IS_SYMLINK "${path}" AND NOT folder IN_LIST folders)
      file(REMOVE "${path}")  # removes the link only, never the folder it points to
    endif()
  endforeach()
  foreach(folder ${folders})
    if(NOT IS_DIRECTORY "${PROJECT_SOURCE_DIR}/src/${folder}")
      message(FATAL_ERROR "layer ${name}: no folder src/${folder}")
    endif()
    if(NOT IS_SYMLINK "${dir}/${folder}")
      file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${folder}" "${dir}/${folder}" SYMBOLIC)
    endif()
  endforeach()
  set(TROUPE_LAYER_FOLDERS_SO_FAR ${folders} PARENT_SCOPE)
  set(TROUPE_LAYER_NAMES ${TROUPE_LAYER_NAMES} ${name} PARENT_SCOPE)
  set(TROUPE_LAYER_FOLDERS_${name} ${ARG_FOLDERS} PARENT_SCOPE)
endfunction()

function(troupe_layer_includes target name)
  if(NOT name IN_LIST TROUPE_LAYER_NAMES)
    message(FATAL_ERROR "troupe_layer_includes: no layer ${name}")
  endif()
  target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/include"
    "${TROUPE_LAYER_ROOT}/${name}" ${ASIO_INCLUDE_DIR})
  target_compile_definitions(${target} PRIVATE ASIO_STANDALONE ASIO_NO_DEPRECATED)
endfunction()

function(troupe_layer_library name)
  add_library(troupe_${name} OBJECT ${ARGN})
  troupe_layer_includes(troupe_${name} ${name})
  target_compile_definitions(troupe_${name} PRIVATE TROUPE_VERSION="${PROJECT_VERSION}")
  target_link_libraries(troupe_${name} PRIVATE Threads::Threads OpenSSL::SSL OpenSSL::Crypto)
endfunction()

# CTest: for every layer but the top one, a source with that layer's include path that includes
# a header of the next layer up must fail to compile for want of the header. One more test
# compiles a permitted include with the same command line, so that the others cannot pass for
# a broken command line. The probes are only preprocessed: a missing header is all they look
# for. `headers` names one header per layer, in layer order.
function(troupe_add_layer_tests)
  set(headers ${ARGN})
  list(LENGTH TROUPE_LAYER_NAMES count)
  list(LENGTH headers given)
  if(NOT count EQUAL given)
    message(FATAL_ERROR "troupe_add_layer_tests: ${count} layers but ${given} headers")
  endif()
  set(probe_dir "${CMAKE_BINARY_DIR}/layer_probes")
  math(EXPR last "${count} - 2")
  foreach(i RANGE ${last})
    math(EXPR j "${i} + 1")
    list(GET TROUPE_LAYER_NAMES ${i} lower)
    list(GET TROUPE_LAYER_NAMES ${j} higher)
    list(GET headers ${j} header)
    set(probe "${probe_dir}/${lower}_includes_${higher}.cc")
    file(WRITE "${probe}" "#include \"${header}\"\n")
    string(REPLACE "." "\\." header_re "${header}")
    add_test(NAME layering.${lower}_cannot_include_${higher}
      COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -E -o /dev/null
        "-I$<JOIN:${PROJECT_SOURCE_DIR}/include;${TROUPE_LAYER_ROOT}/${lower};${ASIO_INCLUDE_DIR},;-I>"
        "${probe}"
      COMMAND_EXPAND_LISTS)
    # gcc: "fatal error: H: No such file or directory"; clang: "'H' file not found".
    set_tests_properties(layering.${lower}_cannot_include_${higher} PROPERTIES
      PASS_REGULAR_EXPRESSION "${header_re}'?: No such file or directory|'${header_re}' file not found"
      TIMEOUT 60)
  endforeach()
  list(GET TROUPE_LAYER_NAMES ${last} below_top)
  list(GET headers 0 lowest_header)
  set(probe "${probe_dir}/permitted_include.cc")
  file(WRITE "${probe}" "#include \"${lowest_header}\"\nint main() { return 0; }\n")
  add_test(NAME layering.permitted_include_compiles
    COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -E -o /dev/null
      "-I$<JOIN:${PROJECT_SOURCE_DIR}/include;${TROUPE_LAYER_ROOT}/${below_top};${ASIO_INCLUDE_DIR},;-I>"
      "${probe}"
    COMMAND_EXPAND_LISTS)
  set_tests_properties(layering.permitted_include_compiles PROPERTIES TIMEOUT 60)
endfunction()
