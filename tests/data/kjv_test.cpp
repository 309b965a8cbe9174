// KJV extraction tests: runs the real `bible` program into a scratch cache (skipped if bible-kjv
// is absent) and checks the exact text; a PATH without `bible` must name the packages to install.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/scratch_dir.h"
#include "hybrid/data/kjv.h"

namespace ht {
namespace {

bool have_bible() { return std::system("command -v bible >/dev/null 2>&1") == 0; }

TEST(Kjv, ExtractsTheWholeBibleAsPlainText) {
  if (!have_bible()) GTEST_SKIP() << "bible not installed (apt-get install bible-kjv bible-kjv-text)";
  testing::ScratchDir cache;
  testing::ScopedEnv env("HT_DATA_DIR", cache.str().c_str());

  const std::string path = kjv_text_path();
  EXPECT_EQ(path, cache.file("kjv.txt"));
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_EQ(static_cast<int64_t>(text.size()), kKjvBytes);
  EXPECT_EQ(text.rfind("In the beginning God created the heaven and the earth.\n", 0), 0u);
  const std::string last = "The grace of our Lord Jesus Christ be with you all. Amen.\n";
  EXPECT_EQ(text.substr(text.size() - last.size()), last);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), kKjvVerses);
  EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) { return c == '\n' || (c >= ' ' && c <= '~'); }));
  EXPECT_TRUE(std::filesystem::directory_iterator(cache.str()) != std::filesystem::directory_iterator());
  for (const auto& entry : std::filesystem::directory_iterator(cache.str())) {
    EXPECT_EQ(entry.path().filename(), "kjv.txt") << "leftover temp file";
  }

  // The second call uses the cache instead of running bible again.
  const auto written = std::filesystem::last_write_time(path);
  EXPECT_EQ(kjv_text_path(), path);
  EXPECT_EQ(std::filesystem::last_write_time(path), written);

  TokenCorpus corpus = load_kjv();
  EXPECT_EQ(corpus.size(), kKjvBytes);
  EXPECT_EQ(corpus.vocab_size(), 256);
}

TEST(Kjv, MissingProgramNamesThePackages) {
  testing::ScratchDir cache;
  testing::ScopedEnv env("HT_DATA_DIR", cache.str().c_str());
  testing::ScopedEnv path("PATH", cache.str().c_str());  // a PATH holding no `bible`
  try {
    kjv_text_path();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install bible-kjv bible-kjv-text"), std::string::npos) << e.what();
  }
}

TEST(Kjv, CacheDirectoryFollowsTheEnvironment) {
  testing::ScratchDir root;
  testing::ScopedEnv no_ht("HT_DATA_DIR", nullptr);
  {
    testing::ScopedEnv xdg("XDG_CACHE_HOME", root.file("xdg").c_str());
    EXPECT_EQ(data_cache_dir(), root.file("xdg") + "/hybrid-trainer");
    EXPECT_TRUE(std::filesystem::is_directory(root.file("xdg") + "/hybrid-trainer"));
  }
  testing::ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  testing::ScopedEnv home("HOME", root.file("home").c_str());
  EXPECT_EQ(data_cache_dir(), root.file("home") + "/.cache/hybrid-trainer");
}

}  // namespace
}  // namespace ht
