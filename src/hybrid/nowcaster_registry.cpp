// The list of pretrained nowcasters: each is defined beside its model and registered here, once.
// The nowcast strategy, the CLI's nowcast.model values, `config --keys` and the planner read it.
#include "hybrid/hybrid/nowcaster_registry.h"

#include "hybrid/core/errors.h"

namespace ht {

// Adding a nowcaster: its file defines <name>_nowcaster_spec(); one line here declares and lists it.
NowcasterSpec wnn_nowcaster_spec();   // nowcast/wnn_plus.cpp
NowcasterSpec nino_nowcaster_spec();  // nowcast/nino.cpp
NowcasterSpec own_nowcaster_spec();   // nowcast/wnn_plus.cpp: WNN+ with our meta-trained weights
NowcasterSpec own_gpt_nowcaster_spec();  // nowcast/wnn_plus.cpp: the same, meta-trained on GPTs only
NowcasterSpec own_gpt_loss_nowcaster_spec();  // nowcast/wnn_plus.cpp: own-gpt tuned through the task loss
NowcasterSpec own_words_nowcaster_spec();  // nowcast/wnn_plus.cpp: the same, meta-trained on word-level GPTs
NowcasterSpec wnn_tuned_nowcaster_spec();  // nowcast/wnn_plus.cpp: WNN+ tuned through the loss after a jump

const std::vector<NowcasterSpec>& nowcaster_registry() {
  static const std::vector<NowcasterSpec> all = {wnn_nowcaster_spec(), nino_nowcaster_spec(),
                                                 own_nowcaster_spec(), own_gpt_nowcaster_spec(),
                                                 own_gpt_loss_nowcaster_spec(), own_words_nowcaster_spec(),
                                                 wnn_tuned_nowcaster_spec()};
  return all;
}

const NowcasterSpec& find_nowcaster(const std::string& name) {
  std::string names;
  for (const auto& spec : nowcaster_registry()) {
    if (spec.name == name) return spec;
    names += (names.empty() ? "\"" : ", \"") + spec.name + "\"";
  }
  throw OptionsError("NowcastStrategyOptions.model = \"" + name + "\": must be one of " + names);
}

}  // namespace ht
