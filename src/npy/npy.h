// NumPy .npy files (format versions 1.0-3.0, little-endian, C order).
//
//   KILN_ASSIGN_OR_RETURN(Tensor t, npy_read("latent.npy"));
//   KILN_RETURN_IF_ERROR(npy_write("out.npy", t));
#pragma once

#include <string>

#include "core/tensor.h"

namespace kiln {

Result<Tensor> npy_read(const std::string& path);
// `label` names the data in errors (fuzzing and tests parse from memory).
Result<Tensor> npy_parse(const void* data, size_t size, const std::string& label);
Status npy_write(const std::string& path, const Tensor& tensor);
std::string npy_serialize(const Tensor& tensor);

}  // namespace kiln
