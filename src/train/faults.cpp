#include "train/faults.h"

#include <cstdlib>
#include <sstream>

namespace llamatrain::train {

bool InjectedFaults::nonfinite_at(int64_t step) {
  return nonfinite_once.erase(step) > 0 || (nonfinite_from >= 0 && step >= nonfinite_from);
}

InjectedFaults parse_injected_faults(const std::string& nonfinite_steps) {
  InjectedFaults r;
  std::stringstream ss(nonfinite_steps);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty() && item.back() == '+')
      r.nonfinite_from = std::strtoll(item.c_str(), nullptr, 10);
    else if (!item.empty())
      r.nonfinite_once.insert(std::strtoll(item.c_str(), nullptr, 10));
  return r;
}

InjectedFaults faults_from_environment() {
  const char* env = std::getenv("LLAMATRAIN_INJECT_NONFINITE");
  return env ? parse_injected_faults(env) : InjectedFaults{};
}

}  // namespace llamatrain::train
