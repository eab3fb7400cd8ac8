// What the CLI accepts as MODEL: an ONNX file. Weight-only files
// (.safetensors, .npy) are validated and then refused with a clear message,
// so a user who passes the wrong file learns what it is.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::cli {

Result<Graph> load_model(const std::string& path);

// A one-line-per-tensor description of a weights file (for `kiln show`);
// nullopt when `path` is not a weights file.
std::optional<Result<std::string>> describe_weights_file(const std::string& path);

}  // namespace kiln::cli
