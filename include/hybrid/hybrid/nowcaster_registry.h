// Every pretrained weight nowcaster in one place: its name (nowcast.model), its weights file, its
// loader and what it keeps between jumps. Adding one: a file that defines its spec, one line here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/hybrid/nowcast.h"

namespace ht {

struct NowcasterSpec {
  std::string name;          // "wnn", "nino", "own": NowcastStrategyOptions::model
  std::string help;          // one line for `config --keys`
  std::string weights_file;  // its weights, a path under models/ (e.g. "nino/nino_mlp.safetensors")
  // Loads the weights and builds the model for this parameter spec (NiNo: its neural graph and
  // Laplacian features, once). Throws NowcastError naming the problem.
  std::function<std::unique_ptr<NowcastModel>(const std::string& weights_path, NowcastSpec spec,
                                              const NowcastOptions& options)>
      load;
  // Tensor bytes the model keeps between jumps for parameters of these element counts (NiNo:
  // graph and features; WNN+: nothing that grows with the model), as the allocator counts them.
  std::function<int64_t(const std::vector<int64_t>& numels)> kept_bytes;
  // Workspace one prediction adds on top of everything live, for parameters of these element
  // counts in a model of this architecture ("feedforward" or "gpt2"): estimates from measured jumps.
  std::function<int64_t(const std::vector<int64_t>& numels, const NowcastOptions& options,
                        const std::string& architecture)>
      jump_bytes;
};

// In the order `config --keys` lists them: wnn, nino, own (WNN+ meta-trained on this project's
// runs by nowcast-meta, issue 21 item 2c).
const std::vector<NowcasterSpec>& nowcaster_registry();
// The spec of that name; OptionsError listing the names otherwise.
const NowcasterSpec& find_nowcaster(const std::string& name);

}  // namespace ht
