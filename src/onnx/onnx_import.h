// ONNX import: ModelProto files into the Graph IR.
//
// Everything read is validated: a malformed, truncated or hostile file is an
// InvalidArgument naming the file and what is wrong; an op, dtype or opset
// kiln does not implement is Unsupported. Initializers stored in the model are
// copied into aligned tensors; external data (the side file every model over
// 2 GB has) is memory-mapped and viewed in place.
//
//   KILN_ASSIGN_OR_RETURN(Graph g, onnx_import_file("unet/model.onnx"));
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln {

// Oldest and newest default-domain opsets kiln reads.
inline constexpr int64_t kOnnxMinOpset = 1;
inline constexpr int64_t kOnnxMaxOpset = 18;

Result<Graph> onnx_import_file(const std::string& path);
// `label` names the input in errors; external data resolves against `base_dir`.
Result<Graph> onnx_import_bytes(const void* data, size_t size, const std::string& label,
                                const std::string& base_dir);

// A serialized TensorProto (.pb), as the ONNX backend tests store inputs/outputs.
Result<Tensor> onnx_read_tensor_file(const std::string& path);
Result<Tensor> onnx_parse_tensor_bytes(const void* data, size_t size, const std::string& label);

}  // namespace kiln
