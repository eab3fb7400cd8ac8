// kiln show MODEL: the imported graph as text, shapes inferred.
#include <fmt/format.h>

#include "cli/commands.h"
#include "onnx/onnx_import.h"

namespace kiln::cli {

Handler add_show_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("show", "Print a model's graph: inputs, nodes with inferred shapes, outputs");
  cmd->add_option("MODEL", *model, "ONNX model file")->required();
  return [model]() -> Status {
    KILN_ASSIGN_OR_RETURN(Graph g, onnx_import_file(*model));
    fmt::print("{}", graph_to_string(g));
    return ok_status();
  };
}

}  // namespace kiln::cli
