// What the linalg ops' shape inference and kernels share: Conv/ConvTranspose
// attribute resolution and geometry, and Einsum equation parsing. Inference
// validates with these; the kernels call them again on the same node, so the
// geometry they compute is the one the output was allocated for.
//
//   KILN_ASSIGN_OR_RETURN(ConvAttrs a, conv_attrs(node, /*spatial=*/2, w_kernel_dims));
//   auto [pad_begin, pad_end] = conv_pads(a, 0, in_h, out_h);
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace kiln {

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

// Conv and ConvTranspose attributes, validated, one entry per spatial dim
// (defaults filled in).
struct ConvAttrs {
  int64_t group = 1;
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> kernel, strides, dilations;  // kernel is -1 where unknown
  std::vector<int64_t> pads;            // 2 * spatial: begins, then ends (explicit pads)
  std::vector<int64_t> output_padding;  // ConvTranspose only
  std::vector<int64_t> output_shape;    // ConvTranspose only; empty when absent
  int64_t extent(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

// Reads and checks the attributes; `weight_kernel` holds W's spatial dims. A
// kernel size neither W nor kernel_shape gives is -1 (import time only).
Result<ConvAttrs> conv_attrs(const Node& node, size_t spatial, const SymShape& weight_kernel);

// Conv: output size along spatial dim i; unknown when `in` is.
Result<Dim> conv_output_dim(const Node& node, const ConvAttrs& a, size_t i, const Dim& in);
// Conv: (pad_begin, pad_end) along spatial dim i for the given in/out sizes.
std::pair<int64_t, int64_t> conv_pads(const ConvAttrs& a, size_t i, int64_t in, int64_t out);

// ConvTranspose: output size along spatial dim i; unknown when `in` is.
Result<Dim> conv_transpose_output_dim(const Node& node, const ConvAttrs& a, size_t i,
                                      const Dim& in);
// ConvTranspose: padding before the first output along spatial dim i. It may
// be negative (an output_shape larger than the full result); output element o
// receives input i through kernel tap k when i * stride + k * dilation - pad_begin == o.
int64_t conv_transpose_pad_begin(const ConvAttrs& a, size_t i, int64_t in, int64_t out);

// An Einsum equation with every operand's subscripts as label ids. Labels
// 0..num_ellipsis-1 are the broadcast ("...") dims, right-aligned across
// operands; num_ellipsis + 0..51 are the letters A-Z then a-z (so ids sort
// like numpy's implicit output order).
struct EinsumSpec {
  int num_ellipsis = 0;
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  int num_labels() const { return num_ellipsis + 52; }
};

// Parses `equation` for operands of the given ranks (spaces are ignored).
Result<EinsumSpec> einsum_parse(std::string_view equation, const std::vector<int64_t>& ranks);
// Size of every label: equal where a label repeats, or 1 (broadcast); labels
// that no operand uses get size 1.
Result<std::vector<Dim>> einsum_label_dims(const EinsumSpec& spec,
                                           const std::vector<SymShape>& shapes);
// Both, for the concrete operand shapes a kernel sees: the spec, and every
// label's size in `label_sizes`.
Result<EinsumSpec> einsum_parse_concrete(std::string_view equation,
                                         const std::vector<const TensorView*>& operands,
                                         Shape* label_sizes);

}  // namespace kiln
