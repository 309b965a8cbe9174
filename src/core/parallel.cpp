// The single-process Collective and the host-value helpers every Collective shares: float64
// scalars travel as one small tensor, so a step's bookkeeping costs one message, not several.
#include "hybrid/core/parallel.h"

#include <torch/torch.h>

namespace ht {
namespace {

class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void allreduce_sum(std::vector<at::Tensor>&) override {}
  void allreduce_max(std::vector<at::Tensor>&) override {}
  void broadcast(std::vector<at::Tensor>&, int) override {}
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor) override { return {tensor.clone()}; }
  void barrier() override {}
};

}  // namespace

Collective& single_process() {
  static SingleProcess one;
  return one;
}

double Collective::mean(double value, double weight) {
  if (world_size() == 1) return value;
  std::vector<at::Tensor> t{torch::tensor({value * weight, weight}, torch::kFloat64)};
  allreduce_sum(t);
  const double w = t[0][1].item<double>();
  return w != 0.0 ? t[0][0].item<double>() / w : value;
}

double Collective::max(double value) {
  if (world_size() == 1) return value;
  std::vector<at::Tensor> t{torch::tensor({value}, torch::kFloat64)};
  allreduce_max(t);
  return t[0][0].item<double>();
}

bool Collective::any(bool flag) { return max(flag ? 1.0 : 0.0) > 0.0; }

double Collective::broadcast_value(double value, int root) {
  if (world_size() == 1) return value;
  std::vector<at::Tensor> t{torch::tensor({value}, torch::kFloat64)};
  broadcast(t, root);
  return t[0][0].item<double>();
}

}  // namespace ht
