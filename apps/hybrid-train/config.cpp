// Config values: TOML files over defaults, `key=value` overrides, typed getters.
// Every value is validated when set, so a bad key or value fails before training starts.
#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace ht::cli {
namespace {

const char* type_name(KeyType t) {
  switch (t) {
    case KeyType::Int: return "an integer";
    case KeyType::Float: return "a number";
    case KeyType::Bool: return "true or false";
    case KeyType::String: return "a string";
    case KeyType::Size: return "a size (bytes, e.g. 8GiB, or a fraction of RAM like 0.5)";
  }
  return "?";
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Whole text as one int64. `overflow` tells a number too large for 64 bits from no number.
bool parse_int(const std::string& s, int64_t& out, bool* overflow = nullptr) {
  try {
    size_t used = 0;
    out = std::stoll(s, &used);
    return used == s.size();
  } catch (const std::out_of_range&) {
    if (overflow) *overflow = true;
    return false;
  } catch (...) {
    return false;
  }
}

// A bound as it is written in errors: integers without a fraction or exponent.
std::string bound_text(double v, KeyType type) {
  if (type == KeyType::Size && v >= 1024.0) {
    static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = -1;
    while (u < 5 && std::fmod(v, 1024.0) == 0.0) {
      v /= 1024.0;
      ++u;
    }
    if (u >= 0) return fmt::format("{}{}", v, units[u]);
  }
  if (type != KeyType::Float && std::abs(v) < 9.0e15) return std::to_string(static_cast<int64_t>(v));
  if (type != KeyType::Float && v >= 9.2e18) return "2^63-1";
  return fmt::format("{}", v);
}

bool parse_float(const std::string& s, double& out) {
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out);
  } catch (...) {
    return false;
  }
}

// A TOML basic string: quotes and backslashes escaped, and every control character but tab as
// \uXXXX (TOML rejects them raw), so any value read back equals the one written.
std::string toml_string(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if ((u < 0x20 && c != '\t') || u == 0x7F) {
      out += fmt::format("\\u{:04X}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int64_t physical_ram_bytes() {
  return static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

bool Range::contains(double v) const {
  if (special && v == *special) return true;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string Range::describe(KeyType type) const {
  const std::string what = type == KeyType::Int ? "an integer" : type == KeyType::Size ? "a size in bytes" : "a number";
  std::string out = what + " in " + (lo_open ? "(" : "[") + bound_text(lo, type) + ", " + bound_text(hi, type) +
                    (hi_open ? ")" : "]");
  if (special) out = bound_text(*special, type) + " or " + out;
  if (!note.empty()) out += " (" + note + ")";
  return out;
}

int64_t parse_size(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e')) ++i;
  double number = 0;
  if (i == 0 || !parse_float(s.substr(0, i), number) || number < 0)
    throw ConfigError("'" + text + "' is not a size: use bytes, units like 8GiB / 512MB, or a fraction of RAM like 0.5");
  std::string unit = s.substr(i);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  // Converting a double past int64's range is undefined (1e30 came out as 0, "no budget").
  auto bytes = [&](double b) {
    if (!(b < 4.611686018427388e18))  // 2^62
      throw ConfigError("size '" + text + "' is too large: at most 2^62 bytes (4 EiB)");
    return static_cast<int64_t>(b);
  };
  if (unit.empty()) {
    if (number > 0 && number <= 1.0) return bytes(number * static_cast<double>(physical_ram_bytes()));
    return bytes(number);
  }
  static const std::vector<std::pair<std::string, double>> units = {
      {"b", 1.0},           {"kb", 1e3},           {"mb", 1e6},           {"gb", 1e9},
      {"kib", 1024.0},      {"mib", 1048576.0},    {"gib", 1073741824.0}, {"k", 1024.0},
      {"m", 1048576.0},     {"g", 1073741824.0},   {"tib", 1099511627776.0}};
  for (const auto& u : units)
    if (unit == u.first) return bytes(number * u.second);
  throw ConfigError("unknown size unit '" + unit + "' in '" + text + "' (use B, KiB, MiB, GiB, KB, MB, GB)");
}

Config::Config() {
  for (const auto& k : config_schema()) set(k.key, k.default_value, "built-in defaults");
}

const KeySpec& Config::spec(const std::string& key) const {
  for (const auto& k : config_schema())
    if (k.key == key) return k;
  // Suggest the keys of the same section, the usual cause being a typo there.
  const std::string section = key.substr(0, key.find('.'));
  std::vector<std::string> near;
  for (const auto& k : config_schema())
    if (k.key.rfind(section + ".", 0) == 0) near.push_back(k.key);
  std::vector<std::string> sections;
  for (const auto& k : config_schema()) {
    const std::string s = k.key.substr(0, k.key.find('.'));
    if (std::find(sections.begin(), sections.end(), s) == sections.end()) sections.push_back(s);
  }
  throw ConfigError("unknown config key '" + key + "'" +
                    (near.empty() ? " (sections: " + join(sections) + ")" : " (keys in [" + section + "]: " + join(near) + ")"));
}

void Config::set(const std::string& key, const std::string& value, const std::string& origin) {
  set_value(key, value, origin, /*check_range=*/true);
}

namespace {

// The number a range applies to: the value itself, or a size's bytes.
double ranged_number(const KeySpec& k, const std::string& canonical) {
  switch (k.type) {
    case KeyType::Int: return static_cast<double>(std::stoll(canonical));
    case KeyType::Float: return std::stod(canonical);
    case KeyType::Size: return static_cast<double>(parse_size(canonical));
    default: return 0.0;
  }
}

ConfigError out_of_range(const KeySpec& k, const std::string& value, const std::string& origin) {
  // The range's note says what its edges mean; without one the key's help says what it is.
  return ConfigError(origin + ": " + k.key + " = '" + value + "' is out of range: it must be " +
                     k.range.describe(k.type) + (k.range.note.empty() ? " (" + k.help + ")" : ""));
}

}  // namespace

void Config::set_value(const std::string& key, const std::string& value, const std::string& origin,
                       bool check_range) {
  const KeySpec& k = spec(key);
  auto bad = [&](const std::string& why) {
    return ConfigError(origin + ": " + key + " = '" + value + "' " + why);
  };
  std::string canonical = value;
  int64_t i = 0;
  double f = 0;
  bool overflow = false;
  switch (k.type) {
    case KeyType::Int:
      if (!parse_int(value, i, &overflow))
        throw bad(overflow ? "does not fit a 64-bit integer: it must be " + k.range.describe(k.type)
                           : std::string("is not ") + type_name(k.type));
      canonical = std::to_string(i);
      break;
    case KeyType::Float:
      if (!parse_float(value, f)) throw bad(std::string("is not ") + type_name(k.type) + " (a finite one)");
      canonical = fmt::format("{}", f);  // shortest text that reads back as the same double
      break;
    case KeyType::Bool:
      if (value != "true" && value != "false") throw bad("must be true or false");
      break;
    case KeyType::Size:
      try {
        parse_size(value);
      } catch (const ConfigError& e) {
        throw bad(std::string("is not ") + type_name(k.type) + ": " + e.what());
      }
      break;
    case KeyType::String:
      if (k.non_empty && value.empty()) throw bad("must not be empty (" + k.help + ")");
      break;
  }
  if (!k.allowed.empty() && std::find(k.allowed.begin(), k.allowed.end(), value) == k.allowed.end())
    throw bad("is not allowed (allowed: " + join(k.allowed) + ")");
  const bool ranged = k.type == KeyType::Int || k.type == KeyType::Float || k.type == KeyType::Size;
  unchecked_.erase(key);
  if (ranged && !k.range.contains(ranged_number(k, canonical))) {
    if (check_range) throw out_of_range(k, value, origin);
    unchecked_[key] = origin;  // read later only through check_range_on_read
  }
  values_[key] = canonical;
}

void Config::check_range_on_read(const KeySpec& k) const {
  const auto it = unchecked_.find(k.key);
  if (it == unchecked_.end()) return;
  throw ConfigError(std::string(out_of_range(k, values_.at(k.key), it->second).what()) +
                    "; override it on the command line, e.g. " + k.key + "=" + k.default_value);
}

void Config::set_override(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("override '" + assignment + "' must look like section.key=value, e.g. train.steps=500");
  set(assignment.substr(0, eq), assignment.substr(eq + 1), "command line");
}

Config Config::from_file(const std::string& path) {
  // An ifstream opens a directory and reads nothing from it: the defaults would run unnoticed.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("config file '" + path + "' is a directory; give a .toml file (presets are in configs/)");
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot open config file '" + path + "' (does it exist? presets are in configs/)");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("reading config file '" + path + "' failed; is it a readable .toml file?");
  return from_string(text.str(), path);
}

Config Config::from_string(const std::string& toml_text, const std::string& path) {
  return parse_toml(toml_text, path, /*check_ranges=*/true);
}

Config Config::from_stored(const std::string& toml_text, const std::string& path) {
  return parse_toml(toml_text, path, /*check_ranges=*/false);
}

Config Config::parse_toml(const std::string& toml_text, const std::string& path, bool check_ranges) {
  toml::table table;
  try {
    table = toml::parse(toml_text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << e.source().begin;
    throw ConfigError("cannot parse config '" + path + "': " + std::string(e.description()) + " at " + where.str());  // "line N, column M"
  }
  Config c;
  for (auto&& [section, node] : table) {
    const auto* sub = node.as_table();
    if (!sub)
      throw ConfigError(path + ": top-level key '" + std::string(section.str()) +
                        "' must be a [section] table (e.g. [train] steps = 500)");
    for (auto&& [name, value] : *sub) {
      const std::string key = std::string(section.str()) + "." + std::string(name.str());
      std::string text;
      if (auto s = value.value_exact<std::string>()) text = *s;
      else if (auto b = value.value_exact<bool>()) text = *b ? "true" : "false";
      else if (auto n = value.value_exact<int64_t>()) text = std::to_string(*n);
      else if (auto d = value.value_exact<double>()) text = fmt::format("{}", *d);
      else throw ConfigError(path + ": " + key + " must be a string, number or boolean");
      c.set_value(key, text, path, check_ranges);
    }
  }
  return c;
}

int64_t Config::get_int(const std::string& key) const {
  const KeySpec& k = spec(key);
  check_range_on_read(k);
  return std::stoll(values_.at(k.key));
}
double Config::get_float(const std::string& key) const {
  const KeySpec& k = spec(key);
  check_range_on_read(k);
  return std::stod(values_.at(k.key));
}
bool Config::get_bool(const std::string& key) const { return values_.at(spec(key).key) == "true"; }
const std::string& Config::get_string(const std::string& key) const { return values_.at(spec(key).key); }
int64_t Config::get_bytes(const std::string& key) const {
  const KeySpec& k = spec(key);
  check_range_on_read(k);
  return parse_size(values_.at(k.key));
}
bool Config::is_default(const std::string& key) const {
  return values_.at(spec(key).key) == Config().values_.at(key);
}

std::string Config::to_toml() const {
  std::string out, section;
  for (const auto& k : config_schema()) {
    const std::string s = k.key.substr(0, k.key.find('.'));
    if (s != section) {
      out += (section.empty() ? "" : "\n") + ("[" + s + "]\n");
      section = s;
    }
    const std::string& v = values_.at(k.key);
    const bool quoted = k.type == KeyType::String || k.type == KeyType::Size;
    out += k.key.substr(s.size() + 1) + " = " + (quoted ? toml_string(v) : v) + "\n";
  }
  return out;
}

Config load_config(const std::vector<std::string>& args) {
  Config c;
  size_t first_override = 0;
  if (!args.empty() && args[0].find('=') == std::string::npos) {
    c = Config::from_file(args[0]);
    first_override = 1;
  }
  for (size_t i = first_override; i < args.size(); ++i) c.set_override(args[i]);
  return c;
}

}  // namespace ht::cli
