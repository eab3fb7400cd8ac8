// OpKind and per-op metadata, generated from op_table.def.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class OpKind : uint16_t {
#define KILN_OP(e, name, group, ...) k##e,
#include "ir/op_table.def"
#undef KILN_OP
};

inline constexpr int kOpCount = 0
#define KILN_OP(e, name, group, ...) +1
#include "ir/op_table.def"
#undef KILN_OP
    ;
static_assert(kOpCount == 72, "op_table.def changed: update this count and the kernels");

// How many inputs and outputs a node of the op may have (op_table.def).
inline constexpr int kMany = 1 << 20;
struct OpArity {
  int min_inputs, max_inputs, min_outputs, max_outputs;
};
OpArity op_arity(OpKind op);

std::string_view op_name(OpKind op);
// An ONNX op type; never one of kiln's fused ops ("kiln.*"), which only
// passes create.
std::optional<OpKind> op_from_onnx_name(std::string_view name);
// Any op by its op_name(), fused ones included (for kiln's own files).
std::optional<OpKind> op_from_name(std::string_view name);

// Ops whose output is input 0's bytes under another shape: the executors may
// alias the output to the input instead of copying.
bool op_is_view(OpKind op);

}  // namespace kiln
