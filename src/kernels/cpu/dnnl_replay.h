// oneDNN primitives behind the linear-algebra kernels (linalg.cc, conv.cc),
// with plain (strided) memory descriptors over the caller's buffers, so
// nothing is copied in or out. Eagerly, a primitive is created on every call
// (oneDNN's primitive cache makes the repeat cheap). In a compiled plan the
// first call records the primitive, its memory objects and constant weights
// re-laid out in the primitive's preferred (blocked) format (execute()); later
// calls only point the memory objects at this run's buffers and execute
// (replay()). Those executions allocate inside oneDNN; kiln's GEMM paths do
// not.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/products.h"
#include "kernels/kernel.h"

namespace kiln::linalg {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

// f32 over element strides, or plain row-major; a memory object over the
// caller's buffer.
memory::desc strided_desc(const Shape& dims, const Shape& strides);
memory::desc plain_desc(const Shape& dims);
memory bind(const KernelContext& ctx, const memory::desc& desc, const void* data);

// Keeps oneDNN's (and the standard library's) exceptions inside the kernel.
template <typename Fn>
Status guard_dnnl(const KernelContext& ctx, Fn&& fn) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return ctx.unsupported_error("oneDNN: {}", e.what());
    return internal_error("{}: oneDNN: {}", node_label(*ctx.node), e.what());
  } catch (const std::exception& e) {
    return internal_error("{}: {}", node_label(*ctx.node), e.what());
  }
}

// Attributes that take the primitive's scratchpad from kernel scratch
// (execute()), not from oneDNN's allocator.
dnnl::primitive_attr user_scratchpad_attr();

// A oneDNN call recorded on a plan step's first run. Each argument's memory
// object is kept with where its data comes from, so a replay only re-points
// them at this run's buffers: no descriptor, primitive or memory object is
// created again.
struct DnnlReplay final : KernelState {
  // kBf16Input: input `index` rounded to bf16 into scratch on every call (a
  // node computing in bf16; its tensors are f32).
  enum class Source { kInput, kOutput, kScratchpad, kOwned, kBf16Input };
  struct Arg {
    Source source;
    size_t index;  // input or output index
    memory mem;
  };
  dnnl::primitive primitive;
  std::vector<Arg> args;
  std::vector<dnnl_exec_arg_t> c_args;  // the same memory objects, in oneDNN's C form
  size_t scratchpad_bytes = 0;
  size_t owned_bytes() const override {
    size_t n = 0;
    for (const Arg& a : args)
      if (a.source == Source::kOwned) n += a.mem.get_desc().get_size();
    return n;
  }
  bool copies_input(size_t index) const override {
    for (const Arg& a : args)
      if (a.source == Source::kOwned && a.index == index) return true;
    return false;
  }
};

// The weights descriptor to build a primitive with: `any` (oneDNN chooses a
// blocked layout) when the weight will be pre-packed, else its real layout.
memory::desc weights_desc(const KernelContext& ctx, size_t index, const memory::desc& real);

// The recorded call of this step, if its first call recorded one.
const DnnlReplay* replay_of(const KernelContext& ctx);

// What a bf16 operand is stored as: bf16, or f32 rounded through bf16 where
// oneDNN has no bf16 products (the same results, at f32 speed).
memory::data_type bf16_storage();

// Re-points a oneDNN memory object at this call's buffer.
Status point(const KernelContext& ctx, const memory& mem, const void* data);

// Runs the recorded call on this call's buffers.
Status replay(KernelContext& ctx, const DnnlReplay& r);

// Where an argument's data comes from, by its pointer: one of the step's
// inputs or outputs; nullopt for anything else (kernel scratch), which makes
// the call unrecordable and the step run the whole kernel every time.
std::optional<DnnlReplay::Arg> arg_source(const KernelContext& ctx, const memory& mem);

// kiln.Linear's and kiln.Conv's epilogue as post-ops: the activation
// (eltwise), then (unless `residual` is false) the residual, input 3 (binary
// add) shaped like `y`.
dnnl::primitive_attr epilogue_attr(const KernelContext& ctx, const memory::desc& y, bool residual = true);

// The residual's argument for epilogue_attr's binary post-op.
void add_residual_arg(const KernelContext& ctx, const memory::desc& y, Args& args);

// Input `index` rounded to bf16 (rounded_copy), seen through `dims` and
// element `strides` (those of the f32 tensor): an operand of a node that
// computes in bf16.
Result<memory> bf16_input(KernelContext& ctx, size_t index, const Shape& dims, const Shape& strides);

// A constant weight is rounded and packed once by execute() when oneDNN
// takes bf16 (the f32 weight reordered into a bf16 layout); without bf16
// products it is rounded on every call, as any other operand.
bool packs_bf16_weight(const KernelContext& ctx, size_t index);

// Which oneDNN arguments are bf16 copies of which inputs (bf16_input).
using Bf16Inputs = std::vector<std::pair<int, size_t>>;

// Runs `Primitive` built from `pd`, its scratchpad taken from the workspace.
// On a plan step's first call it also pre-packs a constant weight the
// primitive wants in another layout (converting f32 to bf16 on the way when
// the primitive computes in bf16), and records the call for replay.
template <typename Primitive>
Status execute(KernelContext& ctx, const typename Primitive::primitive_desc& pd, Args args,
               const Bf16Inputs& bf16_inputs = {}) {
  Primitive primitive(pd);
  std::unique_ptr<DnnlReplay> record;
  if (recording(ctx)) record = std::make_unique<DnnlReplay>();
  if (record) {
    bool packed_weights = false;
    auto w = args.find(DNNL_ARG_WEIGHTS);
    if (w != args.end() && w->second.get_desc() != pd.weights_desc()) {
      memory packed(pd.weights_desc(), ctx.cpu->engine);  // owned by the step from now on
      dnnl::reorder(w->second, packed).execute(ctx.cpu->stream, w->second, packed);
      w->second = packed;
      packed_weights = true;
    }
    for (const auto& [arg, mem] : args) {
      std::optional<DnnlReplay::Arg> source;
      const auto bf16 = std::find_if(bf16_inputs.begin(), bf16_inputs.end(), [&](auto& b) { return b.first == arg; });
      if (arg == DNNL_ARG_WEIGHTS && packed_weights) source = {DnnlReplay::Source::kOwned, 1, mem};  // input 1
      else if (bf16 != bf16_inputs.end()) source = {DnnlReplay::Source::kBf16Input, bf16->second, mem};
      else source = arg_source(ctx, mem);
      if (!source) {
        record.reset();  // data from kernel scratch: not replayable
        break;
      }
      record->args.push_back(*source);
      record->c_args.push_back({arg, mem.get()});
    }
  }
  const memory::desc scratch_desc = pd.scratchpad_desc();
  if (size_t bytes = scratch_desc.get_size()) {
    void* scratch = ctx.workspace->scratch(bytes);
    if (!scratch) return resource_exhausted("{}: no {} bytes of scratch", node_label(*ctx.node), bytes);
    memory mem = bind(ctx, scratch_desc, scratch);
    args.emplace(DNNL_ARG_SCRATCHPAD, mem);
    if (record) {
      record->scratchpad_bytes = bytes;
      record->args.push_back({DnnlReplay::Source::kScratchpad, 0, mem});
      record->c_args.push_back({DNNL_ARG_SCRATCHPAD, mem.get()});
    }
  }
  primitive.execute(ctx.cpu->stream, args);
  ctx.cpu->stream.wait();
  if (record) {
    record->primitive = primitive;
    *ctx.state = std::move(record);
  }
  return ok_status();
}

}  // namespace kiln::linalg
