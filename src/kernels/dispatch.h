// One table per kernel: the CPU kernel for float32, the one for bfloat16, and the ATen fallback
// that runs on CUDA or any other device. kernel_path() is the only place an op looks at devices.
#pragma once

#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace ht {

enum class KernelPath {
  CpuF32,    // float32 CPU tensors in a layout the CPU kernel reads
  CpuBF16,   // bfloat16 CPU tensors in a layout the CPU kernel reads
  Fallback,  // everything else: another device (CUDA), another dtype (double, half), a layout
             // the kernel cannot read; plain ATen ops, which autocast also sees on CUDA
};
const char* to_string(KernelPath path);

// The path for an op whose lead tensor is `lead` (the one whose dtype the result takes).
// layout_ok: the op's own test that the CPU kernel can read its operands (e.g. contiguous).
// The same from a device and the dtype the op computes in, for ops whose lead dtype is not an
// input's (e.g. a LayerNorm of an fp32 residual that writes bf16).
inline KernelPath kernel_path(const at::Device& device, at::ScalarType dtype, bool layout_ok = true) {
  if (!device.is_cpu() || !layout_ok) return KernelPath::Fallback;
  if (dtype == at::kFloat) return KernelPath::CpuF32;
  if (dtype == at::kBFloat16) return KernelPath::CpuBF16;
  return KernelPath::Fallback;
}
inline KernelPath kernel_path(const at::Tensor& lead, bool layout_ok = true) {
  return kernel_path(lead.device(), lead.scalar_type(), layout_ok);
}

// Records "op: what" once per process (ht::take_kernel_notes hands it out); thread-safe.
void note_kernel_once(const std::string& op, const std::string& what);

// A kernel's entries. cpu_bf16 may be empty when an op has no bf16 kernel: bf16 inputs then take
// the entry the op names in no_bf16 (its fp32 kernel on fp32 copies, or the ATen fallback), and
// note_kernel_once says so.
template <typename Fn>
struct KernelTable {
  const char* op;  // the op's name in notes and errors, e.g. "gelu_tanh"
  Fn cpu_f32;
  Fn cpu_bf16;
  Fn fallback;
  const char* no_bf16 = "";  // e.g. "no bf16 kernel; computed in fp32"

  const Fn& select(KernelPath path) const {
    switch (path) {
      case KernelPath::CpuF32:
        return cpu_f32;
      case KernelPath::CpuBF16:
        if (cpu_bf16) return cpu_bf16;
        note_kernel_once(op, no_bf16);
        return fallback;
      case KernelPath::Fallback:
        break;
    }
    return fallback;
  }

  template <typename... Args>
  decltype(auto) operator()(KernelPath path, Args&&... args) const {
    return select(path)(std::forward<Args>(args)...);
  }
};

}  // namespace ht
