// Faults a test injects into a real run, to drive the paths a healthy run never takes (skipping a
// step whose gradient is not finite, rolling back after several) through the real checks. The trainer
// takes them as an argument and reads no environment for them; the program fills them from
// $LLAMATRAIN_INJECT_NONFINITE (faults_from_environment), so the tests inject them into the binary as
// it ships, and a run without the variable has none.
#pragma once

#include <cstdint>
#include <set>
#include <string>

namespace llamatrain::train {

struct InjectedFaults {
  std::set<int64_t> nonfinite_once;  // these steps get a NaN gradient, each once (not again after a rollback)
  int64_t nonfinite_from = -1;       // every step from this one on, each time it runs (a run that keeps diverging)

  // Whether step `step`'s gradient is made non-finite now (a step of nonfinite_once fires once).
  bool nonfinite_at(int64_t step);
};

// "5,6,7": those steps once each; "N+": every step from N on; both may be listed ("3,9+").
InjectedFaults parse_injected_faults(const std::string& nonfinite_steps);

// From $LLAMATRAIN_INJECT_NONFINITE; none where it is unset.
InjectedFaults faults_from_environment();

}  // namespace llamatrain::train
