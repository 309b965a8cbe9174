// Crash-safe checkpoint files. Layout: "HTCKPT01" | u64 payload bytes | u32 crc32 | payload.
// Written to <path>.tmp, fsynced, renamed over <path>, then the directory is fsynced.
#include "hybrid/core/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include <zlib.h>

namespace ht {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'H', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr size_t kHeaderBytes = 8 + 8 + 4;

uint32_t crc_of(const std::string& data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large payloads in chunks.
  const size_t chunk = 1u << 30;
  for (size_t off = 0; off < data.size(); off += chunk) {
    const size_t n = std::min(chunk, data.size() - off);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + off), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError("writing checkpoint '" + path + "' failed: " + std::strerror(errno) +
                            " (is the disk full?)");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Makes a rename (or a new entry) in `dir` durable. EINVAL: the file system cannot sync a
// directory (some network and FUSE mounts); there is nothing more to do then.
void fsync_dir(const fs::path& dir) {
  const std::string name = dir.empty() ? std::string(".") : dir.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    throw CheckpointError("cannot open directory '" + name + "' to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL)
    throw CheckpointError("fsync of directory '" + name + "' failed: " + std::strerror(err) +
                          " (the checkpoint may not survive a power loss)");
}

// Creates the missing directories of `dir` and syncs each new entry into its parent.
void create_directories_durably(const fs::path& dir) {
  if (dir.empty() || fs::is_directory(dir)) return;
  create_directories_durably(dir.parent_path());
  fs::create_directory(dir);
  fsync_dir(dir.parent_path());
}

// Test hook, compiled in on purpose: HT_TEST_CHECKPOINT_PAUSE_MS=<ms> sleeps that long halfway
// through the payload and again before the rename, so a crash test can kill a process inside a
// checkpoint write (tests/apps/crash_test.cpp). Unset (always, outside tests) it costs one getenv
// per process.
void test_pause() {
  static const long ms = [] {
    const char* v = std::getenv("HT_TEST_CHECKPOINT_PAUSE_MS");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

void write_checkpoint_file(const std::string& path, const std::string& payload) {
  const fs::path target(path);
  create_directories_durably(target.parent_path());
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw CheckpointError("cannot create '" + tmp + "': " + std::strerror(errno));
  try {
    char header[kHeaderBytes];
    const uint64_t size = payload.size();
    const uint32_t crc = crc_of(payload);
    std::memcpy(header, kMagic, 8);
    std::memcpy(header + 8, &size, 8);  // little-endian hosts only (x86-64, aarch64)
    std::memcpy(header + 16, &crc, 4);
    write_all(fd, header, kHeaderBytes, tmp);
    const size_t half = payload.size() / 2;
    write_all(fd, payload.data(), half, tmp);
    test_pause();
    write_all(fd, payload.data() + half, payload.size() - half, tmp);
    if (::fsync(fd) != 0)
      throw CheckpointError("fsync of '" + tmp + "' failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // close() can report a write error deferred by the file system (NFS): the file is not safe.
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw CheckpointError("closing '" + tmp + "' failed: " + why);
  }
  test_pause();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw CheckpointError("cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
  fsync_dir(target.parent_path());
}

namespace {

// Reads exactly n bytes; false at a short file.
bool read_exactly(int fd, char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError("reading checkpoint '" + path + "' failed: " + std::strerror(errno));
    }
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Closes the descriptor on every path out of read_checkpoint_file.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

std::string read_checkpoint_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. Only a
  // regular file is read; for one the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw CheckpointError("checkpoint '" + path + "' cannot be opened: " + std::strerror(errno) +
                          " (does it exist?)");
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw CheckpointError("cannot stat checkpoint '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw CheckpointError("'" + path + "' is not a regular file (a directory, FIFO, socket or device), so " +
                          "not a checkpoint; move it out of the way");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kHeaderBytes)
    throw CheckpointError("checkpoint '" + path + "' is truncated: " + std::to_string(file_size) +
                          " bytes, shorter than its header");
  char header[kHeaderBytes];
  if (!read_exactly(fd, header, kHeaderBytes, path))
    throw CheckpointError("checkpoint '" + path + "' is truncated: shorter than its header");
  if (std::memcmp(header, kMagic, 8) != 0)
    throw CheckpointError("'" + path + "' is not a hybrid-trainer checkpoint (bad magic)");
  uint64_t size = 0;
  uint32_t crc = 0;
  std::memcpy(&size, header + 8, 8);
  std::memcpy(&crc, header + 16, 4);
  if (file_size - kHeaderBytes != size)
    throw CheckpointError("checkpoint '" + path + "' is truncated or padded: header says " +
                          std::to_string(size) + " payload bytes, file holds " +
                          std::to_string(file_size - kHeaderBytes));
  std::string payload(size, '\0');
  if (!read_exactly(fd, payload.data(), size, path))
    throw CheckpointError("checkpoint '" + path + "' is truncated: it shrank while being read");
  if (crc_of(payload) != crc)
    throw CheckpointError("checkpoint '" + path + "' is corrupt: checksum mismatch");
  return payload;
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt-%09lld.ht", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir, std::vector<SkippedCheckpoint>* skipped) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  static const std::regex pattern(R"(ckpt-(\d+)\.ht)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    // Opening a FIFO waits for a writer; a directory or device is no checkpoint either.
    if (!entry.is_regular_file(ec)) {
      if (skipped) skipped->push_back({entry.path().string(), "not a regular file (a directory, FIFO, socket or device)"});
      continue;
    }
    // No exception for a step past int64 (std::stoll threw, and resume stopped on a stray file).
    const std::string digits = m[1];
    int64_t step = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (err != std::errc() || end != digits.data() + digits.size()) {
      if (skipped) skipped->push_back({entry.path().string(), "its step number does not fit in 64 bits"});
      continue;
    }
    found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

void prune_checkpoints(const std::string& dir, int keep_last, const std::string& just_written) {
  if (keep_last <= 0) return;
  const auto all = list_checkpoints(dir);  // newest (highest step) first
  const auto newest = std::find_if(all.begin(), all.end(), [&](const std::string& p) {
    return fs::path(p).filename() == fs::path(just_written).filename();
  });
  if (newest == all.end()) return;  // not in `dir`: nothing here is known to be older
  for (auto it = newest + std::min<std::ptrdiff_t>(keep_last, all.end() - newest); it != all.end(); ++it) {
    std::error_code ec;
    fs::remove(*it, ec);
  }
}

}  // namespace ht
