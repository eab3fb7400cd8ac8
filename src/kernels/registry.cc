// Kernel dispatch tables, generated from op_table.def.
#include "kernels/kernel.h"

namespace kiln {

namespace {
constexpr KernelFn kRefKernels[] = {
#define KILN_OP(e, name, group, ...) &ref_##e,
#include "ir/op_table.def"
#undef KILN_OP
};
constexpr KernelFn kCpuKernels[] = {
#define KILN_OP(e, name, group, ...) &cpu_##e,
#include "ir/op_table.def"
#undef KILN_OP
};
static_assert(std::size(kRefKernels) == kOpCount && std::size(kCpuKernels) == kOpCount);
}  // namespace

KernelFn ref_kernel(OpKind op) { return kRefKernels[static_cast<int>(op)]; }
KernelFn cpu_kernel(OpKind op) { return kCpuKernels[static_cast<int>(op)]; }

bool is_stored_weight(const Node& node, size_t index) {
  const Value* v = node.input(index);
  return index == 1 && (node.op == OpKind::kLinear || node.op == OpKind::kFusedConv) && v &&
         (v->dtype == DType::kF16 || v->dtype == DType::kBF16);
}

}  // namespace kiln
