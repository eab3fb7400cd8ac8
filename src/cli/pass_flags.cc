#include "cli/pass_flags.h"

namespace kiln::cli {

void add_pass_flags(CLI::App* cmd, PassFlags& flags) {
  cmd->add_option("--fusion-switch", flags.fusion_switch, "JSON file {\"pass\": true|false} turning passes off");
  cmd->add_option("--precision", flags.precision,
                  "f32 | bf16: bf16 computes matmuls, convolutions and attention in bf16 with f32 accumulation "
                  "(everything else, and every tensor, stays f32)")
      ->default_val("f32");
  cmd->add_option("--precision-policy", flags.precision_policy,
                  "JSON file overriding the precision per op or node: {\"default\": \"bf16\", \"ops\": "
                  "{\"Conv\": \"f32\"}, \"nodes\": {\"/blocks.0\": \"f32\"}}");
}

Result<PassOptions> pass_options(const PassFlags& flags) {
  PassOptions options;
  if (!flags.fusion_switch.empty()) { KILN_ASSIGN_OR_RETURN(options, pass_options_from_json(flags.fusion_switch)); }
  auto policy = precision_policy(flags.precision, flags.precision_policy);
  if (!policy.ok() && flags.precision_policy.empty()) return policy.status().with_context("--precision");
  if (!policy.ok()) return policy.status();  // its messages name the file
  options.precision = *std::move(policy);
  return options;
}

// generate and serve --mode: graph-loop is graph mode with the whole loop as one plan.
Status parse_generate_mode(const std::string& name, ExecutionMode& mode, bool& whole_loop) {
  whole_loop = name == "graph-loop";
  if (whole_loop) return ok_status();
  auto parsed = parse_execution_mode(name);
  if (!parsed.ok()) return invalid_argument("unknown mode '{}' (modes: eager, graph, graph-loop, auto)", name);
  mode = *parsed;
  return ok_status();
}

}  // namespace kiln::cli
