// The end-of-run summary of the hybrid strategy as one line for the logger.
#include <sstream>

#include "hybrid/hybrid/strategy.h"

namespace ht {

std::string HybridSummary::to_string() const {
  std::ostringstream os;
  os.precision(3);
  os << "hybrid summary (" << predictor << "): " << steps << " steps, " << 100.0 * share_predicted()
     << "% predicted (" << predicted_kept << " of " << predicted_applied << " predicted updates kept, "
     << predicted_undone << " undone), " << recorded_steps << " recorded steps, "
     << "acceptance " << 100.0 * acceptance_rate() << "% of " << verifications << " verifications, "
     << rollbacks << " rollbacks, " << phases_predict << " predict phases, " << verify_forwards
     << " verification forwards; ms warmup/full/predict/correct " << ms_by_phase[0] << "/"
     << ms_by_phase[1] << "/" << ms_by_phase[2] << "/" << ms_by_phase[3] << "; step ms plain "
     << plain_step_ms << ", recorded " << recorded_step_ms << "; estimated time saved "
     << estimated_saved_ms << " ms; snapshot " << snapshot_bytes << " B (copied "
     << snapshot_bytes_copied << " B), buffers " << buffer_bytes << " B, predictor "
     << predictor_bytes << " B; final confidence " << final_confidence << ", horizon " << final_horizon;
  return os.str();
}

}  // namespace ht
