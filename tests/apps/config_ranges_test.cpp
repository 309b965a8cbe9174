// Bad input, table-driven from the schema: for every key, values of the wrong type, past its range
// or past 64 bits fail naming the key; the edges of each range pass. A new key is covered as is.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/hybrid/lookahead.h"
#include "hybrid/hybrid/options.h"
#include "support/cli_run.h"

namespace ht::cli {
namespace {

// Shortest text that reads back as exactly this double.
std::string text_of(double v) { return fmt::format("{}", v); }

bool is_numeric(KeyType t) { return t == KeyType::Int || t == KeyType::Float || t == KeyType::Size; }

// Values the key must refuse: wrong type, overflow, just outside each end of its range.
std::vector<std::string> bad_values(const KeySpec& k) {
  std::vector<std::string> out;
  const Range& r = k.range;
  auto outside = [&](double v) {
    if (!r.contains(v)) out.push_back(k.type == KeyType::Float ? text_of(v) : fmt::format("{}", static_cast<int64_t>(v)));
  };
  switch (k.type) {
    case KeyType::Int:
      out = {"abc", "1.5", "", "7x", "99999999999999999999", "-99999999999999999999"};
      outside(r.lo_open ? r.lo : r.lo - 1);
      outside(r.lo - 2);
      if (r.hi < 9.0e18) outside(r.hi_open ? r.hi : r.hi + 1);
      break;
    case KeyType::Float:
      out = {"abc", "", "nan", "inf", "-inf", "1e999"};
      outside(r.lo_open ? r.lo : std::nextafter(r.lo, -INFINITY));
      outside(r.lo - 1);
      outside(r.hi_open ? r.hi : std::nextafter(r.hi, INFINITY));
      outside(r.hi + 1);
      break;
    case KeyType::Size:
      out = {"lots", "-1", "1e30", "3 parsecs", fmt::format("{}", r.hi * 2)};
      break;
    case KeyType::Bool:
      out = {"yes", "1", "", "True"};
      break;
    case KeyType::String:
      if (!k.allowed.empty()) out = {"", "no-such-" + k.allowed.front()};
      if (k.non_empty) out.push_back("");
      break;
  }
  return out;
}

// Values the key must accept: its default and the closed ends of its range.
std::vector<std::string> good_values(const KeySpec& k) {
  std::vector<std::string> out{k.default_value};
  const Range& r = k.range;
  auto text = [&](double v) { return k.type == KeyType::Float ? text_of(v) : fmt::format("{}", static_cast<int64_t>(v)); };
  if (k.type == KeyType::Int || k.type == KeyType::Float) {
    if (!r.lo_open) out.push_back(text(r.lo));
    if (!r.hi_open && r.hi < 9.0e18) out.push_back(text(r.hi));
    if (r.special) out.push_back(text(*r.special));
  }
  if (k.type == KeyType::Size) out.push_back(fmt::format("{}", static_cast<int64_t>(r.hi)));
  return out;
}

}  // namespace

TEST(ConfigRanges, EveryNumericKeyDeclaresARangeThatHoldsItsDefault) {
  for (const KeySpec& k : config_schema()) {
    if (!is_numeric(k.type)) continue;
    EXPECT_TRUE(k.range.declared()) << k.key << ": give it a Range in config_schema.cpp";
  }
  EXPECT_NO_THROW(Config());  // every default passes its own check
}

TEST(ConfigRanges, EveryKeyRefusesBadValuesByName) {
  int checked = 0;
  for (const KeySpec& k : config_schema()) {
    for (const std::string& v : bad_values(k)) {
      Config c;
      try {
        c.set_override(k.key + "=" + v);
        ADD_FAILURE() << k.key << " accepted '" << v << "'";
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(k.key), std::string::npos) << what;
        if (is_numeric(k.type) && what.find("out of range") != std::string::npos)
          EXPECT_NE(what.find(k.range.describe(k.type)), std::string::npos) << what;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(ConfigRanges, EveryKeyAcceptsTheEdgesOfItsRange) {
  for (const KeySpec& k : config_schema()) {
    for (const std::string& v : good_values(k)) {
      Config c;
      EXPECT_NO_THROW(c.set_override(k.key + "=" + v)) << k.key << "=" << v;
    }
  }
}

TEST(ConfigRanges, ATomlFileIsCheckedLikeTheCommandLine) {
  try {
    Config::from_string("[checkpoint]\nkeep_last = 4294967297\n", "bad.toml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.toml: checkpoint.keep_last"), std::string::npos) << e.what();
  }
}

// A checkpoint's stored config may hold a value accepted before its key had a range: it loads,
// and fails when the value is used, naming where it came from and the override that fixes it.
TEST(ConfigRanges, AStoredConfigIsCheckedWhenAValueIsReadAndAnOverrideFixesIt) {
  Config c = Config::from_stored("[checkpoint]\nevery_steps = -3\n", "ckpt.ht (stored config)");
  try {
    c.get_int("checkpoint.every_steps");
    FAIL() << "read an out-of-range value";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ckpt.ht (stored config): checkpoint.every_steps = '-3' is out of range"), std::string::npos) << what;
    EXPECT_NE(what.find("checkpoint.every_steps=500"), std::string::npos) << what;
  }
  c.set_override("checkpoint.every_steps=10");
  EXPECT_EQ(c.get_int("checkpoint.every_steps"), 10);
  EXPECT_THROW(Config::from_stored("[checkpoint]\nevery_steps = 'x'\n", "s"), ConfigError);  // types still
}

// The library keeps its own names (AdamWOptions.beta1); the CLI reports the key.
TEST(ConfigRanges, LibraryOptionErrorsNameTheConfigKey) {
  AdamWOptions o;
  o.beta1 = 1.0;
  try {
    make_adamw({torch::zeros({2})}, o);
    FAIL() << "accepted beta1 = 1";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("AdamWOptions.beta1"), std::string::npos) << e.what();
    const std::string cli = config_error(e).what();
    EXPECT_NE(cli.find("optim.beta1 = 1: must be in [0, 1)"), std::string::npos) << cli;
  }
  HybridOptions h;
  h.max_predict_steps = h.min_predict_steps - 1;
  try {
    h.validate();
    FAIL() << "accepted max_predict_steps < min_predict_steps";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(config_error(e).what()).find("hybrid.max_predict_steps"), std::string::npos);
  }
  LookaheadOptions l;
  l.late_step = 100;  // without outer momentum there is nothing to switch
  try {
    LookaheadStrategy s(l);
    FAIL() << "accepted late_step without momentum";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(config_error(e).what()).find("lookahead.late_step needs lookahead.momentum > 0"), std::string::npos)
        << config_error(e).what();
  }
}

// A few of the same through the binary: exit 2 and the key in the message, nothing started.
TEST(ConfigRanges, TheBinaryExitsWithAUsageErrorNamingTheKey) {
  for (const std::string bad : {"data.val_batches=0", "optim.eps=0", "memory.budget=lots", "hybrid.tolerance=2",
                                "checkpoint.resume=1", "run.mode=fast", "sample.prompt="}) {
    const testing::CliResult r = testing::run_cli("config " + bad, 60);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(bad.substr(0, bad.find('='))), std::string::npos) << bad << ": " << r.output;
  }
}

}  // namespace ht::cli
