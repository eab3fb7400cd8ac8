// kiln compile MODEL -o FILE.kplan: the offline-compile path. Fixes the
// input shapes, runs the passes, plans the arena and writes it all to a file
// that `kiln run FILE.kplan` loads without compiling again.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/model_file.h"
#include "cli/pass_flags.h"
#include "cli/plan_files.h"

namespace kiln::cli {

namespace {

struct CompileOptions {
  ModelRef model;
  std::vector<std::string> dims;
  PassFlags pass_flags;
  std::string output;
};

Status compile(const CompileOptions& opt) {
  KILN_ASSIGN_OR_RETURN(auto dims, parse_dims(opt.dims));
  KILN_ASSIGN_OR_RETURN(PassOptions passes, pass_options(opt.pass_flags));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                        compile_to_file(opt.model, dims, passes, opt.output));
  const PlanStats& st = plan->stats();
  fmt::print("{}: {} nodes, {} steps, arena {:.2f} MiB, compiled in {:.0f} ms\n", opt.model.label(), st.nodes, st.steps,
             double(st.arena_bytes) / (1 << 20), st.compile_ms);
  std::string fusions;
  for (const auto& [pass, count] : st.passes.counts)
    if (count && pass.starts_with("fuse_")) fusions += fmt::format("{}{} {}", fusions.empty() ? "" : ", ", pass, count);
  if (!fusions.empty()) fmt::print("fusions: {}\n", fusions);
  if (auto bf16 = st.passes.counts.find("assign_precision"); bf16 != st.passes.counts.end())
    fmt::print("precision: bf16 products in {} nodes, f32 elsewhere\n", bf16->second);
  fmt::print("written to {} ({:.2f} MiB)\n", opt.output, double(std::filesystem::file_size(opt.output)) / (1 << 20));
  return ok_status();
}

}  // namespace

Handler add_compile_command(CLI::App& app) {
  auto opt = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile a model for fixed input shapes into a .kplan file");
  add_model_flags(cmd, opt->model, "an ONNX file, or a model folder or checkpoint");
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: size of a symbolic dimension (each one needs a size)");
  add_pass_flags(cmd, opt->pass_flags);
  cmd->add_option("--output,-o", opt->output, "the .kplan file to write")->required();
  return [opt]() { return compile(*opt); };
}

}  // namespace kiln::cli
