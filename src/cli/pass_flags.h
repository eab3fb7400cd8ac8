// The flags every command that compiles a model shares: which passes run
// (--fusion-switch) and the mixed-precision policy (--precision,
// --precision-policy), turned into PassOptions.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "passes/pass.h"

namespace kiln::cli {

struct PassFlags {
  std::string fusion_switch;
  std::string precision = "f32";
  std::string precision_policy;
};

void add_pass_flags(CLI::App* cmd, PassFlags& flags);
Result<PassOptions> pass_options(const PassFlags& flags);

}  // namespace kiln::cli
