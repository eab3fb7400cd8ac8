// The kernel contract.
//
// A kernel is a function over tensor views: it reads ctx inputs, writes the
// outputs (already allocated with the shapes infer_<Op> computed), and may use
// scratch memory only from ctx.workspace. It never allocates, keeps no state
// between calls except in ctx.state (a compiled plan's per-step memory),
// touches no globals, and is re-entrant.
//
// Every op has two kernels, generated from op_table.def:
//   ref_<Op>  (src/kernels/ref/<group>.cc) plain loops, the test oracle only;
//   cpu_<Op>  (src/kernels/cpu/<group>.cc) the fast one: Highway, OpenMP, oneDNN.
// A kernel returns Unsupported for a dtype or mode it does not implement.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace kiln {

// Scratch memory a kernel may ask for; valid until the kernel returns.
class Workspace {
 public:
  virtual ~Workspace() = default;
  // 64-byte aligned; nullptr if the request cannot be met.
  virtual void* scratch(size_t bytes) = 0;
};

struct CpuContext;  // kernels/cpu/cpu_context.h: oneDNN engine and stream

// What a kernel keeps between calls of one compiled-plan step: built on the
// step's first call (pre-packed constant weights, oneDNN primitives), reused
// on every later one, so replay creates and allocates nothing. Owned by the
// step; eager execution has none.
struct KernelState {
  virtual ~KernelState() = default;
  virtual size_t owned_bytes() const { return 0; }  // memory it holds (packed weights)
  // True when it holds its own (packed) copy of input `index` and replays
  // never read that input again: a plan may then free a constant there.
  virtual bool copies_input(size_t /*index*/) const { return false; }
};

struct KernelContext {
  const Node* node = nullptr;
  std::vector<const TensorView*> inputs;  // nullptr for an omitted optional input
  std::vector<TensorView*> outputs;       // nullptr for an omitted optional output
  Workspace* workspace = nullptr;
  CpuContext* cpu = nullptr;              // null for reference kernels
  std::unique_ptr<KernelState>* state = nullptr;  // null outside a compiled plan

  const Attributes& attrs() const { return node->attrs; }
  const TensorView* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  TensorView* output(size_t i) const { return i < outputs.size() ? outputs[i] : nullptr; }
  template <typename... Args>
  Status unsupported_error(fmt::format_string<Args...> f, Args&&... args) const {
    return unsupported("{}: {}", node_label(*node), fmt::format(f, std::forward<Args>(args)...));
  }
};

using KernelFn = Status (*)(KernelContext&);

#define KILN_OP(e, name, group, ...)          \
  Status ref_##e(KernelContext& ctx);    \
  Status cpu_##e(KernelContext& ctx);
#include "ir/op_table.def"
#undef KILN_OP

KernelFn ref_kernel(OpKind op);
KernelFn cpu_kernel(OpKind op);

// Stored weights: a product's constant weight (input 1 of kiln.Linear and
// kiln.Conv) may be f16 or bf16, as checkpoints hold it, and stay so in the
// graph (mapped from its file, never copied). Kernels compute on f32 only:
// the executors hand them the weight widened (kernels/cpu/widen.h). A plan
// widens it once, at the step's first call, and frees the wide copy as soon
// as the kernel has packed its own; eager execution widens it once per
// executor (a plan takes only constant ones). True when input `index` of
// `node` is such a weight.
bool is_stored_weight(const Node& node, size_t index);


}  // namespace kiln
