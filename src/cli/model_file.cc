#include "cli/model_file.h"

#include <fmt/format.h>

#include <filesystem>

#include "npy/npy.h"
#include "onnx/onnx_import.h"
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

Result<Graph> load_model(const std::string& path) {
  if (auto weights = describe_weights_file(path)) {
    if (!weights->ok()) return weights->status();
    return invalid_argument("{}: holds tensors only, not a model; give an ONNX file", path);
  }
  return onnx_import_file(path);
}

}  // namespace kiln::cli
