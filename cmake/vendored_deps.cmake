# Dependencies from a folder instead of the system (-DHT_DEPS_DIR=...): for machines without a
# package registry, such as the GPU check's (scripts/gpu-check.sh prepares the folder). Header-only
# builds of fmt, toml++, CLI11 and nlohmann-json, and GoogleTest from source, so all of them are
# compiled with the C++ ABI of whatever LibTorch the build uses.
set(deps "${HT_DEPS_DIR}/include")
add_library(fmt::fmt INTERFACE IMPORTED)
set_target_properties(fmt::fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${deps}"
                                          INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
set_target_properties(tomlplusplus::tomlplusplus PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${deps}"
                                                            INTERFACE_COMPILE_DEFINITIONS TOML_HEADER_ONLY=1)
add_library(CLI11::CLI11 INTERFACE IMPORTED)
set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${deps}")
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${deps}")
# zlib: its headers from the folder, the library the machine has (every Linux has libz.so.1).
find_library(HT_ZLIB_LIBRARY NAMES z libz.so.1 REQUIRED)
add_library(ZLIB::ZLIB UNKNOWN IMPORTED)
set_target_properties(ZLIB::ZLIB PROPERTIES IMPORTED_LOCATION "${HT_ZLIB_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${deps}")
if(HT_BUILD_TESTS)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory("${HT_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
  if(NOT TARGET GTest::gtest)
    add_library(GTest::gtest ALIAS gtest)
  endif()
endif()
