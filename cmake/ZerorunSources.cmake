# Source discovery for the layer folders. Rules, so that adding a file never needs a CMake edit:
#   - every *.cc under a layer folder is part of libzerorun;
#   - files under a folder named `cuda/` or `nccl/`, and every *.cu, build only when CUDA is on;
#   - *_avx2.cc is compiled with -mavx2 -mfma -mf16c, *_avx512.cc with -mavx512f/bw/vl/dq and F16C,
#     *_avx512bf16.cc with those and -mavx512bf16;
#     callers pick them at run time (core/cpu_features.h), so the default build runs on any x86-64.
#   - *_test.cc, main.cc and files under a `tools/` or `tests/` folder are never library sources.
function(zerorun_add_layer_sources target)
  foreach(layer IN LISTS ARGN)
    file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/${layer}/*.cc"
                                              "${CMAKE_SOURCE_DIR}/${layer}/*.cu")
    foreach(f IN LISTS _srcs)
      file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${f}")
      if(rel MATCHES "(^|/)(cuda|nccl)/" OR rel MATCHES "\\.cu$")
        if(NOT ZERORUN_HAVE_CUDA)
          continue()
        endif()
      endif()
      if(rel MATCHES "_test\\.cc$" OR rel MATCHES "(^|/)main\\.cc$")
        continue()
      endif()
      target_sources(${target} PRIVATE "${f}")
      zerorun_simd_flags("${f}")
    endforeach()
  endforeach()
endfunction()

function(zerorun_simd_flags file)
  if(file MATCHES "_avx2\\.cc$")
    set_source_files_properties("${file}" PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  elseif(file MATCHES "_avx512\\.cc$")
    set_source_files_properties("${file}" PROPERTIES COMPILE_OPTIONS
                                "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx2;-mfma;-mf16c")
  elseif(file MATCHES "_avx512bf16\\.cc$")
    set_source_files_properties("${file}" PROPERTIES COMPILE_OPTIONS
                                "-mavx512bf16;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx2;-mfma;-mf16c")
  endif()
endfunction()
