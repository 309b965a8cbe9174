// TokenCorpus and byte codec tests: byte-level text files, uint16 token files (header-less and
// llm.c-headed) round-tripping, and errors that name the file and the problem.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/scratch_dir.h"
#include "hybrid/data/byte_codec.h"
#include "hybrid/data/token_corpus.h"

namespace ht {
namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TokenCorpus, TextFileIsItsBytes) {
  testing::ScratchDir dir;
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac\n";  // UTF-8 bytes above 127 must not sign-extend
  write_file(dir.file("t.txt"), text);
  TokenCorpus c = TokenCorpus::from_text_file(dir.file("t.txt"));
  ASSERT_EQ(c.size(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(c.vocab_size(), 256);
  EXPECT_EQ(c[3], 0xc3);
  EXPECT_EQ(c.name(), dir.file("t.txt"));
  EXPECT_EQ(decode_bytes(c.slice(0, c.size())), text);
  EXPECT_TRUE(torch::equal(c.slice(0, c.size()), encode_bytes(text)));
}

TEST(TokenCorpus, Uint16FileRoundTrips) {
  testing::ScratchDir dir;
  std::vector<uint16_t> ids;
  for (int i = 0; i < 5000; ++i) ids.push_back(static_cast<uint16_t>((i * 7919) % 50000));
  ids[1234] = 50256;  // GPT-2's <|endoftext|>, the largest id
  write_token_file(dir.file("ids.bin"), ids.data(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(std::filesystem::file_size(dir.file("ids.bin")), 2 * ids.size());

  TokenCorpus c = TokenCorpus::from_token_file(dir.file("ids.bin"));
  ASSERT_EQ(c.size(), 5000);
  EXPECT_EQ(c.vocab_size(), 50257);  // largest id + 1
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), c.data()));
  at::Tensor s = c.slice(10, 3);  // [3]
  EXPECT_EQ(s.scalar_type(), torch::kInt64);
  EXPECT_EQ(s[2].item<int64_t>(), ids[12]);

  EXPECT_EQ(TokenCorpus::from_token_file(dir.file("ids.bin"), 65536).vocab_size(), 65536);
  const std::string small = error_of([&] { TokenCorpus::from_token_file(dir.file("ids.bin"), 1000); });
  EXPECT_NE(small.find("not below vocab_size 1000"), std::string::npos) << small;
}

TEST(TokenCorpus, ReadsLittleEndianBytesAndLlmcHeader) {
  testing::ScratchDir dir;
  write_file(dir.file("le.bin"), std::string("\x01\x02\xff\x00", 4));
  TokenCorpus le = TokenCorpus::from_token_file(dir.file("le.bin"));
  ASSERT_EQ(le.size(), 2);
  EXPECT_EQ(le[0], 0x0201);
  EXPECT_EQ(le[1], 0x00ff);

  // llm.c layout: int32[256] header {20240520, 1, count}, then the ids.
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = 3;
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  const uint16_t ids[3] = {50256, 464, 3290};
  bytes.append(reinterpret_cast<const char*>(ids), sizeof ids);
  write_file(dir.file("llmc.bin"), bytes);
  TokenCorpus llmc = TokenCorpus::from_token_file(dir.file("llmc.bin"), 50257);
  ASSERT_EQ(llmc.size(), 3);
  EXPECT_EQ(llmc[0], 50256);
  EXPECT_EQ(llmc[2], 3290);

  header[2] = 4;  // count disagrees with the file length
  std::memcpy(bytes.data(), header.data(), 1024);
  write_file(dir.file("bad_llmc.bin"), bytes);
  EXPECT_NE(error_of([&] { TokenCorpus::from_token_file(dir.file("bad_llmc.bin")); }).find("llm.c header"),
            std::string::npos);
}

TEST(TokenCorpus, ErrorsNameTheFileAndProblem) {
  testing::ScratchDir dir;
  const std::string missing = error_of([&] { TokenCorpus::from_text_file(dir.file("absent.txt")); });
  EXPECT_NE(missing.find(dir.file("absent.txt")), std::string::npos) << missing;
  EXPECT_NE(error_of([&] { TokenCorpus::from_token_file(dir.file("absent.bin")); }).find(dir.file("absent.bin")),
            std::string::npos);

  write_file(dir.file("empty.txt"), "");
  const std::string empty = error_of([&] { TokenCorpus::from_text_file(dir.file("empty.txt")); });
  EXPECT_NE(empty.find("empty"), std::string::npos) << empty;

  write_file(dir.file("odd.bin"), "abc");
  const std::string odd = error_of([&] { TokenCorpus::from_token_file(dir.file("odd.bin")); });
  EXPECT_NE(odd.find("3 bytes, an odd count"), std::string::npos) << odd;
  EXPECT_NE(odd.find(dir.file("odd.bin")), std::string::npos) << odd;
}

TEST(ByteCodec, RoundTripsAndRejectsNonBytes) {
  const std::string text = "In the beginning!\n\xc3\xa9";
  at::Tensor ids = encode_bytes(text);  // [20]
  ASSERT_EQ(ids.numel(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(ids[0].item<int64_t>(), 'I');
  EXPECT_EQ(ids[18].item<int64_t>(), 0xc3);
  EXPECT_EQ(decode_bytes(ids), text);
  EXPECT_EQ(decode_bytes(ids.view({4, 5})), text);  // flat order
  EXPECT_EQ(decode_bytes(std::vector<int64_t>{72, 105}), "Hi");
  EXPECT_THROW(decode_bytes(std::vector<int64_t>{72, 300}), std::invalid_argument);
  EXPECT_THROW(decode_bytes(torch::ones({2})), std::invalid_argument);  // float ids
}

}  // namespace
}  // namespace ht
