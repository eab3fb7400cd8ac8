// kiln show MODEL: the imported graph as text, shapes inferred; with
// --optimize, the graph after shape specialization and the pass pipeline.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_file.h"
#include "cli/pass_flags.h"
#include "passes/pass.h"

namespace kiln::cli {

namespace {

struct ShowOptions {
  ModelRef model;
  std::vector<std::string> dims;
  bool optimize = false;
  PassFlags pass_flags;
};

Status show(const ShowOptions& opt) {
  if (auto weights = describe_weights_file(opt.model.path)) {
    if (!weights->ok()) return weights->status();
    fmt::print("{}", weights->value());
    return ok_status();
  }
  // A checkpoint: a summary, unless a network's graph is asked for.
  if (auto checkpoint = opt.model.component.empty() ? describe_checkpoint(opt.model) : std::nullopt) {
    if (!checkpoint->ok()) return checkpoint->status();
    fmt::print("{}", checkpoint->value());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(auto dims, parse_dims(opt.dims));
  ModelRef model = opt.model;
  model.sizes = dims;
  KILN_ASSIGN_OR_RETURN(Graph g, load_model(model));
  dims = input_dims_of(model, dims);
  if (!dims.empty()) {
    if (Status s = specialize_shapes(g, dims); !s.ok()) return s.with_context(opt.model.label());
  }
  if (opt.optimize) {
    KILN_ASSIGN_OR_RETURN(PassOptions options, pass_options(opt.pass_flags));
    PassStats stats;
    size_t before = g.nodes().size();
    if (Status s = run_passes(g, options, &stats); !s.ok()) return s.with_context(opt.model.label());
    fmt::print("# {} nodes -> {}", before, g.nodes().size());
    for (const auto& [pass, count] : stats.counts) fmt::print(", {} {}", pass, count);
    fmt::print("\n");
  }
  fmt::print("{}", graph_to_string(g));
  return ok_status();
}

}  // namespace

Handler add_show_command(CLI::App& app) {
  auto opt = std::make_shared<ShowOptions>();
  CLI::App* cmd = app.add_subcommand("show", "Print a model's graph: inputs, nodes with inferred shapes, outputs");
  add_model_flags(cmd, opt->model,
                  "an ONNX file, a model folder or checkpoint (a summary; --component NAME for a network's graph), "
                  "or a .safetensors/.npy file to list its tensors");
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: fix a symbolic dimension (shapes are re-inferred)");
  cmd->add_flag("--optimize", opt->optimize, "show the graph after the pass pipeline (give every symbolic dim with --dim)");
  add_pass_flags(cmd, opt->pass_flags);
  return [opt]() { return show(*opt); };
}

}  // namespace kiln::cli
