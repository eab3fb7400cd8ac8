// kiln's default model (models/shapes in the source tree, share/kiln/models/
// shapes when installed): what `kiln generate` draws with when no --model is
// given, so a fresh build makes a picture with nothing downloaded.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kiln {

// Where the default model is looked for, in order: $KILN_DEFAULT_MODEL when
// set (and then only there); next to the executable, ../share/kiln/models/
// shapes (installed) and ../models/shapes (a build folder in the source
// tree); the source tree the binary was built from.
std::vector<std::string> default_model_candidates();

// The first candidate that holds a model_index.json; NotFound listing them all.
Result<std::string> find_default_model();

}  // namespace kiln
