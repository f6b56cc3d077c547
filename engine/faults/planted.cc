#include "engine/faults/planted.h"

namespace zero3 {

const PlantedFault* planted_fault(Fault fault) {
  switch (fault) {
    case Fault::none:
      return nullptr;
#define ZERO3_PLANTED_CASE(id, name, invariant, killer, kill_text, doc) \
  case Fault::id:                                                       \
    return &planted::id();
      ZERO3_FAULTS(ZERO3_PLANTED_CASE)
      ZERO3_DEEP_FAULTS(ZERO3_PLANTED_CASE)
#undef ZERO3_PLANTED_CASE
  }
  return nullptr;
}

}  // namespace zero3
