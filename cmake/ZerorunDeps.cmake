# Finds zerorun's dependencies from the system (Debian packages); never vendored. A missing dependency
# stops configuration with the name of the Debian package that provides it.
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: install the Debian package 'pkg-config' (scripts/install-deps.sh does)")
endif()
find_package(Threads REQUIRED)

macro(zerorun_require_pkg var module debpkg)
  pkg_check_modules(${var} QUIET IMPORTED_TARGET ${module})
  if(NOT ${var}_FOUND)
    message(FATAL_ERROR "zerorun needs ${module} (pkg-config module '${module}' not found): "
                        "install the Debian package '${debpkg}' (scripts/install-deps.sh does)")
  endif()
  message(STATUS "zerorun: ${module} ${${var}_VERSION}")
endmacro()

zerorun_require_pkg(ZR_UCX ucx libucx-dev)
zerorun_require_pkg(ZR_URING liburing liburing-dev)
zerorun_require_pkg(ZR_HWLOC hwloc libhwloc-dev)
zerorun_require_pkg(ZR_OPENBLAS openblas libopenblas-dev)
zerorun_require_pkg(ZR_XXHASH libxxhash libxxhash-dev)
# TensorBoard event files (runtime/observe/): protobuf messages from a .proto compiled by protoc.
zerorun_require_pkg(ZR_PROTOBUF protobuf libprotobuf-dev)
find_program(ZR_PROTOC protoc)
if(NOT ZR_PROTOC)
  message(FATAL_ERROR "zerorun needs protoc (the protobuf compiler) for runtime/observe/*.proto: install the "
                      "Debian package 'protobuf-compiler' (scripts/install-deps.sh does)")
endif()

# oneDNN (Debian libdnnl-dev) for the CPU GEMMs; optional: without it they run on OpenBLAS, slower
# (no 16-bit products), and configuration says so. Found by header and library: Debian's dnnl CMake
# package also requires OpenCL development files, which zerorun does not need.
find_path(ZR_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
find_library(ZR_DNNL_LIB dnnl)
if(ZR_DNNL_INCLUDE AND ZR_DNNL_LIB)
  set(ZERORUN_HAVE_ONEDNN ON)
  file(STRINGS "${ZR_DNNL_INCLUDE}/oneapi/dnnl/dnnl_version.h" _dnnl_ver REGEX "define DNNL_VERSION_(MAJOR|MINOR|PATCH)")
  string(REGEX REPLACE "[^0-9;]" "" _dnnl_ver "${_dnnl_ver}")
  string(REPLACE ";" "." _dnnl_ver "${_dnnl_ver}")
  message(STATUS "zerorun: oneDNN ${_dnnl_ver} (${ZR_DNNL_LIB}): CPU GEMMs on oneDNN")
else()
  set(ZERORUN_HAVE_ONEDNN OFF)
  message(WARNING "zerorun: oneDNN not found (install the Debian package 'libdnnl-dev'; scripts/install-deps.sh "
                  "does): CPU GEMMs fall back to OpenBLAS, in fp32 only")
endif()

find_package(RapidJSON CONFIG QUIET)
find_path(ZR_RAPIDJSON_INCLUDE rapidjson/document.h HINTS ${RapidJSON_INCLUDE_DIRS})
if(NOT ZR_RAPIDJSON_INCLUDE)
  message(FATAL_ERROR "zerorun needs RapidJSON (rapidjson/document.h not found): install the Debian package 'rapidjson-dev'")
endif()

if(ZERORUN_TESTS)
  find_package(doctest CONFIG QUIET)
  if(NOT doctest_FOUND)
    message(FATAL_ERROR "zerorun's tests need doctest: install the Debian package 'doctest-dev' "
                        "(or configure with -DZERORUN_TESTS=OFF)")
  endif()
endif()

if(ZERORUN_HAVE_CUDA)
  find_path(ZR_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
  find_library(ZR_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                                      ${CUDAToolkit_LIBRARY_ROOT}/lib64)
  if(NOT ZR_NCCL_INCLUDE OR NOT ZR_NCCL_LIB)
    message(FATAL_ERROR "CUDA is on but NCCL (nccl.h / libnccl) was not found: install NCCL "
                        "(Debian/NVIDIA package 'libnccl-dev') or configure with -DZERORUN_CUDA=OFF")
  endif()
  add_library(zerorun_nccl INTERFACE IMPORTED)
  target_include_directories(zerorun_nccl INTERFACE ${ZR_NCCL_INCLUDE})
  target_link_libraries(zerorun_nccl INTERFACE ${ZR_NCCL_LIB})
endif()

# Everything is linked PRIVATE: public headers include only the standard library and zerorun headers,
# so a consumer of the shared library needs none of these at compile time.
function(zerorun_link_dependencies target)
  target_link_libraries(${target} PRIVATE PkgConfig::ZR_UCX PkgConfig::ZR_URING PkgConfig::ZR_HWLOC
                                          PkgConfig::ZR_OPENBLAS PkgConfig::ZR_XXHASH ${CMAKE_DL_LIBS})
  target_link_libraries(${target} PUBLIC Threads::Threads)
  target_include_directories(${target} SYSTEM PRIVATE ${ZR_RAPIDJSON_INCLUDE})
  if(ZERORUN_HAVE_ONEDNN)
    target_include_directories(${target} SYSTEM PRIVATE ${ZR_DNNL_INCLUDE})
    target_link_libraries(${target} PRIVATE ${ZR_DNNL_LIB})
    target_compile_definitions(${target} PRIVATE ZERORUN_HAVE_ONEDNN=1)
  endif()
  # Each runtime/observe/*.proto becomes <name>.pb.{h,cc} in the build tree, compiled into the library
  # (included as "<name>.pb.h"; generated code is built without warnings).
  file(GLOB _protos CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/runtime/observe/*.proto")
  set(_gen "${CMAKE_BINARY_DIR}/gen")
  file(MAKE_DIRECTORY "${_gen}")
  foreach(proto IN LISTS _protos)
    get_filename_component(_stem "${proto}" NAME_WE)
    get_filename_component(_dir "${proto}" DIRECTORY)
    add_custom_command(OUTPUT "${_gen}/${_stem}.pb.cc" "${_gen}/${_stem}.pb.h"
      COMMAND ${ZR_PROTOC} "--proto_path=${_dir}" "--cpp_out=${_gen}" "${proto}"
      DEPENDS "${proto}" COMMENT "protoc ${_stem}.proto" VERBATIM)
    target_sources(${target} PRIVATE "${_gen}/${_stem}.pb.cc")
    set_source_files_properties("${_gen}/${_stem}.pb.cc" PROPERTIES COMPILE_OPTIONS "-w")
  endforeach()
  target_include_directories(${target} SYSTEM PRIVATE "${_gen}")
  target_link_libraries(${target} PRIVATE PkgConfig::ZR_PROTOBUF)
  if(ZERORUN_HAVE_CUDA)
    target_link_libraries(${target} PRIVATE CUDA::cudart CUDA::cublas zerorun_nccl)
    target_compile_definitions(${target} PUBLIC ZERORUN_HAVE_CUDA=1)
  endif()
endfunction()
