# Compiler flags shared by every zerorun target: warnings, sanitizers, math flags, CUDA detection.

# -fno-math-errno: without it GCC will not vectorise sqrtf (the fused AdamW loop runs 5x slower).
add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fno-math-errno>)

if(ZERORUN_SANITIZE)
  set(_zr_san "")
  foreach(s IN LISTS ZERORUN_SANITIZE)
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "ZERORUN_SANITIZE: unknown sanitizer '${s}' (use 'address;undefined' or 'thread')")
    endif()
    list(APPEND _zr_san "${s}")
  endforeach()
  if("thread" IN_LIST _zr_san AND "address" IN_LIST _zr_san)
    message(FATAL_ERROR "ZERORUN_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  list(JOIN _zr_san "," _zr_san_csv)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${_zr_san_csv}>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=${_zr_san_csv})
  # A sanitizer build exists to run the tests, so RelWithDebInfo means -O1 -g1 there (-g1 keeps the line
  # tables the reports' stack traces need). It compiles in 40 % of the time of -O2 -g (one test file,
  # GCC 12 with ASan + UBSan: 21.4 s against 8.6 s); that build was the largest part of CI's time.
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:CXX,C>,$<CONFIG:RelWithDebInfo>>:-O1;-g1>")
  set(ZERORUN_SANITIZED ON)
endif()

# Installed executables find libzerorun in <prefix>/<libdir> wherever the prefix is.
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

# Test code (not the library it tests) is compiled -O1 -g1 in RelWithDebInfo: the test files are
# heavy with doctest and template expansions and took half of a clean build at -O2 -g (one file:
# 11.7 s against 5.6 s). Other build types keep their flags, so a Debug build still debugs tests.
function(zerorun_test_flags target)
  target_compile_options(${target} PRIVATE "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:RelWithDebInfo>>:-O1;-g1>")
endfunction()

function(zerorun_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wnon-virtual-dtor -Wimplicit-fallthrough>)
endfunction()

# ---- CUDA ----------------------------------------------------------------------------------------
set(ZERORUN_HAVE_CUDA OFF)
string(TOUPPER "${ZERORUN_CUDA}" _zr_cuda)
if(NOT _zr_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "ZERORUN_CUDA must be AUTO, ON or OFF (got '${ZERORUN_CUDA}')")
endif()
if(NOT _zr_cuda STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) by default; override with -DCMAKE_CUDA_ARCHITECTURES=80;90 etc.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 12+'s C++20 flag; teach it.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr")
    find_package(CUDAToolkit REQUIRED)
    set(ZERORUN_HAVE_CUDA ON)
  elseif(_zr_cuda STREQUAL "ON")
    message(FATAL_ERROR "ZERORUN_CUDA=ON but no CUDA compiler (nvcc) was found. Install the CUDA toolkit "
                        "or put nvcc on PATH, or configure with -DZERORUN_CUDA=OFF.")
  else()
    message(STATUS "zerorun: nvcc not found, building without CUDA")
  endif()
endif()
message(STATUS "zerorun: CUDA parts ${ZERORUN_HAVE_CUDA}")
