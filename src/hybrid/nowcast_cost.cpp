// What a nowcaster's prediction costs before the run has made one (see nowcast_cost.h): the
// delayed verification's budget charges a jump's prediction before deciding to make it.
#include "nowcast_cost.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "hybrid/hybrid/nowcast.h"

namespace ht {

double nowcaster_ms_per_scalar(const NowcasterFactory& factory) {
  const NamedShapes layer = {{"0.weight", {128, 128}}, {"0.bias", {128}}};
  const std::unique_ptr<NowcastModel> model = factory(nowcast_spec_feedforward(layer));
  at::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(5);
  std::vector<std::vector<at::Tensor>> states(layer.size());
  std::vector<at::Tensor> out;
  int64_t scalars = 0;
  for (size_t i = 0; i < layer.size(); ++i) {
    for (int t = 0; t < kNowcastContext; ++t) states[i].push_back(at::randn(layer[i].second, gen));
    out.push_back(at::empty(layer[i].second));
    scalars += out.back().numel();
  }
  double best = 1e300;
  for (int r = 0; r < 2; ++r) {  // the first pays for allocation and caches
    const auto t0 = std::chrono::steady_clock::now();
    model->predict(states, 1, out);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / static_cast<double>(scalars);
}

}  // namespace ht
