// Compiling a model to a .kplan file, and loading one back (recompiling
// from its model when the file is stale and the model is at hand).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "cli/model_file.h"
#include "runtime/plan_file.h"

namespace kiln::cli {

// Compiles `model` for the given symbolic dim sizes and writes `out`.
Result<std::unique_ptr<Plan>> compile_to_file(const ModelRef& model, const std::map<std::string, int64_t>& dims,
                                              const PassOptions& passes, const std::string& out);

// The plan in `path`, recompiled (with a note on stderr) when it is stale
// and its model is at hand: runtime/plan_file.h's load_plan_file.
Result<std::unique_ptr<Plan>> load_plan_file(const std::string& path);

}  // namespace kiln::cli
