// The bodies of the planted faults: one accessor per row of ZERO3_FAULTS and ZERO3_DEEP_FAULTS,
// named by the row's identifier (planted::shard_offset_off_by_one()). Each is defined beside its
// fault's effect, in this folder's files by the part of the engine they reach into; a row with
// no body fails the link.
#pragma once

#include "engine/fault_seams.h"

namespace zero3::planted {

#define ZERO3_PLANTED_ACCESSOR(id, name, invariant, killer, kill_text, doc) const PlantedFault& id();
ZERO3_FAULTS(ZERO3_PLANTED_ACCESSOR)
ZERO3_DEEP_FAULTS(ZERO3_PLANTED_ACCESSOR)
#undef ZERO3_PLANTED_ACCESSOR

}  // namespace zero3::planted
