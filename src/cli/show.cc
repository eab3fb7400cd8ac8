// kiln show MODEL: the imported graph as text, shapes inferred.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_file.h"

namespace kiln::cli {

Handler add_show_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("show", "Print a model's graph: inputs, nodes with inferred shapes, outputs");
  cmd->add_option("MODEL", *model, "ONNX model (.onnx), or a .safetensors/.npy file to list its tensors")->required();
  return [model]() -> Status {
    if (auto weights = describe_weights_file(*model)) {
      if (!weights->ok()) return weights->status();
      fmt::print("{}", weights->value());
      return ok_status();
    }
    KILN_ASSIGN_OR_RETURN(Graph g, load_model(*model));
    fmt::print("{}", graph_to_string(g));
    return ok_status();
  };
}

}  // namespace kiln::cli
