// The fused float32 AdamW update of a range of scalars, in place: make_adamw runs it per tensor,
// ZeRO-1 per shard segment, so both give the same bits (tests/dist checks it).
#pragma once

#include <cstdint>

namespace ht {

struct AdamWScalars {
  double lr, beta1, beta2, eps, wd, bc1, bc2;  // bc1, bc2: 1 - beta^t, Adam's bias corrections
};

// p, m, v change in place; n scalars each. Split over threads with a fixed grain, so the result
// depends only on n and the thread count.
void adamw_f32_range(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& k);

// One AdamW step of one tensor in place: the fused loop where the layout allows, ATen ops otherwise
// (AdamW's and Muon's non-matrix parameters).
void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamWScalars& k);

}  // namespace ht
