// IDX reader tests on small files the tests write themselves: shapes and bytes round-trip,
// and damaged files (bad magic, truncation, trailing bytes, wrong type) fail with the path named.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "support/scratch_dir.h"
#include "hybrid/data/idx.h"

namespace ht {
namespace {

std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::vector<uint8_t> iota_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

std::string error_of(const std::string& path) {
  try {
    read_idx_gz(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Idx, ReadsImagesAndLabelsFromGzip) {
  testing::ScratchDir dir;
  const auto pixels = iota_bytes(3 * 4 * 5);
  write_gz(dir.file("images.gz"), idx_bytes(0x08, {3, 4, 5}, pixels));
  write_gz(dir.file("labels.gz"), idx_bytes(0x08, {3}, {9, 0, 4}));

  at::Tensor images = read_idx_gz(dir.file("images.gz"));
  ASSERT_EQ(images.sizes(), (std::vector<int64_t>{3, 4, 5}));
  ASSERT_EQ(images.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(std::equal(pixels.begin(), pixels.end(), images.data_ptr<uint8_t>()));
  EXPECT_EQ(images[2][3][4].item<int>(), pixels.back());

  at::Tensor labels = read_idx_gz(dir.file("labels.gz"));
  ASSERT_EQ(labels.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(labels[0].item<int>(), 9);
  EXPECT_EQ(labels[2].item<int>(), 4);
}

TEST(Idx, ReadsUncompressedFilesToo) {
  testing::ScratchDir dir;
  const auto bytes = idx_bytes(0x08, {2, 2}, {1, 2, 3, 4});
  std::ofstream(dir.file("plain.idx"), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  at::Tensor t = read_idx_gz(dir.file("plain.idx"));
  EXPECT_TRUE(torch::equal(t, torch::tensor({1, 2, 3, 4}, torch::kUInt8).view({2, 2})));
}

TEST(Idx, RejectsDamagedFilesNamingThePath) {
  testing::ScratchDir dir;
  const auto good = idx_bytes(0x08, {2, 3}, iota_bytes(6));
  auto expect_error = [&](const std::string& name, const std::vector<uint8_t>& bytes, const std::string& what) {
    write_gz(dir.file(name), bytes);
    const std::string message = error_of(dir.file(name));
    EXPECT_NE(message.find(dir.file(name)), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  };

  auto bad_magic = good;
  bad_magic[0] = 0x1f;
  expect_error("magic.gz", bad_magic, "bad magic");

  auto wrong_type = good;
  wrong_type[2] = 0x0D;  // float32 elements
  expect_error("type.gz", wrong_type, "0x0d is not supported");

  expect_error("truncated.gz", std::vector<uint8_t>(good.begin(), good.end() - 1), "truncated IDX data");
  expect_error("header.gz", std::vector<uint8_t>(good.begin(), good.begin() + 6), "truncated IDX dimensions");

  auto trailing = good;
  trailing.push_back(0);
  expect_error("trailing.gz", trailing, "beyond its declared 6 elements");

  const std::string missing = error_of(dir.file("absent.gz"));
  EXPECT_NE(missing.find(dir.file("absent.gz")), std::string::npos) << missing;
}

}  // namespace
}  // namespace ht
