// Private to the dist layer: what DataParallel asks of an optimizer whose state is sharded, so
// that a checkpoint written by rank 0 holds every rank's share.
#pragma once

namespace ht::dist {

class ShardedOptimizerState {
 public:
  virtual ~ShardedOptimizerState() = default;
  // On every rank (a collective): rank 0 then holds the whole state until release.
  virtual void gather_state() = 0;
  virtual void release_gathered_state() = 0;
};

}  // namespace ht::dist
