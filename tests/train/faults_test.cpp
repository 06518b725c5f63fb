// train/faults: the injected faults a test hands a run, read as $LLAMATRAIN_INJECT_NONFINITE writes them.
#include "train/faults.h"

#include <gtest/gtest.h>

namespace llamatrain::train {
namespace {

TEST(InjectedFaults, ListedStepsFireOnceAndAnOpenRangeFiresEachTime) {
  InjectedFaults f = parse_injected_faults("3,5,9+");
  EXPECT_FALSE(f.nonfinite_at(2));
  EXPECT_TRUE(f.nonfinite_at(3));
  EXPECT_FALSE(f.nonfinite_at(3)) << "a listed step fires once, not again after a rollback";
  EXPECT_TRUE(f.nonfinite_at(5));
  EXPECT_FALSE(f.nonfinite_at(8));
  EXPECT_TRUE(f.nonfinite_at(9));
  EXPECT_TRUE(f.nonfinite_at(9)) << "N+: every time the step runs";
  EXPECT_TRUE(f.nonfinite_at(12));
}

TEST(InjectedFaults, NoneWhereNothingIsListed) {
  for (const char* text : {"", ",", ",,"}) {
    InjectedFaults f = parse_injected_faults(text);
    for (int64_t step = 0; step < 20; step++) EXPECT_FALSE(f.nonfinite_at(step)) << text;
  }
  InjectedFaults none;
  EXPECT_FALSE(none.nonfinite_at(1));
}

}  // namespace
}  // namespace llamatrain::train
