#include "cli/plan_files.h"

#include <fmt/format.h>

#include "cli/model_file.h"

namespace kiln::cli {

Result<std::unique_ptr<Plan>> compile_to_file(const ModelRef& model, const std::map<std::string, int64_t>& dims,
                                              const PassOptions& passes, const std::string& out) {
  ModelRef sized = model;
  sized.sizes = dims;
  KILN_ASSIGN_OR_RETURN(Graph graph, load_model(sized));
  auto compiled =
      Plan::compile(std::move(graph), {.dims = input_dims_of(model, dims), .passes = passes, .keep_constants = true});
  if (!compiled.ok()) return compiled.status().with_context(model.label());
  std::unique_ptr<Plan> plan = std::move(compiled).value();
  KILN_ASSIGN_OR_RETURN(PlanKey key, plan_key_for(model.path, plan->signature(), dims));
  key.model_component = model.component;
  key.model_variant = model.variant;
  set_key_passes(key, passes);
  KILN_RETURN_IF_ERROR(write_plan_file(out, *plan, key));
  return plan;
}

Result<std::unique_ptr<Plan>> load_plan_file(const std::string& path) {
  auto recompile = [](const PlanKey& key) -> Result<std::unique_ptr<Plan>> {
    KILN_ASSIGN_OR_RETURN(Graph graph, load_model({key.model_path, key.model_component, key.model_variant, key.dims}));
    KILN_ASSIGN_OR_RETURN(PassOptions passes, key_passes(key));  // as it was compiled
    const ModelRef model{key.model_path, key.model_component, key.model_variant, key.dims};
    return Plan::compile(std::move(graph), {.dims = input_dims_of(model, key.dims), .passes = passes, .keep_constants = true});
  };
  return kiln::load_plan_file(path, recompile, [](const std::string& line) { fmt::print(stderr, "kiln: note: {}\n", line); });
}

}  // namespace kiln::cli
