// Compute precision of a model (fp32, or bf16 with fp32 master weights), the CPU's bf16 features
// detected at run time, and the notes kernels leave when they fall back (the library never prints).
#pragma once

#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

namespace ht {

// FP32: everything in float32. BF16: matmuls, attention, GELU and the LM head compute in bfloat16
// with fp32 accumulation; LayerNorm statistics, softmax, the loss, gradient norms and the
// optimizer stay fp32; parameters (master weights), gradients and optimizer state are fp32.
enum class Precision { FP32, BF16 };
Precision parse_precision(const std::string& name);  // "fp32" | "bf16"; std::invalid_argument
std::string to_string(Precision precision);
c10::ScalarType compute_dtype(Precision precision);  // kFloat or kBFloat16

// What this CPU offers for bf16, read from cpuid (and the OS's XSAVE state) at run time.
struct CpuBf16Features {
  bool avx512_bf16 = false;  // VDPBF16PS: bf16 dot products (AMD Zen 4, Intel Cooper Lake on)
  bool amx_bf16 = false;     // AMX tiles with bf16 (Intel Sapphire Rapids on)
  std::string model;         // the brand string, e.g. "AMD EPYC 9R14 96-Core Processor"
  bool any() const { return avx512_bf16 || amx_bf16; }
  std::string describe() const;  // "AMD EPYC ...: avx512_bf16 yes, amx_bf16 no"
};
const CpuBf16Features& cpu_bf16_features();
// The CPU has bf16 instructions and oneDNN may use them (ONEDNN_MAX_CPU_ISA, if set, is
// AVX512_CORE_BF16, AVX512_CORE_AMX or ALL). Without them bf16 GEMMs run on widened fp32 operands:
// bf16 still halves activation memory but is no faster than fp32.
bool bf16_instructions_in_use();
// The CPU has AMX-BF16 and oneDNN may use it (ONEDNN_MAX_CPU_ISA unset, ALL or AVX512_CORE_AMX).
bool amx_in_use();

// Kernels record here, once per (op, reason), that they ran another way than asked: e.g. an op
// without a bf16 kernel that computed in fp32. take_kernel_notes() returns the notes recorded since
// the last call (an application prints them; tests inspect them).
std::vector<std::string> take_kernel_notes();

}  // namespace ht
