#include "cli/model_file.h"

#include <fmt/format.h>

#include <filesystem>

#include "npy/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/plan_file.h"
#include "safetensors/safetensors.h"

namespace kiln::cli {

namespace {
bool has_extension(const std::string& path, std::string_view ext) {
  return std::filesystem::path(path).extension() == ext;
}
}  // namespace

std::optional<Result<std::string>> describe_weights_file(const std::string& path) {
  if (has_extension(path, ".safetensors")) {
    auto tensors = safetensors_read(path);
    if (!tensors.ok()) return Result<std::string>(tensors.status());
    std::string out = fmt::format("{}: {} tensors\n", path, tensors->size());
    for (const auto& [name, t] : *tensors)
      out += fmt::format("  {}: {}{}\n", name, dtype_name(t.dtype()), shape_to_string(t.shape()));
    return Result<std::string>(out);
  }
  if (has_extension(path, ".npy")) {
    auto t = npy_read(path);
    if (!t.ok()) return Result<std::string>(t.status());
    return Result<std::string>(fmt::format("{}: {}{}\n", path, dtype_name(t->dtype()), shape_to_string(t->shape())));
  }
  return std::nullopt;
}

Result<std::pair<std::string, std::string>> split_assignment(const std::string& s, std::string_view flag) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    return invalid_argument("{} '{}': expected NAME=VALUE", flag, s);
  return std::make_pair(s.substr(0, eq), s.substr(eq + 1));
}

Result<std::map<std::string, int64_t>> parse_dims(const std::vector<std::string>& flags) {
  std::map<std::string, int64_t> dims;
  for (const auto& d : flags) {
    KILN_ASSIGN_OR_RETURN(auto kv, split_assignment(d, "--dim"));
    char* end = nullptr;
    long long v = std::strtoll(kv.second.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > (int64_t(1) << 40))
      return invalid_argument("--dim {}: '{}' is not a valid size", kv.first, kv.second);
    dims[kv.first] = v;
  }
  return dims;
}

Result<Graph> load_model(const std::string& path) {
  if (looks_like_plan_file(path))
    return invalid_argument("{}: a compiled .kplan, which only kiln run loads; give the ONNX model it was compiled from",
                            path);
  if (auto weights = describe_weights_file(path)) {
    if (!weights->ok()) return weights->status();
    return invalid_argument("{}: holds tensors only, not a model; give an ONNX file", path);
  }
  return onnx_import_file(path);
}

}  // namespace kiln::cli
