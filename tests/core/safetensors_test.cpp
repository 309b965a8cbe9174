// Safetensors tests: round trips for every dtype, byte-exact layout, and one clear error for each
// way a file can be broken.
#include <cstring>
#include <fstream>
#include <iterator>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/safetensors.h"
#include "support/scratch_dir.h"

namespace ht {
namespace {

using ::testing::HasSubstr;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

// A file from a hand-written header and data section.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Safetensors, RoundTripsEveryDtype) {
  testing::ScratchDir dir;
  torch::manual_seed(0);
  const NamedTensors tensors = {
      {"f32", torch::randn({3, 4})},
      {"f64", torch::randn({2}, torch::kDouble)},
      {"i64", torch::randint(-1000000, 1000000, {5}, torch::kLong)},
      {"i32", torch::randint(-1000, 1000, {2, 2}, torch::kInt)},
      {"i16", torch::randint(-1000, 1000, {3}, torch::kShort)},
      {"i8", torch::randint(-100, 100, {3}, torch::kChar)},
      {"u8", torch::randint(0, 255, {7}, torch::kByte)},
      {"bool", torch::rand({4}) > 0.5},
      {"scalar", torch::tensor(3.5f).reshape({})},
      {"empty", torch::zeros({0, 3})},
      {"strided", torch::randn({4, 3}).t()},
  };
  const auto path = dir.file("all.safetensors");
  save_safetensors(path, tensors, {{"format", "pt"}, {"note", "test"}});
  std::map<std::string, std::string> meta;
  const auto loaded = load_safetensors(path, &meta);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto& l = loaded.at(name);
    EXPECT_EQ(l.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(l, t)) << name;
  }
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("note"), "test");
  // The data section starts 8-byte aligned, like files from the reference writer.
  const auto bytes = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
}

TEST(Safetensors, HalfPrecisionLoadsAsFloat32) {
  testing::ScratchDir dir;
  const auto x = torch::randn({16, 5});
  const auto path = dir.file("half.safetensors");
  save_safetensors(path, {{"h", x.to(torch::kHalf)}, {"b", x.to(torch::kBFloat16)}});
  const auto loaded = load_safetensors(path);
  EXPECT_EQ(loaded.at("h").scalar_type(), torch::kFloat);
  EXPECT_EQ(loaded.at("b").scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(loaded.at("h"), x.to(torch::kHalf).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(loaded.at("b"), x.to(torch::kBFloat16).to(torch::kFloat)));
  EXPECT_TRUE(torch::allclose(loaded.at("h"), x, 1e-2, 1e-3));
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  // Bytes laid out as the format's specification describes them, not by our writer.
  testing::ScratchDir dir;
  const float a[2] = {1.5f, -2.0f};
  const int64_t b[1] = {42};
  std::string data(reinterpret_cast<const char*>(b), 8);
  data += std::string(reinterpret_cast<const char*>(a), 8);
  const auto path = dir.file("hand.safetensors");
  write_bytes(path, make_file(R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                              data));
  const auto t = load_safetensors(path);
  EXPECT_TRUE(torch::equal(t.at("a"), torch::tensor({1.5f, -2.0f})));
  EXPECT_EQ(t.at("b").item<int64_t>(), 42);
}

TEST(Safetensors, RejectsBrokenFilesNamingFileAndTensor) {
  testing::ScratchDir dir;
  const auto path = dir.file("bad.safetensors");
  const std::string eight(8, 'x');

  write_bytes(path, "abc");
  EXPECT_THAT(load_error(path), HasSubstr("only 3 bytes"));

  write_bytes(path, make_file("{}", "").substr(0, 8) + "{");  // header length 2, 1 byte follows
  EXPECT_THAT(load_error(path), HasSubstr("header length 2 exceeds"));

  write_bytes(path, make_file(R"({"a": [1, 2)", ""));
  EXPECT_THAT(load_error(path), HasSubstr("not valid JSON"));
  EXPECT_THAT(load_error(path), HasSubstr(path));

  write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'w': data_offsets span 8 bytes but shape"));

  write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'w': data_offsets [0, 16] run past the 8-byte"));

  write_bytes(path, make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              eight));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'b': data_offsets overlap those of 'a'"));

  write_bytes(path, make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'a': bytes [0, 4) before it belong to no"));

  write_bytes(path, make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("last 4 bytes"));

  write_bytes(path,
              make_file(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'a': unsupported dtype 'F8_E4M3'"));

  write_bytes(path, make_file(R"({"a":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'a': shape"));

  write_bytes(path, make_file(R"({"a":{"dtype":"U8","shape":[8]}})", eight));
  EXPECT_THAT(load_error(path), HasSubstr("lacks \"data_offsets\""));

  EXPECT_THAT(load_error(dir.file("missing.safetensors")), HasSubstr("cannot open"));
}

TEST(Safetensors, TruncatedFileFailsClearly) {
  testing::ScratchDir dir;
  const auto path = dir.file("t.safetensors");
  save_safetensors(path, {{"a", torch::randn({100})}, {"b", torch::randn({100})}});
  auto bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 10));
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'b': data_offsets [400, 800] run past"));
  EXPECT_THAT(load_error(path), HasSubstr("truncated"));
  write_bytes(path, bytes.substr(0, 20));
  EXPECT_THAT(load_error(path), HasSubstr("exceeds"));
}

TEST(Safetensors, SaveRejectsWhatItCannotWrite) {
  testing::ScratchDir dir;
  const auto path = dir.file("x.safetensors");
  EXPECT_THROW(save_safetensors(path, {{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}),
               SafetensorsError);
  EXPECT_THROW(save_safetensors(path, {{"c", torch::zeros({1}, torch::kComplexFloat)}}),
               SafetensorsError);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", torch::zeros({1})}}), SafetensorsError);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace ht
