// safetensors files: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the tensor bytes. Tensors are memory-mapped and viewed in place.
//
//   KILN_ASSIGN_OR_RETURN(auto tensors, safetensors_read("unet.safetensors"));
//   for (auto& [name, t] : tensors) ...
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace kiln {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

// Tensors in header order. The header is validated whole: dtypes, shapes,
// offsets inside the data section, sizes matching shapes, no overlaps.
Result<NamedTensorList> safetensors_read(const std::string& path);
// Parses from memory kept alive by `owner` (the mapped file, or a test buffer).
Result<NamedTensorList> safetensors_parse(const uint8_t* data, size_t size,
                                          std::shared_ptr<const void> owner, const std::string& label);

}  // namespace kiln
