#include "kernels/cpu/dnnl_replay.h"

#include "kernels/cpu/bf16.h"

namespace kiln::linalg {

memory::desc strided_desc(const Shape& dims, const Shape& strides) {
  return memory::desc(dims, memory::data_type::f32, strides);
}

memory::desc plain_desc(const Shape& dims) { return strided_desc(dims, shape_strides(dims)); }

memory bind(const KernelContext& ctx, const memory::desc& desc, const void* data) {
  return memory(desc, ctx.cpu->engine, const_cast<void*>(data));
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

memory::desc weights_desc(const KernelContext& ctx, size_t index, const memory::desc& real) {
  if (!packs_weight(ctx, index)) return real;
  return memory::desc(real.dims(), real.data_type(), memory::format_tag::any);
}

const DnnlReplay* replay_of(const KernelContext& ctx) {
  return ctx.state ? dynamic_cast<const DnnlReplay*>(ctx.state->get()) : nullptr;
}

memory::data_type bf16_storage() {
  return onednn_has_bf16() ? memory::data_type::bf16 : memory::data_type::f32;
}

Status point(const KernelContext& ctx, const memory& mem, const void* data) {
  if (dnnl_memory_set_data_handle(mem.get(), const_cast<void*>(data)) != dnnl_success)
    return internal_error("{}: oneDNN refused a buffer", node_label(*ctx.node));
  return ok_status();
}

Status replay(KernelContext& ctx, const DnnlReplay& r) {
  for (const DnnlReplay::Arg& a : r.args) {
    void* data = nullptr;
    switch (a.source) {
      case DnnlReplay::Source::kInput: data = ctx.inputs[a.index]->data; break;
      case DnnlReplay::Source::kOutput: data = ctx.outputs[a.index]->data; break;
      case DnnlReplay::Source::kScratchpad:
        data = ctx.workspace->scratch(r.scratchpad_bytes);
        if (!data) return resource_exhausted("{}: no scratchpad", node_label(*ctx.node));
        break;
      case DnnlReplay::Source::kOwned: continue;
      case DnnlReplay::Source::kBf16Input: {
        KILN_ASSIGN_OR_RETURN(data, rounded_copy(ctx, a.index));
        break;
      }
    }
    KILN_RETURN_IF_ERROR(point(ctx, a.mem, data));
  }
  if (dnnl_primitive_execute(r.primitive.get(), ctx.cpu->stream.get(), int(r.c_args.size()),
                             r.c_args.data()) != dnnl_success)
    return internal_error("{}: oneDNN execution failed", node_label(*ctx.node));
  ctx.cpu->stream.wait();
  return ok_status();
}

std::optional<DnnlReplay::Arg> arg_source(const KernelContext& ctx, const memory& mem) {
  const void* p = mem.get_data_handle();
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.inputs[i] && ctx.inputs[i]->data == p) return DnnlReplay::Arg{DnnlReplay::Source::kInput, i, mem};
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (ctx.outputs[i] && ctx.outputs[i]->data == p) return DnnlReplay::Arg{DnnlReplay::Source::kOutput, i, mem};
  return std::nullopt;
}

dnnl::primitive_attr epilogue_attr(const KernelContext& ctx, const memory::desc& y, bool residual) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  const std::string act = ctx.attrs().get_string("activation", "none");
  dnnl::post_ops ops;
  if (act != "none") {
    const dnnl::algorithm alg = act == "gelu"        ? dnnl::algorithm::eltwise_gelu_erf
                                : act == "gelu_tanh" ? dnnl::algorithm::eltwise_gelu_tanh
                                : act == "swish"     ? dnnl::algorithm::eltwise_swish
                                                     : dnnl::algorithm::eltwise_relu;
    ops.append_eltwise(1.0f, alg, act == "swish" ? ctx.attrs().get_float("alpha", 1.0f) : 0.0f, 0.0f);
  }
  if (residual && ctx.input(3)) ops.append_binary(dnnl::algorithm::binary_add, y);
  attr.set_post_ops(ops);
  return attr;
}

void add_residual_arg(const KernelContext& ctx, const memory::desc& y, Args& args) {
  if (!ctx.input(3)) return;
  const int index = ctx.attrs().get_string("activation", "none") != "none" ? 1 : 0;  // after the eltwise
  args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, bind(ctx, y, ctx.input(3)->data));
}

Result<memory> bf16_input(KernelContext& ctx, size_t index, const Shape& dims, const Shape& strides) {
  KILN_ASSIGN_OR_RETURN(void* data, rounded_copy(ctx, index));
  return memory(memory::desc(dims, bf16_storage(), strides), ctx.cpu->engine, data);
}

bool packs_bf16_weight(const KernelContext& ctx, size_t index) {
  return onednn_has_bf16() && packs_weight(ctx, index);
}

}  // namespace kiln::linalg
