// The inputs a model-running command (run, bench) feeds a model: tensors
// from --input NAME=FILE.npy, the rest random of their declared shapes, with
// symbolic dims from --dim NAME=VALUE.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/eager_executor.h"

namespace kiln::cli {

struct ModelInputs {
  NamedTensors tensors;                        // in graph input order
  std::map<std::string, std::string> sources;  // input name -> the .npy it came from
};

// `model` names the model in messages. A dim that neither a file nor --dim
// fixes takes its size from `defaults` (the model's usual one), else 1,
// with a note on stderr either way.
Result<ModelInputs> gather_inputs(const Graph& graph, const std::string& model,
                                  const std::vector<std::string>& input_flags,
                                  const std::vector<std::string>& dim_flags,
                                  const std::map<std::string, int64_t>& defaults, uint64_t seed);

}  // namespace kiln::cli
