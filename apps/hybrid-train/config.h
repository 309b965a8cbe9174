// The CLI's configuration: a schema of every key (type, default, allowed values, help), TOML
// files layered over the defaults, and `key=value` overrides. Unknown keys and bad values fail.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht::cli {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class KeyType { Int, Float, Bool, String, Size };

struct KeySpec {
  std::string key;                   // "section.name"
  KeyType type;
  std::string default_value;         // canonical text
  std::vector<std::string> allowed;  // for enumerations; empty = any value of the type
  std::string help;
};

const std::vector<KeySpec>& config_schema();

class Config {
 public:
  Config();  // all defaults
  // Defaults overlaid with the file. Errors name the file, the key and what is allowed.
  static Config from_file(const std::string& path);
  // Same, from TOML text (the config stored inside a checkpoint); `origin` names it in errors.
  static Config from_string(const std::string& toml_text, const std::string& origin);
  // `key=value` from the command line; value parsed by the key's type.
  void set_override(const std::string& assignment);
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
  std::map<std::string, std::string> values_;
};

// An optional .toml path first, then key=value overrides (the train/config/plan arguments).
Config load_config(const std::vector<std::string>& config_and_overrides);

int64_t parse_size(const std::string& text);  // exposed for tests; fraction of RAM if < 1

}  // namespace ht::cli
