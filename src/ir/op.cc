#include "ir/op.h"

namespace kiln {

namespace {
constexpr std::string_view kOpNames[] = {
#define KILN_OP(e, name, group, ...) name,
#include "ir/op_table.def"
#undef KILN_OP
};
constexpr OpArity kOpArities[] = {
#define KILN_OP(e, name, group, min_in, max_in, min_out, max_out) {min_in, max_in, min_out, max_out},
#include "ir/op_table.def"
#undef KILN_OP
};
}  // namespace

OpArity op_arity(OpKind op) { return kOpArities[static_cast<int>(op)]; }

std::string_view op_name(OpKind op) { return kOpNames[static_cast<int>(op)]; }

std::optional<OpKind> op_from_name(std::string_view name) {
  for (int i = 0; i < kOpCount; ++i)
    if (kOpNames[i] == name) return static_cast<OpKind>(i);
  return std::nullopt;
}

std::optional<OpKind> op_from_onnx_name(std::string_view name) {
  if (name.starts_with("kiln.")) return std::nullopt;  // fused ops: made by passes only
  return op_from_name(name);
}

bool op_is_view(OpKind op) {
  switch (op) {
    case OpKind::kReshape:
    case OpKind::kFlatten:
    case OpKind::kSqueeze:
    case OpKind::kUnsqueeze:
    case OpKind::kIdentity:
      return true;
    default:
      return false;
  }
}

}  // namespace kiln
