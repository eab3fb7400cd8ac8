#include "app/default_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace kiln {

namespace fs = std::filesystem;

std::vector<std::string> default_model_candidates() {
  if (const char* env = std::getenv("KILN_DEFAULT_MODEL"); env != nullptr && *env != '\0') return {env};
  std::vector<std::string> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path prefix = exe.parent_path().parent_path();
    candidates.push_back((prefix / "share" / "kiln" / "models" / "shapes").string());
    candidates.push_back((prefix / "models" / "shapes").string());
  }
  const std::string source = (fs::path(KILN_SOURCE_DIR) / "models" / "shapes").string();
  if (std::find(candidates.begin(), candidates.end(), source) == candidates.end()) candidates.push_back(source);
  return candidates;
}

Result<std::string> find_default_model() {
  const std::vector<std::string> candidates = default_model_candidates();
  for (const std::string& dir : candidates)
    if (fs::is_regular_file(fs::path(dir) / "model_index.json")) return dir;
  return not_found("no --model given, and kiln's default model is not in {} (pass --model DIR, or set "
                   "KILN_DEFAULT_MODEL)", fmt::join(candidates, ", "));
}

}  // namespace kiln
