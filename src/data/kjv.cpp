// Extracting the King James Bible from Debian's bible-kjv into a cached plain-text file.
// `bible -f` prints "Ge1:1 In the beginning ..." one verse per line; we keep the text and newline.
#include "hybrid/data/kjv.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

namespace ht {
namespace {

namespace fs = std::filesystem;

const char* kInstallHint = "install it with: apt-get install bible-kjv bible-kjv-text";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Looks `bible` up on PATH ourselves: through popen a missing program is only exit status 127.
std::string find_bible() {
  std::string path = env("PATH");
  if (path.empty()) path = "/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = path.substr(begin, end - begin);
    const std::string candidate = (fs::path(dir.empty() ? "." : dir) / "bible").string();
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  throw std::runtime_error(std::string("the `bible` program (King James Bible) is not on PATH; ") + kInstallHint);
}

// "Ge1:1", "1Chr3:4", "SSol2:1": letters (maybe after a book number), chapter, ':', verse.
bool is_reference(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon + 1 == s.size()) return false;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return colon > 0 && s[colon - 1] >= '0' && s[colon - 1] <= '9';
}

// Runs `bible` over the whole text and returns the verses, one per line, references stripped.
std::string extract_kjv() {
  const std::string bible = find_bible();
  // -f turns pretty-printing off: one verse per line with its reference, no line wrapping.
  const std::string command = "'" + bible + "' -f gen1:1-rev22:21 </dev/null 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("cannot run " + bible + ": " + std::strerror(errno));

  std::string text, line, first_line;
  int64_t verses = 0;
  char buffer[1 << 16];
  auto take_line = [&] {
    if (first_line.empty()) first_line = line;
    const size_t space = line.find(' ');
    if (space == std::string::npos || !is_reference(line.substr(0, space))) {
      throw std::runtime_error("unexpected output from " + bible + ": \"" + first_line.substr(0, 200) +
                               "\"; is its data file /usr/lib/bible.data present? " + kInstallHint);
    }
    text.append(line, space + 1, std::string::npos);
    text.push_back('\n');
    ++verses;
    line.clear();
  };
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) {
    for (size_t i = 0; i < got; ++i) {
      if (buffer[i] == '\n') {
        take_line();
      } else {
        line.push_back(buffer[i]);
      }
    }
  }
  if (!line.empty()) take_line();
  const int status = ::pclose(pipe.release());
  if (status != 0) {
    throw std::runtime_error(bible + " failed (status " + std::to_string(status) + "): \"" + first_line.substr(0, 200) +
                             "\"; " + kInstallHint);
  }
  if (verses != kKjvVerses) {
    throw std::runtime_error(bible + " printed " + std::to_string(verses) + " verses, expected " +
                             std::to_string(kKjvVerses) + " (Genesis 1:1 to Revelation 22:21)");
  }
  return text;
}

}  // namespace

std::string data_cache_dir() {
  fs::path dir;
  if (!env("HT_DATA_DIR").empty()) {
    dir = env("HT_DATA_DIR");
  } else if (!env("XDG_CACHE_HOME").empty()) {
    dir = fs::path(env("XDG_CACHE_HOME")) / "hybrid-trainer";
  } else if (!env("HOME").empty()) {
    dir = fs::path(env("HOME")) / ".cache" / "hybrid-trainer";
  } else {
    throw std::runtime_error("no data cache directory: set HT_DATA_DIR (or HOME or XDG_CACHE_HOME)");
  }
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw std::runtime_error("cannot create data cache directory " + dir.string() + ": " + error.message());
  return dir.string();
}

std::string kjv_text_path() {
  const fs::path path = fs::path(data_cache_dir()) / "kjv.txt";
  std::error_code error;
  if (fs::is_regular_file(path, error) && fs::file_size(path, error) > 0) return path.string();

  const std::string text = extract_kjv();
  // Unique temp name, then rename: concurrent first runs each write a whole file and one wins.
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot move " + tmp + " to " + path.string() + ": " + std::strerror(errno));
  }
  return path.string();
}

TokenCorpus load_kjv() { return TokenCorpus::from_text_file(kjv_text_path()); }

}  // namespace ht
