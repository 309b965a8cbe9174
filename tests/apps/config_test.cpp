// Config handling: presets parse, overrides apply, unknown keys and bad values fail by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hybrid-train/config.h"

namespace ht::cli {
namespace fs = std::filesystem;

namespace {
std::string source_dir() {
  return HT_SOURCE_DIR;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = fs::temp_directory_path() / ("ht-config-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}
}  // namespace

TEST(Config, EveryShippedPresetParses) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(source_dir()) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    EXPECT_NO_THROW(Config::from_file(entry.path().string())) << entry.path();
    ++n;
  }
  EXPECT_GE(n, 3);
}

TEST(Config, OverridesApplyWithTheirTypes) {
  Config c;
  c.set_override("train.steps=123");
  c.set_override("optim.lr=0.5");
  c.set_override("checkpoint.resume=false");
  EXPECT_EQ(c.get_int("train.steps"), 123);
  EXPECT_DOUBLE_EQ(c.get_float("optim.lr"), 0.5);
  EXPECT_FALSE(c.get_bool("checkpoint.resume"));
}

TEST(Config, UnknownKeyNamesTheKeyAndItsSection) {
  const std::string e = error_of([] { Config().set_override("train.stepz=5"); });
  EXPECT_NE(e.find("train.stepz"), std::string::npos) << e;
  EXPECT_NE(e.find("train.steps"), std::string::npos) << e;  // the keys that do exist
}

TEST(Config, BadValuesNameTheKeyAndWhatIsAllowed) {
  std::string e = error_of([] { Config().set_override("model.kind=transformer"); });
  EXPECT_NE(e.find("model.kind"), std::string::npos) << e;
  EXPECT_NE(e.find("gpt, mlp, cnn"), std::string::npos) << e;
  e = error_of([] { Config().set_override("train.steps=many"); });
  EXPECT_NE(e.find("integer"), std::string::npos) << e;
  e = error_of([] { Config().set_override("checkpoint.resume=yes"); });
  EXPECT_NE(e.find("true or false"), std::string::npos) << e;
  e = error_of([] { Config().set_override("no-equals-sign"); });
  EXPECT_NE(e.find("section.key=value"), std::string::npos) << e;
}

TEST(Config, FileErrorsNameTheFileAndKey) {
  const std::string bad_key = write_temp("badkey.toml", "[train]\nsteps = 10\nwarmup = 3\n");
  std::string e = error_of([&] { Config::from_file(bad_key); });
  EXPECT_NE(e.find("train.warmup"), std::string::npos) << e;
  const std::string bad_syntax = write_temp("syntax.toml", "[train\nsteps = 10\n");
  e = error_of([&] { Config::from_file(bad_syntax); });
  EXPECT_NE(e.find(bad_syntax), std::string::npos) << e;
  EXPECT_NE(e.find(" at line 1, column 7"), std::string::npos) << e;
  EXPECT_EQ(e.find("line line"), std::string::npos) << e;
  const std::string not_table = write_temp("flat.toml", "steps = 10\n");
  e = error_of([&] { Config::from_file(not_table); });
  EXPECT_NE(e.find("[section]"), std::string::npos) << e;
  e = error_of([] { Config::from_file("/nonexistent/x.toml"); });
  EXPECT_NE(e.find("/nonexistent/x.toml"), std::string::npos) << e;
  fs::remove(bad_key);
  fs::remove(bad_syntax);
  fs::remove(not_table);
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c;
  const std::string prompt = "say \"hi\"\r\n\tC:\\path\x01\x7f end";  // quotes, controls, tab
  c.set_override("sample.prompt=" + prompt);
  c.set_override("memory.budget=2GiB");
  const Config back = Config::from_string(c.to_toml(), "round trip");
  EXPECT_EQ(back.get_string("sample.prompt"), prompt);
  EXPECT_EQ(back.get_bytes("memory.budget"), 2ll << 30);
  EXPECT_EQ(back.to_toml(), c.to_toml());
}

TEST(Config, SizesParseUnitsAndFractions) {
  EXPECT_EQ(parse_size("0"), 0);
  EXPECT_EQ(parse_size("512MiB"), 512ll << 20);
  EXPECT_EQ(parse_size("8 GiB"), 8ll << 30);
  EXPECT_EQ(parse_size("1GB"), 1000000000ll);
  EXPECT_GT(parse_size("0.5"), 1ll << 20);  // half of this machine's RAM
  EXPECT_THROW(parse_size("lots"), ConfigError);
  EXPECT_THROW(parse_size("3 parsecs"), ConfigError);
}

}  // namespace ht::cli
