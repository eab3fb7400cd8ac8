// The one place that decides which passes run, and in what order.
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "passes/pass.h"

namespace kiln {

namespace {
constexpr PassInfo kPipeline[] = {
    {"fold_constants", fold_constants},
    {"eliminate_common_subexpressions", eliminate_common_subexpressions},
    {"fold_constants_after_cse", fold_constants},
    {"fuse_layer_norm", fuse_layer_norm},
    {"fuse_adaln", fuse_adaln},  // after fuse_layer_norm, whose LayerNorms it extends
    {"fuse_gelu", fuse_gelu},
    {"fuse_geglu", fuse_geglu},  // after fuse_gelu, whose kiln.Gelu it matches
    {"fuse_silu", fuse_silu},  // after fuse_gelu, which claims x sigmoid(1.702 x)
    {"fuse_group_norm", fuse_group_norm},  // after fuse_silu, whose SiLUs it absorbs
    {"fuse_attention", fuse_attention},
    {"fuse_linear", fuse_linear},  // after the activation fusions, whose ops it absorbs
    {"fuse_conv", fuse_conv},
    {"winograd_conv", winograd_conv},  // after fuse_conv, so kiln.Conv nodes are marked too
    {"eliminate_dead_code", eliminate_dead_code},
    // After assign_precision (run_passes): it merges only projections computed in the same dtype.
    {"fuse_qkv", fuse_qkv, /*after_precision=*/true},
};
}  // namespace

std::span<const PassInfo> pass_pipeline() { return kPipeline; }

Result<PassOptions> pass_options_from_json(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return invalid_argument("{}: a fusion switch file is a JSON object {{\"pass\": true|false}}", path);
  PassOptions options;
  for (const auto& [name, on] : json.items()) {
    bool known = false;
    for (const PassInfo& p : kPipeline) known |= name == p.name;
    if (!known) return invalid_argument("{}: unknown pass '{}'", path, name);
    if (!on.is_boolean()) return invalid_argument("{}: pass '{}' must be true or false", path, name);
    if (!on.get<bool>()) options.disabled.insert(name);
  }
  return options;
}

Status run_passes(Graph& graph, const PassOptions& options, PassStats* stats) {
  auto run = [&](bool after_precision) -> Status {
    for (const PassInfo& p : kPipeline) {
      if (p.after_precision != after_precision || options.disabled.count(p.name)) continue;
      if (Status s = p.fn(graph, stats); !s.ok()) return s.with_context(p.name);
    }
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(run(false));
  KILN_RETURN_IF_ERROR(assign_precision(graph, options.precision, stats));
  KILN_RETURN_IF_ERROR(run(true));
  graph.compact();
  if (Status s = graph_verify(graph); !s.ok()) return internal_error("after passes: {}", s.message());
  return ok_status();
}

}  // namespace kiln
