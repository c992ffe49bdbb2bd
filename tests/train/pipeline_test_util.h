// Shared by the pipeline tests: readable names and printing of a ScheduleSpec.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>

#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

// gtest prints a failing parameter with this.
inline void PrintTo(const ScheduleSpec& s, std::ostream* os) {
  *os << to_string(s.kind) << " p " << s.stages << " m " << s.micro_batches << " v "
      << s.virtual_stages;
}

// "1f1b_p4_m8", "interleaved_p4_m8_v2": a test name.
inline std::string test_name(const ScheduleSpec& s) {
  std::string n = to_string(s.kind);
  std::replace(n.begin(), n.end(), '-', '_');
  n += "_p" + std::to_string(s.stages) + "_m" + std::to_string(s.micro_batches);
  if (s.kind == ScheduleKind::kInterleaved) n += "_v" + std::to_string(s.virtual_stages);
  return n;
}

}  // namespace dtsim::train::pipeline
