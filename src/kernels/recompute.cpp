// Activation recompute as a custom autograd Function whose backward re-enters the autograd engine,
// as PyTorch's reentrant torch.utils.checkpoint does; plus the recompute level and policy.
#include "hybrid/kernels/recompute.h"

#include <stdexcept>
#include <utility>

#include <torch/torch.h>

#include "core/cpu_random_state.h"

namespace ht {
namespace {

// Puts the CPU generator back to `replay` for the life of the guard, then restores whatever state
// it had before, so the re-run neither sees different random numbers nor consumes any.
class RngReplay {
 public:
  explicit RngReplay(const at::Tensor& replay) : saved_(cpu_random_state()) {
    set_cpu_random_state(replay);
  }
  ~RngReplay() { set_cpu_random_state(saved_); }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  at::Tensor saved_;
};

// What backward needs besides the input tensor; held by the autograd context as a capsule.
struct RecomputeState : torch::CustomClassHolder {
  RecomputeFn fn;
  at::Tensor rng_state;  // CPU generator state when forward ran
  int64_t num_params = 0;
};

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  // params are inputs only so that the output requires grad when they do; their gradients are
  // accumulated by the inner backward, not returned.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            at::TensorList params, c10::intrusive_ptr<RecomputeState> state) {
    state->rng_state = cpu_random_state();
    state->num_params = static_cast<int64_t>(params.size());
    ctx->save_for_backward({input});
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return state->fn(input);  // grad mode is off inside Function::forward: nothing is saved
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto state =
        c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    const at::Tensor input = ctx->get_saved_variables()[0];
    at::Tensor x = input.detach();
    x.requires_grad_(input.requires_grad());
    at::Tensor out;
    {
      RngReplay replay(state->rng_state);
      torch::AutoGradMode grad_on(true);
      out = state->fn(x);
    }
    // Re-entrant backward: accumulates into x.grad() and into every parameter fn used.
    if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    torch::autograd::variable_list result(2 + state->num_params);  // input, params..., state
    result[0] = x.grad();
    return result;
  }
};

bool any_requires_grad(const at::Tensor& input, const std::vector<at::Tensor>& params) {
  if (input.requires_grad()) return true;
  for (const auto& p : params)
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace

at::Tensor recompute(RecomputeFn fn, const at::Tensor& input) {
  return recompute(std::move(fn), input, {});
}

at::Tensor recompute(RecomputeFn fn, const at::Tensor& input,
                     const std::vector<at::Tensor>& params) {
  if (!fn) throw std::invalid_argument("recompute: fn is empty");
  // No backward can reach the region: run it plainly (no graph without grad mode, and with an
  // input and params that need no grad the result is the same as the plain call).
  if (!at::GradMode::is_enabled() || !any_requires_grad(input, params)) return fn(input);
  auto state = c10::make_intrusive<RecomputeState>();
  state->fn = std::move(fn);
  return RecomputeFunction::apply(input, at::TensorList(params), state);
}

at::Tensor recompute_gelu_linear(const at::Tensor& x, const at::Tensor& weight,
                                 const at::Tensor& bias) {
  std::vector<at::Tensor> params{weight};
  if (bias.defined()) params.push_back(bias);
  return recompute(
      [weight, bias](const at::Tensor& h) {
        return at::linear(at::gelu(h, "tanh"), weight, bias);  // [.., out]
      },
      x, params);
}

RecomputeLevel parse_recompute_level(const std::string& name) {
  if (name == "none" || name == "0") return RecomputeLevel::None;
  if (name == "selective" || name == "1") return RecomputeLevel::Selective;
  if (name == "full" || name == "2") return RecomputeLevel::Full;
  throw std::invalid_argument("unknown recompute level '" + name +
                              "': expected none, selective or full (or 0, 1, 2)");
}

std::string to_string(RecomputeLevel level) {
  switch (level) {
    case RecomputeLevel::None:
      return "none";
    case RecomputeLevel::Selective:
      return "selective";
    case RecomputeLevel::Full:
      return "full";
  }
  return "unknown";
}

void RecomputePolicy::validate() const {
  if (every_n_layers < 1)
    throw std::invalid_argument("recompute every_n_layers must be >= 1, got " +
                                std::to_string(every_n_layers));
}

bool RecomputePolicy::recompute_block(int layer) const {
  return level == RecomputeLevel::Full && every_n_layers >= 1 && layer % every_n_layers == 0;
}

bool RecomputePolicy::recompute_gelu(int /*layer*/) const { return level == RecomputeLevel::Selective; }

}  // namespace ht
