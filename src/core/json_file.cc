#include "core/json_file.h"

#include <string_view>

namespace kiln {

namespace {

constexpr int kMaxJsonDepth = 16;  // Hugging Face's configs and tokenizer files nest three deep

// nlohmann's parser keeps a heap node per open bracket, so "[[[[..." would
// cost tens of bytes of memory per byte of file: deep nesting is refused
// before parsing.
bool json_nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

Result<std::shared_ptr<const MappedFile>> open_capped(const std::string& path, size_t max_bytes) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  if (file->size() > max_bytes)
    return resource_exhausted("{}: {} bytes is more than the {} kiln reads from this file", path, file->size(),
                              max_bytes);
  return file;
}

Result<nlohmann::json> read_json_file(const std::string& path, size_t max_bytes, bool optional) {
  auto file = open_capped(path, max_bytes);
  if (!file.ok()) {
    if (optional && file.status().code() == StatusCode::kNotFound) return nlohmann::json::object();
    return file.status();
  }
  const uint8_t* p = (*file)->data();
  if (!json_nesting_within(std::string_view(reinterpret_cast<const char*>(p), (*file)->size()), kMaxJsonDepth))
    return invalid_argument("{}: JSON nested more than {} deep", path, kMaxJsonDepth);
  auto json = nlohmann::json::parse(p, p + (*file)->size(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return invalid_argument("{}: not valid JSON", path);
  if (!json.is_object()) return invalid_argument("{}: expected a JSON object", path);
  return json;
}

std::optional<int64_t> json_int_in_range(const nlohmann::json& v, int64_t max) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u <= uint64_t(max) ? std::optional<int64_t>(int64_t(u)) : std::nullopt;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return i >= 0 && i <= max ? std::optional<int64_t>(i) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace kiln
