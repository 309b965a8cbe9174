// The checkpoint registry and reader: a file is a root archive of step, config and one
// sub-archive per part. Reading is coded once here; the trainer, eval, sample and info share it.
#include "hybrid/core/checkpoint.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/weight_average.h"

namespace ht {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t read_int(torch::serialize::InputArchive& a, const char* key) {
  at::Tensor t;  // a fresh tensor per read: reading into a defined one would resize its storage
  a.read(key, t);
  return t.item<int64_t>();
}

}  // namespace

// ---- reading ---------------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  const std::string payload = read_checkpoint_file(path);  // CheckpointError: missing, torn, CRC
  file_bytes_ = static_cast<int64_t>(payload.size());
  // A payload whose CRC matches can still be an archive that does not parse (written by a
  // broken program, or damaged before the CRC was taken): every failure from here on is the
  // file's, and a CheckpointError lets resuming fall back to the previous one.
  try {
    torch::serialize::InputArchive root;
    root.load_from(payload.data(), payload.size());
    at::Tensor format;
    if (!root.try_read("format_version", format))
      throw CheckpointError("it has no format_version");
    if (format.item<int64_t>() != kCheckpointFormat)
      throw CheckpointMismatch(name() + " has layout version " + std::to_string(format.item<int64_t>()) +
                               "; this version of hybrid-trainer reads version " +
                               std::to_string(kCheckpointFormat) +
                               " only. Resume it with the version that wrote it, or start a new run");
    step_ = read_int(root, "step");
    c10::IValue config, parts;
    root.read("config", config);
    config_text_ = config.toStringRef();
    root.read("parts", parts);
    parts_ = split(parts.toStringRef());
    for (const auto& part : parts_) {
      archives_.push_back(std::make_unique<torch::serialize::InputArchive>());
      if (!root.try_read(part, *archives_.back()))
        throw CheckpointError("its part list names '" + part + "', which it does not hold");
    }
  } catch (const CheckpointMismatch&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(name() + " cannot be read although its checksum is intact (" + e.what() +
                          "): it was written damaged or by another program");
  }
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::has(const std::string& part) const {
  return std::find(parts_.begin(), parts_.end(), part) != parts_.end();
}

torch::serialize::InputArchive& CheckpointReader::part(const std::string& part) const {
  const auto it = std::find(parts_.begin(), parts_.end(), part);
  if (it == parts_.end())
    throw CheckpointMismatch(name() + " holds no '" + part + "' (it holds: " + join(parts_) + ")");
  return *archives_[static_cast<size_t>(it - parts_.begin())];
}

// ---- the registry ----------------------------------------------------------------------------

void CheckpointRegistry::add(CheckpointPart part) {
  if (part.name.empty() || part.name.find(',') != std::string::npos)
    throw std::invalid_argument("checkpoint part names must be non-empty and without commas");
  for (const auto& p : parts_)
    if (p.name == part.name) throw std::invalid_argument("checkpoint part '" + part.name + "' is registered twice");
  parts_.push_back(std::move(part));
}

void CheckpointRegistry::save(const std::string& path, int64_t step, const std::string& config_text) const {
  torch::NoGradGuard no_grad;
  torch::serialize::OutputArchive root;
  std::vector<std::string> names;
  root.write("format_version", torch::tensor(kCheckpointFormat));
  root.write("step", torch::tensor(step));
  root.write("config", c10::IValue(config_text));
  for (const auto& part : parts_) {
    torch::serialize::OutputArchive a;
    part.save(a);
    root.write(part.name, a);
    names.push_back(part.name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ",") + n;
  root.write("parts", c10::IValue(list));
  std::string payload;
  root.save_to([&](const void* data, size_t n) {
    payload.append(static_cast<const char*>(data), n);
    return n;
  });
  write_checkpoint_file(path, payload);
}

void CheckpointRegistry::load(const CheckpointReader& file) const {
  torch::NoGradGuard no_grad;
  // Everything that can be checked without changing the run comes first: which parts there are,
  // then each part's own check.
  std::set<std::string> ours;
  for (const auto& part : parts_) {
    ours.insert(part.name);
    if (!file.has(part.name) && !part.when_missing)
      throw CheckpointMismatch(file.name() + " holds no " + part.what + " ('" + part.name +
                               "'), which this run needs: it was written by a run of another kind");
  }
  for (const auto& name : file.parts())
    if (!ours.count(name))
      throw CheckpointMismatch(file.name() + " holds '" + name + "', which this run has no use for: it was " +
                               "written by a run of another kind (resume it with the same step strategy, "
                               "weight average and model)");
  for (const auto& part : parts_)
    if (part.check && file.has(part.name)) part.check(file.part(part.name));

  for (const auto& part : parts_) {
    if (!file.has(part.name)) {
      part.when_missing();
      continue;
    }
    try {
      part.load(file.part(part.name));
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw CheckpointMismatch(file.name() + ": its " + part.what + " does not fit this run (" + e.what() +
                               "); the run is partly loaded, do not train on");
    }
  }
}

// ---- the model part --------------------------------------------------------------------------

namespace {

// Every tensor of the module, read from the archive and checked; nothing is copied yet.
std::vector<std::pair<at::Tensor, at::Tensor>> matched_model_tensors(torch::serialize::InputArchive& a,
                                                                     torch::nn::Module& module,
                                                                     const std::string& file) {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (module tensor, saved tensor)
  std::set<std::string> used;
  auto match = [&](const std::string& name, const at::Tensor& dst, bool is_buffer) {
    at::Tensor src;
    if (!a.try_read(name, src, is_buffer))
      throw CheckpointMismatch(file + " has no tensor '" + name +
                               "': it was saved from a different model (check the model's configuration)");
    if (!src.sizes().equals(dst.sizes()))
      throw CheckpointMismatch(file + ": '" + name + "' has shape " + c10::str(src.sizes()) +
                               " but the model expects " + c10::str(dst.sizes()) +
                               " (check the model's configuration)");
    used.insert(name);
    copies.emplace_back(dst, src);
  };
  for (const auto& kv : module.named_parameters()) match(kv.key(), kv.value(), false);
  for (const auto& kv : module.named_buffers()) match(kv.key(), kv.value(), true);
  // The reverse: a tensor the module does not have means the file is of a larger model.
  std::vector<std::string> unused;
  for (const auto& key : a.keys())
    if (!used.count(key)) unused.push_back(key);
  if (!unused.empty())
    throw CheckpointMismatch(file + " holds " + std::to_string(unused.size()) + " tensor(s) this model does not have (" +
                             join(std::vector<std::string>(unused.begin(), unused.begin() + std::min<size_t>(3, unused.size()))) +
                             (unused.size() > 3 ? ", ..." : "") +
                             "): it was saved from a different model (check the model's configuration)");
  return copies;
}

void copy_model_tensors(torch::serialize::InputArchive& a, torch::nn::Module& module, const std::string& file) {
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : matched_model_tensors(a, module, file)) dst.copy_(src.to(dst.device()));
}

}  // namespace

CheckpointPart model_part(torch::nn::Module& module) {
  CheckpointPart p;
  p.name = "model";
  p.what = "model weights";
  p.save = [&module](torch::serialize::OutputArchive& a) {
    for (const auto& kv : module.named_parameters()) a.write(kv.key(), kv.value());
    for (const auto& kv : module.named_buffers()) a.write(kv.key(), kv.value(), true);
  };
  p.check = [&module](torch::serialize::InputArchive& a) { matched_model_tensors(a, module, "the checkpoint"); };
  p.load = [&module](torch::serialize::InputArchive& a) { copy_model_tensors(a, module, "the checkpoint"); };
  return p;
}

// ---- reading without a run -------------------------------------------------------------------

CheckpointSummary inspect_checkpoint(const std::string& path) {
  const CheckpointReader file(path);
  CheckpointSummary s;
  s.file_bytes = file.file_bytes();
  s.step = file.step();
  s.config_text = file.config_text();
  s.parts = file.parts();
  auto& data = file.part("data");
  at::Tensor cursor;  // [3]: seed, epoch, position
  data.read("cursor", cursor);
  s.cursor = DataCursor{static_cast<uint64_t>(cursor[0].item<int64_t>()), cursor[1].item<int64_t>(),
                        cursor[2].item<int64_t>()};
  auto& model = file.part("model");
  for (const auto& key : model.keys()) {
    at::Tensor t;
    if (model.try_read(key, t) || model.try_read(key, t, /*is_buffer=*/true)) {
      ++s.parameter_tensors;
      s.parameter_elements += t.numel();
    }
  }
  if (file.has("strategy")) {
    c10::IValue name;
    file.part("strategy").read("name", name);
    s.strategy = name.toStringRef();
  }
  s.has_average = file.has("average");
  return s;
}

void load_checkpoint_weights(const std::string& path, torch::nn::Module& module, bool prefer_average) {
  const CheckpointReader file(path);
  copy_model_tensors(file.part("model"), module, file.name());
  if (prefer_average && file.has("average"))
    WeightAverage::read_into(file.part("average"), module, file.name());
}

}  // namespace ht
