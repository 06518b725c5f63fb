// Precision and recompute mode names (model/modes.h): the names users give them, and back.
#include "model/modes.h"

#include "core/error.h"

namespace llamatrain::model {

Precision parse_precision(const std::string& name) {
  if (name == "fp32" || name == "32") return Precision::fp32;
  if (name == "bf16-mixed" || name == "bf16_mixed") return Precision::bf16_mixed;
  if (name == "bf16-sr" || name == "bf16_sr" || name == "bf16") return Precision::bf16_sr;
  fail("precision: got '{}', expected one of fp32, bf16-mixed, bf16-sr", name);
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16_mixed: return "bf16-mixed";
    case Precision::bf16_sr: return "bf16-sr";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none" || name == "null" || name.empty()) return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  fail("activation recomputation: got '{}', expected one of none, selective, full", name);
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

}  // namespace llamatrain::model
