#include "safetensors/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace kiln {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // the format's own limit

Result<DType> dtype_from_safetensors(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F64") return DType::kF64;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "I64") return DType::kI64;
  if (s == "I32") return DType::kI32;
  if (s == "I8") return DType::kI8;
  if (s == "U8") return DType::kU8;
  if (s == "BOOL") return DType::kBool;
  return unsupported("dtype '{}' is not supported", s);
}

}  // namespace

Result<NamedTensorList> safetensors_parse(const uint8_t* data, size_t size,
                                          std::shared_ptr<const void> owner, const std::string& label) {
  if (size < 8) return invalid_argument("{}: too short for a safetensors header", label);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | data[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    return invalid_argument("{}: header length {} exceeds the file ({} bytes)", label, header_len, size);
  auto header = nlohmann::json::parse(data + 8, data + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return invalid_argument("{}: header is not a JSON object", label);
  const uint8_t* body = data + 8 + header_len;
  const uint64_t body_size = size - 8 - header_len;

  NamedTensorList out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string& tensor_name = name;  // structured bindings cannot be captured before C++20 in clang 14
    auto err = [&](std::string_view what) {
      return invalid_argument("{}: tensor '{}': {}", label, tensor_name, what);
    };
    if (!entry.is_object()) return err("entry is not an object");
    auto dt = entry.find("dtype"), sh = entry.find("shape"), off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) return err("missing 'dtype'");
    if (sh == entry.end() || !sh->is_array()) return err("missing 'shape'");
    if (off == entry.end() || !off->is_array() || off->size() != 2) return err("'data_offsets' must be [begin, end]");
    auto dtype = dtype_from_safetensors(dt->get<std::string>());
    if (!dtype.ok()) return dtype.status().with_context(fmt::format("{}: tensor '{}'", label, name));
    Shape shape;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return err("shape entries must be non-negative integers");
      uint64_t v = d.get<uint64_t>();
      if (v > uint64_t(kMaxTensorElements)) return err("dimension too large");
      shape.push_back(int64_t(v));
    }
    auto numel = shape_numel_checked(shape);
    if (!numel.ok()) return numel.status().with_context(fmt::format("{}: tensor '{}'", label, name));
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      return err("data_offsets must be non-negative integers");
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > body_size)
      return err(fmt::format("data_offsets [{}, {}) lie outside the data section ({} bytes)", begin, end, body_size));
    uint64_t bytes = uint64_t(*numel) * dtype_size(*dtype);
    if (end - begin != bytes)
      return err(fmt::format("{} bytes of data, shape {} needs {}", end - begin, shape_to_string(shape), bytes));
    ranges.emplace_back(begin, end);
    const uint8_t* p = body + begin;
    if (reinterpret_cast<uintptr_t>(p) % dtype_size(*dtype) == 0) {
      out.emplace_back(name, Tensor(*dtype, std::move(shape), const_cast<uint8_t*>(p), owner));
    } else {
      KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(*dtype, std::move(shape)));  // misaligned: copy
      std::memcpy(t.raw(), p, bytes);
      out.emplace_back(name, std::move(t));
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second && ranges[i].first != ranges[i].second)
      return invalid_argument("{}: tensor data ranges overlap at offset {}", label, ranges[i].first);
  return out;
}

Result<NamedTensorList> safetensors_read(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return safetensors_parse(file->data(), file->size(), file, path);
}

}  // namespace kiln
