# `cmake --install build --prefix P`: the library, public headers under P/include/zerorun/<layer>/,
# the CMake package (find_package(zerorun CONFIG) -> zerorun::zerorun), a pkg-config file, the tools.
include(CMakePackageConfigHelpers)

install(TARGETS zerorun EXPORT zerorunTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(layer IN LISTS ZERORUN_LAYERS)
  if(EXISTS "${CMAKE_SOURCE_DIR}/${layer}")
    install(DIRECTORY "${CMAKE_SOURCE_DIR}/${layer}/" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zerorun/${layer}
            FILES_MATCHING PATTERN "*.h" PATTERN "cuda" EXCLUDE PATTERN "nccl" EXCLUDE)
  endif()
endforeach()
install(EXPORT zerorunTargets NAMESPACE zerorun:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zerorun)
configure_package_config_file(cmake/zerorunConfig.cmake.in
  "${CMAKE_BINARY_DIR}/zerorunConfig.cmake" INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zerorun)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/zerorunConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/zerorunConfig.cmake" "${CMAKE_BINARY_DIR}/zerorunConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zerorun)
# The .pc file locates the prefix relative to itself, so `--install --prefix` at any path works.
file(RELATIVE_PATH ZR_PC_TO_PREFIX "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
configure_file(cmake/zerorun.pc.in "${CMAKE_BINARY_DIR}/zerorun.pc" @ONLY)
install(FILES "${CMAKE_BINARY_DIR}/zerorun.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
