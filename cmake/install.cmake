# Install rules and the CMake package for troupe. Included from the top-level CMakeLists.txt
# after the `troupe` and `troupe_cli` targets are defined.
#
# Installs:
#   include/troupe/*.h                        public headers (the only installed ones)
#   lib/libtroupe.a                           the library
#   bin/troupe                                the command-line tool
#   lib/cmake/troupe/troupeConfig.cmake       find_package(troupe) entry point
#   lib/cmake/troupe/troupeConfigVersion.cmake
#   lib/cmake/troupe/troupeTargets*.cmake     imported target troupe::troupe
# (lib is ${CMAKE_INSTALL_LIBDIR}, e.g. lib/x86_64-linux-gnu when the prefix is /usr.)

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Public headers are C++20; a consumer that links troupe::troupe gets at least that standard.
target_compile_features(troupe PUBLIC cxx_std_20)

set(TROUPE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/troupe")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/troupe"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.h")

install(TARGETS troupe
  EXPORT troupeTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")

install(TARGETS troupe_cli
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")

install(EXPORT troupeTargets
  NAMESPACE troupe::
  FILE troupeTargets.cmake
  DESTINATION "${TROUPE_INSTALL_CMAKEDIR}")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/troupeConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/troupeConfig.cmake"
  INSTALL_DESTINATION "${TROUPE_INSTALL_CMAKEDIR}")

# Before 1.0 a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)

install(FILES
  "${PROJECT_BINARY_DIR}/troupeConfig.cmake"
  "${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake"
  DESTINATION "${TROUPE_INSTALL_CMAKEDIR}")
