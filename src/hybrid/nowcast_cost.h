// What a nowcaster's prediction costs before the run has made one: timed once on a synthetic
// 128 x 128 linear layer, per predicted scalar (WNN+ costs per scalar, NiNo per edge ~ scalar).
#pragma once

#include "hybrid/hybrid/nowcast_strategy.h"

namespace ht {

// Milliseconds per predicted scalar: the faster of two predictions of a 128 x 128 layer and its
// bias (16,512 scalars) with the nowcaster `factory` builds for that layer.
double nowcaster_ms_per_scalar(const NowcasterFactory& factory);

}  // namespace ht
