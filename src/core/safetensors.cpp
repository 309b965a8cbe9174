// Hand-written safetensors reader/writer. The reader trusts nothing in the header: every offset,
// shape and dtype is checked against the file before a byte of tensor data is read.
#include "hybrid/core/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.cpp copies tensor bytes as they are: it needs a little-endian host"
#endif

namespace ht {
namespace {

// The reference implementation refuses headers above 100 MB; a larger one means a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  int64_t size;
};

const std::vector<DtypeInfo>& dtypes() {
  static const std::vector<DtypeInfo> all = {
      {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2},   {"BF16", at::kBFloat16, 2},
      {"F64", at::kDouble, 8}, {"I64", at::kLong, 8},  {"I32", at::kInt, 4},
      {"I16", at::kShort, 2}, {"I8", at::kChar, 1},    {"U8", at::kByte, 1},
      {"BOOL", at::kBool, 1},
  };
  return all;
}

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : dtypes()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* dtype_by_type(at::ScalarType type) {
  for (const auto& d : dtypes()) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

std::string supported_dtype_names() {
  std::string s;
  for (const auto& d : dtypes()) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors file '" + path + "': " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  fail(path, "tensor '" + name + "': " + what);
}

// One tensor's header entry, validated.
struct Entry {
  std::string name;
  const DtypeInfo* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j) {
  if (!j.is_object()) fail_tensor(path, name, "header entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(key)) {
      fail_tensor(path, name, std::string("header entry lacks \"") + key + "\"");
    }
  }
  Entry e;
  e.name = name;
  if (!j["dtype"].is_string()) fail_tensor(path, name, "dtype is not a string");
  const auto dtype = j["dtype"].get<std::string>();
  e.dtype = dtype_by_name(dtype);
  if (!e.dtype) {
    fail_tensor(path, name, "unsupported dtype '" + dtype + "' (supported: " +
                                supported_dtype_names() + ")");
  }
  if (!j["shape"].is_array()) fail_tensor(path, name, "shape is not an array");
  uint64_t numel = 1;
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) fail_tensor(path, name, "shape holds a non-integer or negative");
    const auto n = d.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (n != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / n)) {
      fail_tensor(path, name, "shape is too large");
    }
    numel *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const auto& offs = j["data_offsets"];
  if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
      !offs[1].is_number_unsigned()) {
    fail_tensor(path, name, "data_offsets must be two non-negative integers [begin, end]");
  }
  e.begin = offs[0].get<uint64_t>();
  e.end = offs[1].get<uint64_t>();
  if (e.end < e.begin) {
    fail_tensor(path, name, "data_offsets [" + std::to_string(e.begin) + ", " +
                                std::to_string(e.end) + "] end before they begin");
  }
  const uint64_t expected = numel * static_cast<uint64_t>(e.dtype->size);
  if (e.end - e.begin != expected) {
    fail_tensor(path, name, "data_offsets span " + std::to_string(e.end - e.begin) +
                                " bytes but shape x dtype " + dtype + " needs " +
                                std::to_string(expected));
  }
  return e;
}

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

void write_u64_le(std::ostream& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.write(b, 8);
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  std::vector<at::Tensor> data;  // contiguous, in file order
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") fail(path, "invalid tensor name '" + name + "'");
    if (!seen.insert(name).second) fail_tensor(path, name, "name appears twice");
    if (!t.defined()) fail_tensor(path, name, "tensor is undefined");
    if (!t.device().is_cpu()) fail_tensor(path, name, "tensor is not on the CPU");
    const DtypeInfo* d = dtype_by_type(t.scalar_type());
    if (!d) {
      fail_tensor(path, name, std::string("dtype ") + c10::toString(t.scalar_type()) +
                                  " has no safetensors equivalent here (supported: " +
                                  supported_dtype_names() + ")");
    }
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * d->size;
    header[name] = {{"dtype", d->name}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(t.contiguous());
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data starts 8-byte aligned, as the reference
  // writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot open '" + tmp + "' for writing");
    write_u64_le(out, text.size());
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) fail(path, "write to '" + tmp + "' failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail(path, "cannot rename '" + tmp + "' into place: " + ec.message());
}

std::map<std::string, at::Tensor> load_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open for reading");
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  if (file_size < 8) {
    fail(path, "only " + std::to_string(file_size) +
                   " bytes long; a safetensors file starts with an 8-byte header length");
  }
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t header_len = read_u64_le(len_bytes);
  if (header_len > file_size - 8) {
    fail(path, "header length " + std::to_string(header_len) + " exceeds the " +
                   std::to_string(file_size - 8) +
                   " bytes after the length field (truncated file, or not safetensors)");
  }
  if (header_len > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_len) + " is implausibly large");
  }
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  if (!in) fail(path, "cannot read the " + std::to_string(header_len) + "-byte header");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path, "__metadata__ is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(path, "__metadata__ value for '" + k + "' is not a string");
        if (metadata) (*metadata)[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, value));
  }

  // Offsets are relative to the data section; it must be tiled exactly, in some order.
  const uint64_t data_size = file_size - 8 - header_len;
  for (const auto& e : entries) {
    if (e.end > data_size) {
      fail_tensor(path, e.name, "data_offsets [" + std::to_string(e.begin) + ", " +
                                    std::to_string(e.end) + "] run past the " +
                                    std::to_string(data_size) +
                                    "-byte data section (truncated file?)");
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin < covered) {
      fail_tensor(path, e.name, "data_offsets overlap those of '" + prev->name + "'");
    }
    if (e.begin > covered) {
      fail_tensor(path, e.name, "bytes [" + std::to_string(covered) + ", " +
                                    std::to_string(e.begin) +
                                    ") before it belong to no tensor");
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size) {
    fail(path, "the last " + std::to_string(data_size - covered) +
                   " bytes of the data section belong to no tensor");
  }

  std::map<std::string, at::Tensor> out;
  for (const auto& e : entries) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    in.seekg(static_cast<std::streamoff>(8 + header_len + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) fail_tensor(path, e.name, "read failed at data offset " + std::to_string(e.begin));
    if (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) t = t.to(at::kFloat);
    out.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace ht
