// The flags every command that compiles a model shares: which passes run
// (--fusion-switch) and the mixed-precision policy (--precision,
// --precision-policy), turned into PassOptions; and the --mode of the
// commands that generate.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "passes/pass.h"
#include "runtime/model_runner.h"

namespace kiln::cli {

struct PassFlags {
  std::string fusion_switch;
  std::string precision = "f32";
  std::string precision_policy;
};

void add_pass_flags(CLI::App* cmd, PassFlags& flags);
Result<PassOptions> pass_options(const PassFlags& flags);

// The --mode of commands that generate: eager | graph | graph-loop | auto,
// where graph-loop is graph mode with the whole denoise loop as one plan.
Status parse_generate_mode(const std::string& name, ExecutionMode& mode, bool& whole_loop);

}  // namespace kiln::cli
