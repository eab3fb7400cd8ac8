// What the CLI accepts as MODEL: an ONNX file. Weight-only files
// (.safetensors, .npy) are validated and then refused with a clear message,
// so a user who passes the wrong file learns what it is.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::cli {

Result<Graph> load_model(const std::string& path);

// "NAME=VALUE" split in two; an error naming `flag` otherwise.
Result<std::pair<std::string, std::string>> split_assignment(const std::string& s, std::string_view flag);
// --dim NAME=VALUE flags as a map of sizes.
Result<std::map<std::string, int64_t>> parse_dims(const std::vector<std::string>& flags);

// A one-line-per-tensor description of a weights file (for `kiln show`);
// nullopt when `path` is not a weights file.
std::optional<Result<std::string>> describe_weights_file(const std::string& path);

}  // namespace kiln::cli
