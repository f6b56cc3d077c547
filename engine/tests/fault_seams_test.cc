// The fault seams: the reference engine has no fault behind them, each catalogue fault has its
// own body, and a seam reaches the body of the fault it was built for and no other.
#include "engine/fault_seams.h"
#include "engine/partitioner.h"

#include <gtest/gtest.h>

#include <set>

namespace zero3 {
namespace {

TEST(FaultSeams, TheReferenceEngineHasNoFaultBehindThem) {
  EXPECT_EQ(planted_fault(Fault::none), nullptr);
  const FaultSeams reference(Fault::none);
  ManagedParam p;
  int divisor = 3;
  reference.gradient_divisor(p, 3, divisor);
  EXPECT_EQ(divisor, 3);
  std::string tag = "step-7";
  reference.tag_to_load(tag);
  EXPECT_EQ(tag, "step-7");
  EXPECT_FALSE(reference.keeps_gathered_after_forward());
  EXPECT_FALSE(reference.skips_registry_claim());
}

TEST(FaultSeams, EveryCatalogueFaultHasItsOwnBody) {
  std::set<const PlantedFault*> bodies;
  for (const auto& info : fault_catalogue()) {
    const PlantedFault* body = planted_fault(info.fault);
    EXPECT_NE(body, nullptr) << info.name;
    EXPECT_TRUE(bodies.insert(body).second) << info.name << " shares its body with another fault";
  }
}

TEST(FaultSeams, ASeamReachesOnlyTheFaultItWasBuiltFor) {
  ManagedParam p;
  int divisor = 2;
  FaultSeams(Fault::wrong_gradient_divisor).gradient_divisor(p, 2, divisor);
  EXPECT_EQ(divisor, 3);
  divisor = 2;
  FaultSeams(Fault::load_ignores_tag).gradient_divisor(p, 2, divisor);
  EXPECT_EQ(divisor, 2);
  std::string tag = "step-7";
  FaultSeams(Fault::load_ignores_tag).tag_to_load(tag);
  EXPECT_EQ(tag, "");
  EXPECT_TRUE(FaultSeams(Fault::skip_release_after_forward).keeps_gathered_after_forward());
  EXPECT_TRUE(FaultSeams(Fault::legacy_0_15_4).skips_registry_claim());
}

}  // namespace
}  // namespace zero3
