// Precision names, bf16 CPU feature detection (cpuid + XGETBV, no /proc parsing), the kernel
// notes registry and the dispatch paths' names.
#include "hybrid/kernels/precision.h"

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

#include "kernels/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ht {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  throw std::invalid_argument("unknown precision '" + name + "': expected fp32 or bf16");
}

std::string to_string(Precision precision) {
  return precision == Precision::BF16 ? "bf16" : "fp32";
}

c10::ScalarType compute_dtype(Precision precision) {
  return precision == Precision::BF16 ? c10::kBFloat16 : c10::kFloat;
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0: which register states the OS saves. AVX-512 needs opmask, ZMM_Hi256 and Hi16_ZMM (bits
// 5-7) with SSE/AVX (1-2); AMX needs XTILECFG and XTILEDATA (17-18). A CPU flag without the OS
// state is unusable (the instruction faults), so both are checked.
uint64_t xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuBf16Features detect() {
  CpuBf16Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &a, &b, &c, &d);
      const unsigned regs[4] = {a, b, c, d};
      for (int r = 0; r < 4; ++r)
        for (int k = 0; k < 4; ++k) brand[16 * i + 4 * r + k] = static_cast<char>(regs[r] >> (8 * k));
    }
    f.model = brand;
    const auto first = f.model.find_first_not_of(' ');
    f.model = first == std::string::npos ? "" : f.model.substr(first);
    while (!f.model.empty() && f.model.back() == ' ') f.model.pop_back();
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c >> 27) & 1;
  if (!osxsave) return f;
  const uint64_t xcr = xcr0();
  const bool avx512_state = (xcr & 0xE6) == 0xE6;
  const bool amx_state = ((xcr >> 17) & 3) == 3;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx512f = (b >> 16) & 1;
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx512_bf16 = (a >> 5) & 1;
  f.avx512_bf16 = avx512_state && avx512f && avx512_bf16;
  f.amx_bf16 = amx_state && amx_tile && amx_bf16;
  return f;
}
#else
CpuBf16Features detect() { return {}; }
#endif

std::mutex& notes_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& noted() {
  static std::set<std::string> s;
  return s;
}
std::vector<std::string>& pending() {
  static std::vector<std::string> v;
  return v;
}

}  // namespace

std::string CpuBf16Features::describe() const {
  return (model.empty() ? std::string("unknown CPU") : model) +
         ": avx512_bf16 " + (avx512_bf16 ? "yes" : "no") + ", amx_bf16 " + (amx_bf16 ? "yes" : "no");
}

const CpuBf16Features& cpu_bf16_features() {
  static const CpuBf16Features f = detect();
  return f;
}

namespace {
// oneDNN's ISA cap from the environment, upper-cased; empty when none is set.
std::string onednn_max_isa() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* env = std::getenv(name);
    if (!env || !*env) continue;
    std::string isa(env);
    for (char& ch : isa) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return isa;
  }
  return "";
}
}  // namespace

bool bf16_instructions_in_use() {
  if (!cpu_bf16_features().any()) return false;
  const std::string isa = onednn_max_isa();
  return isa.empty() || isa == "ALL" || isa == "AVX512_CORE_BF16" || isa == "AVX512_CORE_AMX" ||
         isa == "AVX512_CORE_FP16";
}

bool amx_in_use() {
  if (!cpu_bf16_features().amx_bf16) return false;
  const std::string isa = onednn_max_isa();
  return isa.empty() || isa == "ALL" || isa == "AVX512_CORE_AMX";
}

void note_kernel_once(const std::string& op, const std::string& what) {
  std::string note = op + ": " + what;
  std::lock_guard<std::mutex> lock(notes_mutex());
  if (noted().insert(note).second) pending().push_back(std::move(note));
}

std::vector<std::string> take_kernel_notes() {
  std::lock_guard<std::mutex> lock(notes_mutex());
  return std::exchange(pending(), {});
}

const char* to_string(KernelPath path) {
  switch (path) {
    case KernelPath::CpuF32:
      return "cpu-f32";
    case KernelPath::CpuBF16:
      return "cpu-bf16";
    case KernelPath::Fallback:
      return "fallback";
  }
  return "unknown";
}

}  // namespace ht
