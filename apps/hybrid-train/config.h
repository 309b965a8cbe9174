// The CLI's configuration: a schema of every key (type, default, allowed values, help), TOML
// files layered over the defaults, and `key=value` overrides. Unknown keys and bad values fail.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hybrid/core/errors.h"

namespace ht::cli {

// A bad key or value, named with its key: the library's OptionsError in the CLI's vocabulary,
// so every bad setting is exit 2 wherever it is detected.
class ConfigError : public ht::OptionsError {
 public:
  using ht::OptionsError::OptionsError;
};

enum class KeyType { Int, Float, Bool, String, Size };

// The values a numeric key accepts: [lo, hi], either end open, plus at most one value outside it
// that means something special (data.val_batches = -1: all). Size keys are ranged in bytes.
// Declared for every numeric key in the schema, so every value is checked in one place.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  std::optional<double> special;  // a value allowed outside [lo, hi]
  std::string note;               // what an edge or special value means, e.g. "0 = off"

  bool declared() const { return std::isfinite(lo) && std::isfinite(hi); }
  bool contains(double v) const;
  // "an integer in [0, 1000000] (0 = off)", "a number in (0, 1)", for errors and `config --keys`.
  std::string describe(KeyType type) const;

  // Builders for the schema: in(0, 1).open_hi().means("0 = off").
  static Range in(double lo, double hi) { Range r; r.lo = lo; r.hi = hi; return r; }
  Range open_lo() const { Range r = *this; r.lo_open = true; return r; }
  Range open_hi() const { Range r = *this; r.hi_open = true; return r; }
  Range or_value(double v, std::string meaning) const {
    Range r = *this; r.special = v; r.note = std::move(meaning); return r;
  }
  Range means(std::string meaning) const { Range r = *this; r.note = std::move(meaning); return r; }
};

struct KeySpec {
  std::string key;                   // "section.name"
  KeyType type;
  std::string default_value;         // canonical text
  std::vector<std::string> allowed;  // for enumerations; empty = any value of the type
  std::string help;
  Range range = {};                  // Int, Float and Size keys (bytes); see Range
  bool non_empty = false;            // String keys that must not be empty
};

const std::vector<KeySpec>& config_schema();

class Config {
 public:
  Config();  // all defaults
  // Defaults overlaid with the file. Errors name the file, the key and what is allowed.
  static Config from_file(const std::string& path);
  // Same, from TOML text; `origin` names it in errors.
  static Config from_string(const std::string& toml_text, const std::string& origin);
  // The config stored in a checkpoint: types are checked, ranges only when a value is read
  // (Config::get_*), so an override can still replace a value that is out of range today.
  static Config from_stored(const std::string& toml_text, const std::string& origin);
  // `key=value` from the command line; value parsed by the key's type.
  void set_override(const std::string& assignment);
  // Checks the value's type, allowed values and range (ConfigError naming the key and origin).
  void set(const std::string& key, const std::string& value, const std::string& origin);

  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  // Size keys: "0" (none), bytes ("8589934592"), units ("8GiB", "512MB") or a fraction of RAM ("0.5").
  int64_t get_bytes(const std::string& key) const;
  bool is_default(const std::string& key) const;

  std::string to_toml() const;  // every key, resolved, grouped by section

 private:
  const KeySpec& spec(const std::string& key) const;
  static Config parse_toml(const std::string& toml_text, const std::string& origin, bool check_ranges);
  void set_value(const std::string& key, const std::string& value, const std::string& origin, bool check_range);
  // Throws if a value set without its range check (from_stored) is out of range.
  void check_range_on_read(const KeySpec& k) const;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> unchecked_;  // key -> origin, for values not range-checked yet
};

// An optional .toml path first, then key=value overrides (the train/config/plan arguments).
Config load_config(const std::vector<std::string>& config_and_overrides);

// Bytes; a number in (0, 1] without a unit is a fraction of RAM. Sizes past 2^62 bytes are an
// error, not a silent overflow. Exposed for tests.
int64_t parse_size(const std::string& text);

}  // namespace ht::cli
