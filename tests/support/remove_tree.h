// Removes a directory tree for the tests, with POSIX nftw rather than std::filesystem::remove_all:
// LibTorch 2.x wheels export their own copies of libstdc++'s filesystem internals
// (pytorch/pytorch#133437), and remove_all crashed every test that called it on torch 2.11.
#pragma once

#include <ftw.h>

#include <cstdio>
#include <filesystem>

namespace ht::testing {

// Like std::filesystem::remove_all: a missing path is no error; links are removed, not followed.
inline void remove_tree(const std::filesystem::path& path) {
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p) == 0 ? 0 : -1; };
  ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace ht::testing
