// CPU kernels for the linalg ops (see kernels/kernel.h), f32.
//
// MatMul, Gemm, kiln.Linear and 1-D/2-D ungrouped Conv run on kiln's own
// GEMM (kernels/cpu/gemm.h), which allocates nothing: a constant weight is
// packed once into a plan step's state (or into scratch on each eager call),
// a convolution packs its input patches (im2col) chunk by chunk into
// scratch (with stride 1 and output rows of whole GEMM panels, the GEMM reads
// them in place from a zero-padded copy of the input instead; with fewer
// output pixels an image than a GEMM panel is wide, every image's patches are
// gathered as the rows of one product against its weight packed once).
// The rest (grouped and 3-D Conv, ConvTranspose, Einsum) runs through
// oneDNN, with plain (strided) memory descriptors over the caller's buffers,
// so nothing is copied in or out.
//
// Eagerly, a oneDNN primitive is created on every call (oneDNN's primitive
// cache makes the repeat cheap). In a compiled plan the first call records the
// primitive, its memory objects and constant weights re-laid out in the
// primitive's preferred (blocked) format; later calls only point the memory
// objects at this run's buffers and execute (see DnnlReplay). Those executions
// allocate inside oneDNN; the GEMM paths do not.
//
// Nodes marked to compute in bf16 (passes' assign_precision) round their
// operands to bf16 and sum in f32. kiln.Linear, Gemm, MatMul by one matrix
// and ungrouped 1-D and 2-D Conv run on the GEMM's bf16 products where
// bf16_gemm() says so (AVX512-BF16 and no AMX, bf16.h): A rounded into
// scratch on every call, a constant weight rounded and packed once, nothing
// allocated. The rest (and those, on other CPUs) run on oneDNN's bf16
// primitives: each f32 operand
// rounded into scratch on every call (DnnlReplay's kBf16Input; a Conv's
// input reordered into oneDNN's blocked layout instead, see BlockedBf16Conv),
// a constant weight rounded and packed once, f32 accumulation and output.
// Convs with fewer than 32 output channels compute in f32.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <unordered_map>

#include "ir/infer/linalg.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/winograd.h"
#include "kernels/kernel.h"
#include "passes/pass.h"

namespace kiln {

namespace {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

// Below this many multiply-adds a loop is not worth an OpenMP team.
constexpr int64_t kParallelWork = int64_t(1) << 16;

Status require_f32(const KernelContext& ctx) {
  for (const TensorView* in : ctx.inputs)
    if (in && in->dtype != DType::kF32)
      return ctx.unsupported_error("dtype {} is not implemented", dtype_name(in->dtype));
  if (!ctx.cpu) return internal_error("{}: no CPU context", node_label(*ctx.node));
  return ok_status();
}

memory::desc strided_desc(const Shape& dims, const Shape& strides) {
  return memory::desc(dims, memory::data_type::f32, strides);
}
memory::desc plain_desc(const Shape& dims) { return strided_desc(dims, shape_strides(dims)); }

memory bind(const KernelContext& ctx, const memory::desc& desc, const void* data) {
  return memory(desc, ctx.cpu->engine, const_cast<void*>(data));
}

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

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

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

// True when a plan step records its first call (and may pre-pack input
// `index`, a constant weight, into the layout the primitive prefers).
bool recording(const KernelContext& ctx) { return ctx.state && !*ctx.state; }
bool packs_weight(const KernelContext& ctx, size_t index) {
  return recording(ctx) && index < ctx.node->inputs.size() && ctx.node->inputs[index] &&
         ctx.node->inputs[index]->constant;
}
// The weights descriptor to build a primitive with: `any` (oneDNN chooses a
// blocked layout) when the weight will be pre-packed, else its real layout.
memory::desc weights_desc(const KernelContext& ctx, size_t index, const memory::desc& real) {
  if (!packs_weight(ctx, index)) return real;
  return memory::desc(real.dims(), real.data_type(), memory::format_tag::any);
}

// The recorded call of this step, if its first call recorded one.
const DnnlReplay* replay_of(const KernelContext& ctx) {
  return ctx.state ? dynamic_cast<const DnnlReplay*>(ctx.state->get()) : nullptr;
}

// What a bf16 operand is stored as: bf16, or f32 rounded through bf16 where
// oneDNN has no bf16 products (the same results, at f32 speed).
memory::data_type bf16_storage() {
  return onednn_has_bf16() ? memory::data_type::bf16 : memory::data_type::f32;
}

// Re-points a oneDNN memory object at this call's buffer.
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

// Where an argument's data comes from, by its pointer: one of the step's
// inputs or outputs; nullopt for anything else (kernel scratch), which makes
// the call unrecordable and the step run the whole kernel every time.
std::optional<DnnlReplay::Arg> arg_source(const KernelContext& ctx, const memory& mem) {
  const void* p = mem.get_data_handle();
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.inputs[i] && ctx.inputs[i]->data == p) return DnnlReplay::Arg{DnnlReplay::Source::kInput, i, mem};
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (ctx.outputs[i] && ctx.outputs[i]->data == p) return DnnlReplay::Arg{DnnlReplay::Source::kOutput, i, mem};
  return std::nullopt;
}

// kiln.Linear's and kiln.Conv's epilogue as post-ops: the activation
// (eltwise), then (unless `residual` is false) the residual, input 3 (binary
// add) shaped like `y`.
dnnl::primitive_attr epilogue_attr(const KernelContext& ctx, const memory::desc& y, bool residual = true) {
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

// Input `index` rounded to bf16 (rounded_copy), seen through `dims` and
// element `strides` (those of the f32 tensor): an operand of a node that
// computes in bf16.
Result<memory> bf16_input(KernelContext& ctx, size_t index, const Shape& dims, const Shape& strides) {
  KILN_ASSIGN_OR_RETURN(void* data, rounded_copy(ctx, index));
  return memory(memory::desc(dims, bf16_storage(), strides), ctx.cpu->engine, data);
}

// A constant weight is rounded and packed once by execute() when oneDNN
// takes bf16 (the f32 weight reordered into a bf16 layout); without bf16
// products it is rounded on every call, as any other operand.
bool packs_bf16_weight(const KernelContext& ctx, size_t index) {
  return onednn_has_bf16() && packs_weight(ctx, index);
}

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

// y = a x b over (batched, possibly broadcast, possibly strided) matrices.
Status run_matmul(KernelContext& ctx, const memory::desc& a, const float* pa, const memory::desc& b,
                  const float* pb, const memory::desc& y, float* py,
                  const dnnl::primitive_attr& attr = user_scratchpad_attr()) {
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, weights_desc(ctx, 1, b), y), attr,
                                  ctx.cpu->engine);
  return execute<dnnl::matmul>(ctx, pd, {{DNNL_ARG_SRC, bind(ctx, a, pa)},
                                         {DNNL_ARG_WEIGHTS, bind(ctx, b, pb)},
                                         {DNNL_ARG_DST, bind(ctx, y, py)}});
}

// y = a x b (+ bias, then attr's post-ops) computed in bf16: inputs 0 (a)
// and 1 (b) rounded to bf16, f32 accumulation, y f32 (plain, `y_dims`); a and
// b are seen through dims and element strides over their f32 tensors, the
// bias as one value per column. A constant b that a plan step records is
// rounded and packed once, in the layout the primitive prefers.
Status run_matmul_bf16(KernelContext& ctx, const Shape& a_dims, const Shape& a_strides, const Shape& b_dims,
                       const Shape& b_strides, const Shape& y_dims, const TensorView* bias,
                       const dnnl::primitive_attr& attr, Args args = {}) {
  KILN_ASSIGN_OR_RETURN(memory a, bf16_input(ctx, 0, a_dims, a_strides));
  Bf16Inputs rounded{{DNNL_ARG_SRC, 0}};
  memory b;
  memory::desc b_desc;
  if (packs_bf16_weight(ctx, 1)) {  // f32 here; execute() rounds and packs it once
    b = bind(ctx, strided_desc(b_dims, b_strides), ctx.input(1)->data);
    b_desc = memory::desc(b_dims, memory::data_type::bf16, memory::format_tag::any);
  } else {
    KILN_ASSIGN_OR_RETURN(b, bf16_input(ctx, 1, b_dims, b_strides));
    b_desc = b.get_desc();
    rounded.push_back({DNNL_ARG_WEIGHTS, 1});
  }
  const memory::desc y = plain_desc(y_dims);
  memory::desc bias_desc;
  if (bias) {
    Shape dims(y_dims.size(), 1);
    dims.back() = y_dims.back();
    bias_desc = plain_desc(dims);
    args.emplace(DNNL_ARG_BIAS, bind(ctx, bias_desc, bias->data));
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a.get_desc(), b_desc, bias_desc, y), attr, ctx.cpu->engine);
  args.emplace(DNNL_ARG_SRC, a);
  args.emplace(DNNL_ARG_WEIGHTS, b);
  args.emplace(DNNL_ARG_DST, bind(ctx, y, ctx.output(0)->data));
  return execute<dnnl::matmul>(ctx, pd, std::move(args), rounded);
}

Result<void*> scratch_bytes(KernelContext& ctx, size_t bytes, std::string_view what) {
  void* p = ctx.workspace->scratch(bytes);
  if (!p) return resource_exhausted("{}: no scratch for {}", node_label(*ctx.node), what);
  return p;
}

Result<float*> scratch_floats(KernelContext& ctx, int64_t count, std::string_view what) {
  KILN_ASSIGN_OR_RETURN(void* p, scratch_bytes(ctx, size_t(count) * sizeof(float), what));
  return static_cast<float*>(p);
}

void fill_zero(TensorView& y) { std::memset(y.data, 0, y.nbytes()); }

// y[n, c, ...] = bias[c], or 0 without a bias.
void fill_bias(TensorView& y, const TensorView* bias) {
  if (!bias) return fill_zero(y);
  const int64_t channels = y.shape[1], plane = y.numel() / (y.shape[0] * channels);
  float* py = y.as<float>();
  parallel_for(y.numel() / plane, y.numel() > kParallelWork, [&](int64_t row) {
    std::fill_n(py + row * plane, plane, bias->as<float>()[row % channels]);
  });
}

// dst viewed through dst_strides = src viewed through src_strides, over `dims`.
void copy_strided(const float* src, const Shape& src_strides, float* dst, const Shape& dst_strides,
                  const Shape& dims) {
  const int64_t count = shape_numel(dims);
  if (count == 0) return;
  const size_t rank = dims.size();
  const int64_t inner = rank ? dims.back() : 1;
  const int64_t src_inner = rank ? src_strides.back() : 0, dst_inner = rank ? dst_strides.back() : 0;
  parallel_for(count / inner, count > kParallelWork, [&](int64_t row) {
    int64_t src_offset = 0, dst_offset = 0;
    for (int64_t rest = row, d = int64_t(rank) - 1; d-- > 0; rest /= dims[size_t(d)]) {
      src_offset += rest % dims[size_t(d)] * src_strides[size_t(d)];
      dst_offset += rest % dims[size_t(d)] * dst_strides[size_t(d)];
    }
    for (int64_t i = 0; i < inner; ++i) dst[dst_offset + i * dst_inner] = src[src_offset + i * src_inner];
  });
}

}  // namespace

namespace {

// A constant B operand packed once by a plan step's first call (gemm.h):
// floats for f32 products, bf16 for bf16 ones.
template <typename T>
struct PackedOperand final : KernelState {
  T* data = nullptr;
  size_t count = 0;
  size_t index = 0;  // the input it is a copy of
  ~PackedOperand() override { std::free(data); }
  size_t owned_bytes() const override { return count * sizeof(T); }
  bool copies_input(size_t i) const override { return i == index; }
};

// gemm's packing for each type of product.
int64_t packed_count(const float*, int64_t k, int64_t n) { return gemm::packed_floats(k, n); }
int64_t packed_count(const bf16*, int64_t k, int64_t n) { return gemm::packed_bf16_count(k, n); }
void pack_as(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* packed,
             float scale) {
  gemm::pack(b, row_stride, col_stride, k, n, packed, scale);
}
void pack_as(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, bf16* packed,
             float scale) {
  gemm::pack_bf16(b, row_stride, col_stride, k, n, packed, scale);
}

// `count` values (64-byte aligned) for `owner`, a plan step's copy of
// constant input `index`.
template <typename T>
Status allocate_owned(const KernelContext& ctx, PackedOperand<T>& owner, size_t index, size_t count) {
  owner.count = count;
  owner.index = index;
  owner.data = static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64));
  if (!owner.data) return resource_exhausted("{}: no memory for its copy of input {}", node_label(*ctx.node), index);
  return ok_status();
}

// Packs B (element (t, j) at b[t * row_stride + j * col_stride], times
// `scale`) into `owner`'s own buffer: a plan step's copy of constant input
// `index`.
template <typename T>
Status pack_owned(const KernelContext& ctx, PackedOperand<T>& owner, size_t index, const float* b,
                  int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float scale = 1.0f) {
  KILN_RETURN_IF_ERROR(allocate_owned(ctx, owner, index, size_t(packed_count(owner.data, k, n))));
  pack_as(b, row_stride, col_stride, k, n, owner.data, scale);
  return ok_status();
}

// B packed for the GEMM (T = float) or its bf16 products (T = bf16) and
// scaled by `scale`: from the step's state when a plan packed it already,
// into the state when input `index` is a constant this step records, else
// into scratch.
template <typename T = float>
Result<const T*> packed_operand(KernelContext& ctx, size_t index, const float* b, int64_t row_stride,
                                int64_t col_stride, int64_t k, int64_t n, float scale = 1.0f) {
  if (ctx.state && *ctx.state)
    if (const auto* p = dynamic_cast<const PackedOperand<T>*>(ctx.state->get())) return p->data;
  if (packs_weight(ctx, index)) {
    auto state = std::make_unique<PackedOperand<T>>();
    KILN_RETURN_IF_ERROR(pack_owned(ctx, *state, index, b, row_stride, col_stride, k, n, scale));
    const T* packed = state->data;
    *ctx.state = std::move(state);
    return packed;
  }
  const int64_t count = packed_count(static_cast<T*>(nullptr), k, n);
  KILN_ASSIGN_OR_RETURN(void* packed, scratch_bytes(ctx, size_t(count) * sizeof(T), "a packed operand"));
  pack_as(b, row_stride, col_stride, k, n, static_cast<T*>(packed), scale);
  return static_cast<const T*>(packed);
}

// Whether this node's products run in f32 on operands rounded through bf16
// (Bf16Gemm::kKilnF32: it computes in bf16 on a CPU without bf16 products).
// The CPU's answer first: f32 replays then look up no attribute.
bool rounds_operands(const KernelContext& ctx) {
  return bf16_gemm() == Bf16Gemm::kKilnF32 && computes_in_bf16(*ctx.node);
}

// Input `index` as f32 products read it: itself, or rounded through bf16
// into scratch where rounds_operands().
Result<const float*> product_input(KernelContext& ctx, size_t index) {
  const TensorView& x = *ctx.input(index);
  if (!rounds_operands(ctx)) return x.as<float>();
  return rounded_f32_copy(ctx, x.as<float>(), x.numel());
}

// packed_operand<float>, its values rounded through bf16 where
// rounds_operands(): once, as it is packed (a plan's copy keeps them so).
Result<const float*> packed_product_operand(KernelContext& ctx, size_t index, const float* b, int64_t row_stride,
                                            int64_t col_stride, int64_t k, int64_t n, float scale = 1.0f) {
  if (!rounds_operands(ctx)) return packed_operand(ctx, index, b, row_stride, col_stride, k, n, scale);
  const bool packed_before = ctx.state && dynamic_cast<const PackedOperand<float>*>(ctx.state->get());
  KILN_ASSIGN_OR_RETURN(const float* packed, packed_operand(ctx, index, b, row_stride, col_stride, k, n, scale));
  if (!packed_before) {
    float* values = const_cast<float*>(packed);  // just packed, by this call: the state's or scratch
    round_through_bf16(values, values, gemm::packed_floats(k, n), true);
  }
  return packed;
}

// `rows` rows of k floats rounded to bf16 for gemm's bf16 products (an A
// operand): rows of gemm::bf16_depth(k), an odd k's last column zero.
void round_rows_to_bf16(const float* in, int64_t rows, int64_t k, bf16* out) {
  const int64_t depth = gemm::bf16_depth(k);
  if (depth == k) return round_to_bf16(in, out, rows * k, true);
  parallel_for(rows, rows * k >= kParallelMinElements, [&](int64_t i) {
    round_to_bf16(in + i * k, out + i * depth, k, false);
    out[i * depth + k] = bf16{0};
  });
}

// Input 0 (f32, `rows` rows of k) so rounded into scratch.
Result<const bf16*> bf16_rows(KernelContext& ctx, int64_t rows, int64_t k) {
  KILN_ASSIGN_OR_RETURN(void* p,
                        scratch_bytes(ctx, size_t(rows * gemm::bf16_depth(k)) * sizeof(bf16), "a bf16 operand"));
  round_rows_to_bf16(ctx.input(0)->as<float>(), rows, k, static_cast<bf16*>(p));
  return static_cast<const bf16*>(p);
}

// kiln.Linear's gate (input 4; DiT's adaLN-Zero gate) as e's scale: one
// row of N for each of the gate's equal runs of Y's `rows` (a batch entry's
// tokens).
void set_gate(const KernelContext& ctx, int64_t rows, int64_t n, gemm::Epilogue& e) {
  const TensorView* gate = ctx.input(4);
  if (!gate || n == 0) return;
  const int64_t runs = gate->numel() / n;
  e.scale = gate->as<float>();
  e.scale_rows = runs > 1 ? rows / runs : 0;
  e.scale_stride = n;
}

// Y[rows, n] = epilogue(A B) on gemm's bf16 products (where bf16_gemm() is
// kKiln): A is input 0 (rows of k) rounded by
// bf16_rows; B is input 1 (element (t, j) at
// b[t * row_stride + j * col_stride]) packed once in a plan, else on each
// call.
Status multiply_bf16(KernelContext& ctx, int64_t rows, int64_t n, int64_t k, int64_t row_stride,
                     int64_t col_stride, const gemm::Epilogue& e) {
  KILN_ASSIGN_OR_RETURN(const bf16* packed,
                        packed_operand<bf16>(ctx, 1, ctx.input(1)->as<float>(), row_stride, col_stride, k, n));
  KILN_ASSIGN_OR_RETURN(const bf16* a, bf16_rows(ctx, rows, k));
  const int64_t depth = gemm::bf16_depth(k);
  gemm::Epilogue f = e;
  set_gate(ctx, rows, n, f);
  gemm::multiply(gemm::Bf16Problem{rows, n, depth, a, depth, packed, ctx.output(0)->as<float>(), n}, f, true);
  return ok_status();
}

// Where oneDNN ran kiln.Linear's product (its post-ops have no gate that
// changes from one run of rows to the next): Y = Y * gate + residual after.
Status apply_gate(KernelContext& ctx) {
  if (!ctx.input(4)) return ok_status();
  float* y = ctx.output(0)->as<float>();
  const float* residual = ctx.input(3) ? ctx.input(3)->as<float>() : nullptr;
  const int64_t n = ctx.input(1)->shape[1], rows = n ? ctx.output(0)->numel() / n : 0;
  gemm::Epilogue e;
  set_gate(ctx, rows, n, e);
  parallel_for(rows, rows * n > kParallelWork, [&](int64_t i) {
    const float* scale = e.scale + (e.scale_rows ? i / e.scale_rows * n : 0);
    float* row = y + i * n;
    if (residual)
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] * scale[j] + residual[i * n + j];
    else
      for (int64_t j = 0; j < n; ++j) row[j] *= scale[j];
  });
  return ok_status();
}

// kiln.Linear's and kiln.Conv's epilogue: bias (input 2), activation,
// residual (input 3, shaped like the output).
gemm::Epilogue fused_epilogue(const KernelContext& ctx, bool bias_per_row) {
  gemm::Epilogue e;
  if (const TensorView* bias = ctx.input(2)) e.bias = bias->as<float>();
  e.bias_per_row = bias_per_row;
  if (ctx.node->op == OpKind::kLinear || ctx.node->op == OpKind::kFusedConv) {
    const std::string act = ctx.attrs().get_string("activation", "none");
    e.activate = act != "none";
    e.activation = act == "gelu"        ? simd::UnaryF32::kGelu
                   : act == "gelu_tanh" ? simd::UnaryF32::kGeluTanh
                   : act == "swish"     ? simd::UnaryF32::kSilu
                                        : simd::UnaryF32::kRelu;
    if (act == "swish") e.params.alpha = ctx.attrs().get_float("alpha", 1.0f);
    if (const TensorView* residual = ctx.input(3)) e.residual = residual->as<float>();
  }
  return e;
}

// Scratch for one packed B per thread, for batches run side by side.
int64_t thread_slots() { return omp_get_max_threads(); }

}  // namespace

// MatMul computed in bf16 (run_matmul_bf16): A folded to rows when B is one
// matrix, else one batched product with the batch dims broadcast.
Status matmul_bf16(KernelContext& ctx, int64_t m, int64_t n, int64_t k) {
  const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
  const TensorView& y = *ctx.output(0);
  if (b.numel() == k * n) {
    const int64_t rows = a.numel() / k;
    return run_matmul_bf16(ctx, {rows, k}, {k, 1}, {k, n}, {n, 1}, {rows, n}, nullptr, user_scratchpad_attr());
  }
  // Batched; 1-D operands as a [1, k] row and a [k, 1] column.
  auto padded = [&](const Shape& s, bool column) {
    Shape d = s.size() == 1 ? (column ? Shape{s[0], 1} : Shape{1, s[0]}) : s;
    d.insert(d.begin(), y.shape.size() + (a.rank() == 1 || b.rank() == 1) - d.size(), 1);
    return d;
  };
  const Shape a_dims = padded(a.shape, false), b_dims = padded(b.shape, true);
  Shape y_dims(a_dims.begin(), a_dims.end() - 2);
  for (size_t d = 0; d < y_dims.size(); ++d) y_dims[d] = std::max(a_dims[d], b_dims[d]);
  y_dims.push_back(m);
  y_dims.push_back(n);
  return run_matmul_bf16(ctx, a_dims, shape_strides(a_dims), b_dims, shape_strides(b_dims), y_dims, nullptr,
                         user_scratchpad_attr());
}

Status cpu_MatMul(KernelContext& ctx) {
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  // 1-D operands: A a row, B a column (no Shape copies: a replay allocates nothing).
  const size_t a_rank = a.shape.size(), b_rank = b.shape.size();
  const int64_t k = a.shape.back(), n = b_rank == 1 ? 1 : b.shape.back();
  const int64_t m = a_rank == 1 ? 1 : a.shape[a_rank - 2];
  if (k == 0) {
    fill_zero(y);
    return ok_status();
  }
  if (computes_in_bf16(*ctx.node) && bf16_gemm() != Bf16Gemm::kKilnF32) {
    if (b.numel() == k * n && bf16_gemm() == Bf16Gemm::kKiln) return multiply_bf16(ctx, a.numel() / k, n, k, n, 1, {});
    return guard_dnnl(ctx, [&] { return matmul_bf16(ctx, m, n, k); });
  }
  KILN_ASSIGN_OR_RETURN(const float* pa, product_input(ctx, 0));
  const float* pb = b.as<float>();
  float* py = y.as<float>();
  // B shared by every batch (a 2-D weight): fold A's batch into its rows,
  // one large GEMM instead of many small ones.
  if (b.numel() == k * n) {
    KILN_ASSIGN_OR_RETURN(const float* packed, packed_product_operand(ctx, 1, pb, n, 1, k, n));
    gemm::multiply({a.numel() / k, n, k, pa, k, packed, py, n}, {}, true);
    return ok_status();
  }
  // Batched: each output matrix from its (possibly broadcast) A and B. The
  // batch dims, right-aligned: extents of Y, and A's and B's strides (0 where
  // one broadcasts).
  constexpr size_t kMaxBatchDims = 8;
  const size_t batch_dims = y.shape.size() - (a_rank == 1 || b_rank == 1 ? 1 : 2);
  if (batch_dims > kMaxBatchDims) return ctx.unsupported_error("{} batch dims (at most {})", batch_dims, kMaxBatchDims);
  std::array<int64_t, kMaxBatchDims> extent{}, a_step{}, b_step{};
  for (size_t d = batch_dims, a_stride = size_t(m * k), b_stride = size_t(k * n); d-- > 0;) {
    extent[d] = y.shape[d];
    const size_t from_end = batch_dims - d;  // 1 for the innermost batch dim
    const int64_t a_dim = a_rank >= from_end + 2 ? a.shape[a_rank - 2 - from_end] : 1;
    const int64_t b_dim = b_rank >= from_end + 2 ? b.shape[b_rank - 2 - from_end] : 1;
    a_step[d] = a_dim == 1 ? 0 : int64_t(a_stride);
    b_step[d] = b_dim == 1 ? 0 : int64_t(b_stride);
    a_stride *= size_t(a_dim), b_stride *= size_t(b_dim);
  }
  if (rounds_operands(ctx)) {
    KILN_ASSIGN_OR_RETURN(pb, product_input(ctx, 1));
  }
  const int64_t batches = y.numel() / (m * n);
  const int64_t slot = thread_slot<float>(gemm::packed_floats(k, n));
  const int64_t slots = batches >= thread_slots() ? thread_slots() : 1;
  KILN_ASSIGN_OR_RETURN(float* scratch, scratch_floats(ctx, slots * slot, "packed operands"));
  auto one = [&](int64_t batch, float* packed, bool parallel) {
    int64_t a_offset = 0, b_offset = 0;
    for (size_t d = batch_dims, rest = size_t(batch); d-- > 0; rest /= size_t(extent[d])) {
      const int64_t i = int64_t(rest % size_t(extent[d]));
      a_offset += i * a_step[d];
      b_offset += i * b_step[d];
    }
    gemm::pack(pb + b_offset, n, 1, k, n, packed);
    const gemm::Problem p{m, n, k, pa + a_offset, k, packed, py + batch * m * n, n};
    if (parallel) gemm::multiply(p, {}, true);
    else gemm::block(p, {});
  };
  if (slots == 1) {
    for (int64_t batch = 0; batch < batches; ++batch) one(batch, scratch, true);
  } else {
    parallel_for(batches, batches * m * n * k > kParallelWork,
                 [&](int64_t batch) { one(batch, scratch + omp_get_thread_num() * slot, false); });
  }
  return ok_status();
}

Status cpu_Gemm(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
  const TensorView* c = ctx.input(2);
  TensorView& y = *ctx.output(0);
  const bool trans_a = ctx.attrs().get_int("transA", 0) != 0;
  const bool trans_b = ctx.attrs().get_int("transB", 0) != 0;
  const float alpha = ctx.attrs().get_float("alpha", 1.0f), beta = ctx.attrs().get_float("beta", 1.0f);
  const int64_t m = y.shape[0], n = y.shape[1], k = a.shape[trans_a ? 0 : 1];
  if (y.numel() == 0) return ok_status();
  float* py = y.as<float>();

  // Y = beta * C broadcast first; the products are then added to it.
  const bool add_c = c && beta != 0.0f;
  if (add_c) {
    const int64_t c_rows = c->rank() == 2 ? c->shape[0] : 1;
    const int64_t c_cols = c->rank() >= 1 ? c->shape.back() : 1;
    const float* pc = c->as<float>();
    parallel_for(m, m * n > kParallelWork, [&](int64_t i) {
      const float* row = pc + (c_rows == 1 ? 0 : i * c_cols);
      for (int64_t j = 0; j < n; ++j) py[i * n + j] = beta * row[c_cols == 1 ? 0 : j];
    });
  }
  if (k == 0) {  // no products: Y = beta * C
    if (!add_c) fill_zero(y);
    return ok_status();
  }
  if (computes_in_bf16(*ctx.node) && !trans_a && alpha == 1.0f && bf16_gemm() != Bf16Gemm::kKilnF32) {
    // The products added to Y.
    if (bf16_gemm() == Bf16Gemm::kKiln)
      return multiply_bf16(ctx, m, n, k, trans_b ? 1 : n, trans_b ? k : 1, {.accumulate = add_c});
    if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
    return guard_dnnl(ctx, [&] {
      dnnl::primitive_attr attr = user_scratchpad_attr();
      dnnl::post_ops sum;
      if (add_c) sum.append_sum(1.0f);
      attr.set_post_ops(sum);
      return run_matmul_bf16(ctx, {m, k}, {k, 1}, {k, n}, trans_b ? Shape{1, k} : Shape{n, 1}, {m, n}, nullptr, attr);
    });
  }
  // kKilnF32: rounded through bf16 (as where the bf16 products above run);
  // a transposed A, or an alpha, keeps f32 on every CPU.
  const bool rounded = rounds_operands(ctx) && !trans_a && alpha == 1.0f;
  const float* pa = a.as<float>();
  if (rounded) {
    KILN_ASSIGN_OR_RETURN(pa, product_input(ctx, 0));
  }
  if (trans_a) {  // the GEMM reads A by rows: transpose it into scratch
    KILN_ASSIGN_OR_RETURN(float* at, scratch_floats(ctx, m * k, "A transposed"));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t t = 0; t < k; ++t) at[i * k + t] = pa[t * m + i];
    pa = at;
  }
  const float* pb = b.as<float>();
  const int64_t row_stride = trans_b ? 1 : n, col_stride = trans_b ? k : 1;
  KILN_ASSIGN_OR_RETURN(const float* packed, rounded ? packed_product_operand(ctx, 1, pb, row_stride, col_stride, k, n)
                                                     : packed_operand(ctx, 1, pb, row_stride, col_stride, k, n, alpha));
  gemm::multiply({m, n, k, pa, k, packed, py, n}, {.accumulate = add_c}, true);
  return ok_status();
}

namespace {

// An ungrouped 1-D or 2-D convolution's sizes (1-D as height 1), worked out
// once: a plan step keeps them as its state, so replays read no attributes.
struct ConvGeometry final : KernelState {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  // Fewer output pixels an image than a GEMM panel is wide (an SD UNet's
  // 4x4 level): every image's pixels together are the GEMM's rows, against
  // the weight packed as B, instead of a product per image that leaves most
  // of each panel empty and reads the whole weight once per image.
  bool pixels_as_rows = false;
  // Stride 1 and whole GEMM panels in an output row (VAE and UNet convs at
  // 32 pixels wide and up): the GEMM reads each patch row where it lies in
  // one zero-padded copy of the input (gemm::Problem::b_rows), not from an
  // im2col copy, which writes and reads back 9 times the input for a 3x3
  // kernel (3-8 % faster on SD's VAE and UNet convs).
  bool rows_in_place = false;
  // 3x3, stride 1, enough channels and tiles: Winograd's F(m x m, 3x3)
  // (winograd.h), its m here (2 or 4; 0: not Winograd).
  int64_t winograd_tile = 0;
  // Its products in bf16, on kiln's GEMM (where bf16_gemm() says so;
  // elsewhere bf16 convolutions run on oneDNN).
  bool bf16_products = false;
  // Its products in f32 on the input and weight rounded through bf16
  // (Bf16Gemm::kKilnF32).
  bool rounds_operands = false;
  // The weight as the conv reads it, made once in a plan (own_conv_weight):
  // packed as B (pixels_as_rows), Winograd's transformed filters, or rows
  // rounded to bf16 (or through bf16: rounds_operands).
  PackedOperand<float> weight;
  PackedOperand<bf16> bf16_weight;
  int64_t patch() const { return in_channels * kernel_h * kernel_w; }  // GEMM's K
  int64_t pixels() const { return out_height * out_width; }
  size_t owned_bytes() const override { return weight.owned_bytes() + bf16_weight.owned_bytes(); }
  bool copies_input(size_t index) const override {
    return (weight.data && weight.copies_input(index)) || (bf16_weight.data && bf16_weight.copies_input(index));
  }
};

const ConvGeometry* geometry_of(const KernelContext& ctx) {
  return ctx.state ? dynamic_cast<const ConvGeometry*>(ctx.state->get()) : nullptr;
}

// A convolution's input and weight as its f32 products read them: x and w
// themselves, or, where g.rounds_operands, rounded through bf16: x into
// scratch on every call, w as the plan's copy holds it (own_conv_weight;
// Winograd's and pixels_as_rows' read that copy, not w) or into scratch.
struct ConvOperands {
  const float *x, *w;
};
Result<ConvOperands> conv_operands(KernelContext& ctx, const ConvGeometry& g) {
  ConvOperands in{ctx.input(0)->as<float>(), ctx.input(1)->as<float>()};
  if (!g.rounds_operands) return in;
  KILN_ASSIGN_OR_RETURN(in.x, rounded_f32_copy(ctx, in.x, ctx.input(0)->numel()));
  if (!g.weight.data) {
    KILN_ASSIGN_OR_RETURN(in.w, rounded_f32_copy(ctx, in.w, ctx.input(1)->numel()));
  } else if (!g.winograd_tile && !g.pixels_as_rows) {
    in.w = g.weight.data;
  }
  return in;
}

// Packs the input patches of output pixels [p0, p0 + count) of one image
// (im2col) straight into GEMM panels: row t = (channel, kernel row, kernel
// column) of B holds, for each pixel, the input value under that tap, 0 in
// the padding. Only channels [c_begin, c_end): the rows of the others are
// left to another thread. Pixels of one output row read consecutive inputs (with stride
// 1, a plain copy).
void pack_patches(const ConvGeometry& g, const float* x, int64_t p0, int64_t count, int64_t c_begin,
                  int64_t c_end, float* panels) {
  const int64_t w = gemm::panel_width(), taps = g.kernel_h * g.kernel_w;
  for (int64_t q0 = p0; q0 < p0 + count; q0 += w, panels += g.patch() * w) {
    const int64_t cols = std::min(w, p0 + count - q0);
    const int64_t first_oh = q0 / g.out_width, first_ow = q0 % g.out_width;
    float* packed = panels + c_begin * taps * w;
    for (int64_t c = c_begin; c < c_end; ++c)
      for (int64_t r = 0; r < g.kernel_h; ++r)
        for (int64_t s = 0; s < g.kernel_w; ++s, packed += w) {
          const float* plane = x + c * g.height * g.width;
          // Runs of pixels along one output row (no division in this loop
          // with stride 1: it runs for every tap of every panel).
          int64_t oh = first_oh, ow = first_ow;
          for (int64_t j = 0; j < cols; ow = 0, ++oh) {
            const int64_t run = std::min(cols - j, g.out_width - ow);
            const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dilation_h;
            const int64_t iw = ow * g.stride_w - g.pad_w + s * g.dilation_w;
            float* out = packed + j;
            if (ih < 0 || ih >= g.height) {
              std::fill_n(out, run, 0.0f);
            } else {
              // Pixels [lo, hi) of the run read inside the row; the rest is padding.
              int64_t lo, hi;
              if (g.stride_w == 1) {
                lo = std::clamp<int64_t>(-iw, 0, run);
                hi = std::clamp<int64_t>(g.width - iw, lo, run);
              } else {
                lo = std::clamp<int64_t>((-iw + g.stride_w - 1) / g.stride_w, 0, run);
                hi = std::clamp<int64_t>((g.width - iw + g.stride_w - 1) / g.stride_w, lo, run);
              }
              const float* in = plane + ih * g.width + iw;
              std::fill(out, out + lo, 0.0f);
              if (g.stride_w == 1) std::copy(in + lo, in + hi, out + lo);
              else
                for (int64_t i = lo; i < hi; ++i) out[i] = in[i * g.stride_w];
              std::fill(out + hi, out + run, 0.0f);
            }
            j += run;
          }
          std::fill(packed + cols, packed + w, 0.0f);
        }
  }
}

// A convolution's output channels in groups, one task per group and chunk of
// pixels: one group while the pixel tasks keep every thread busy, else up to
// one per thread (of 16 channels or more).
struct ChannelGroups {
  int64_t count = 1, size = 0;
  ChannelGroups(int64_t pixel_tasks, int64_t channels) {
    const int64_t threads = thread_slots();
    if (pixel_tasks < threads) count = std::min(threads, (channels + 15) / 16);
    size = (channels + count - 1) / count;
  }
};

// The epilogue of the task writing output channels from c0 on at y + y_offset.
gemm::Epilogue epilogue_at(gemm::Epilogue e, int64_t c0, int64_t y_offset) {
  if (e.bias) e.bias += c0;
  if (e.residual) e.residual += y_offset;
  return e;
}

// The f32 panels pack_patches wrote for `count` pixels (K x count) packed
// again for bf16 products (gemm::pack_bf16): panel by panel.
void panels_to_bf16(const float* panels, int64_t k, int64_t count, bf16* packed) {
  const int64_t w = gemm::panel_width();
  for (int64_t q = 0; q < count; q += w, panels += k * w, packed += gemm::packed_bf16_count(k, w))
    gemm::pack_bf16(panels, w, 1, k, std::min(w, count - q), packed);
}

// Y[image] = W [OC, K] x patches [K, pixels], in tasks of one image, one
// chunk of pixels (packed into the thread's scratch) and one group of output
// channels; the bias (per channel), activation and residual ride along.
// With bf16 products (g.bf16_products), W is rows of gemm::bf16_depth(K)
// rounded to bf16 (g.bf16_weight in a plan, else rounded on this call) and
// the patches are packed again from f32 into bf16 panels.
Status conv_gemm(KernelContext& ctx, const ConvGeometry& g) {
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const float *x = in.x, *w = in.w;
  float* y = ctx.output(0)->as<float>();
  const int64_t k = g.patch(), pixels = g.pixels(), oc = g.out_channels, depth = gemm::bf16_depth(k);
  const int64_t chunk = 4 * gemm::panel_width();
  const int64_t chunks = (pixels + chunk - 1) / chunk, pixel_tasks = g.batch * chunks;
  const int64_t threads = thread_slots();
  const ChannelGroups groups(pixel_tasks, oc);  // fewer chunks than threads: the channels split too
  const int64_t channel_groups = groups.count, group_size = groups.size;
  // Channel groups share their chunk's patches, packed first, split by input
  // channel (there are fewer chunks than threads); otherwise each task packs
  // its own, in its thread's slot.
  const bool shared = channel_groups > 1;
  const int64_t buffers = shared ? pixel_tasks : threads;
  // A buffer's floats, and its bf16 values, from one to the next.
  const int64_t patch_floats = gemm::packed_floats(k, chunk), patch_bf16 = gemm::packed_bf16_count(k, chunk);
  const int64_t chunk_floats = shared ? patch_floats : thread_slot<float>(patch_floats);
  const int64_t chunk_bf16 = shared ? patch_bf16 : thread_slot<bf16>(patch_bf16);
  KILN_ASSIGN_OR_RETURN(float* scratch, scratch_floats(ctx, buffers * chunk_floats, "input patches"));
  const bf16* w_bf16 = g.bf16_weight.data;
  bf16* patches_bf16 = nullptr;
  if (g.bf16_products) {
    KILN_ASSIGN_OR_RETURN(void* p, scratch_bytes(ctx, size_t(buffers * chunk_bf16) * sizeof(bf16), "bf16 patches"));
    patches_bf16 = static_cast<bf16*>(p);
    if (!w_bf16) {
      KILN_ASSIGN_OR_RETURN(void* rows, scratch_bytes(ctx, size_t(oc * depth) * sizeof(bf16), "the bf16 weight"));
      round_rows_to_bf16(w, oc, k, static_cast<bf16*>(rows));
      w_bf16 = static_cast<const bf16*>(rows);
    }
  }
  const gemm::Epilogue epilogue = fused_epilogue(ctx, true);
  auto patches_of = [&](int64_t pixel_task, int64_t c_begin, int64_t c_end, float* packed) {
    const int64_t image = pixel_task / chunks, p0 = pixel_task % chunks * chunk;
    pack_patches(g, x + image * g.in_channels * g.height * g.width, p0, std::min(chunk, pixels - p0), c_begin,
                 c_end, packed);
  };
  auto count_of = [&](int64_t pixel_task) { return std::min(chunk, pixels - pixel_task % chunks * chunk); };
  if (shared) {
    for (int64_t t = 0; t < pixel_tasks; ++t)
      parallel_ranges(g.in_channels, true, [&](int64_t c_begin, int64_t c_end) {
        patches_of(t, c_begin, c_end, scratch + t * chunk_floats);
      });
    if (g.bf16_products)
      parallel_for(pixel_tasks, true, [&](int64_t t) {
        panels_to_bf16(scratch + t * chunk_floats, k, count_of(t), patches_bf16 + t * chunk_bf16);
      });
  }
  const int64_t work = g.batch * oc * pixels * k;
  parallel_for(pixel_tasks * channel_groups, work > kParallelWork, [&](int64_t task) {
    const int64_t pixel_task = task / channel_groups;
    const int64_t image = pixel_task / chunks, p0 = pixel_task % chunks * chunk, count = count_of(pixel_task);
    const int64_t c0 = task % channel_groups * group_size, channels = std::min(group_size, oc - c0);
    if (channels <= 0) return;
    const int64_t buffer = shared ? pixel_task : omp_get_thread_num();
    float* packed = scratch + buffer * chunk_floats;
    const int64_t y_offset = (image * oc + c0) * pixels + p0;
    const gemm::Epilogue e = epilogue_at(epilogue, c0, y_offset);
    if (!shared) patches_of(pixel_task, 0, g.in_channels, packed);
    if (!g.bf16_products) return gemm::block({channels, count, k, w + c0 * k, k, packed, y + y_offset, pixels}, e);
    bf16* packed_bf16 = patches_bf16 + buffer * chunk_bf16;
    if (!shared) panels_to_bf16(packed, k, count, packed_bf16);
    gemm::block(gemm::Bf16Problem{channels, count, depth, w_bf16 + c0 * depth, depth, packed_bf16, y + y_offset,
                                  pixels},
                e);
  });
  return ok_status();
}

// Input patches of output pixel `row` (of every image's, in order) as one
// row of K: (channel, kernel row, kernel column), 0 in the padding.
void gather_patch_row(const ConvGeometry& g, const float* x, int64_t row, float* out) {
  const int64_t image = row / g.pixels(), pixel = row % g.pixels();
  const int64_t oh = pixel / g.out_width, ow = pixel % g.out_width;
  for (int64_t c = 0; c < g.in_channels; ++c) {
    const float* plane = x + (image * g.in_channels + c) * g.height * g.width;
    for (int64_t r = 0; r < g.kernel_h; ++r) {
      const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dilation_h;
      for (int64_t s = 0; s < g.kernel_w; ++s) {
        const int64_t iw = ow * g.stride_w - g.pad_w + s * g.dilation_w;
        *out++ = ih >= 0 && ih < g.height && iw >= 0 && iw < g.width ? plane[ih * g.width + iw] : 0.0f;
      }
    }
  }
}

// pixels_as_rows: patches [images x pixels, K] gathered into scratch, times
// the weight packed as B ([K, OC]: the step's copy, or packed into scratch)
// with the bias and activation, then transposed into Y [image, OC, pixels]
// with the residual added on the way.
Status conv_pixel_rows(KernelContext& ctx, const ConvGeometry& g) {
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const float *x = in.x, *w = in.w;
  float* y = ctx.output(0)->as<float>();
  const int64_t k = g.patch(), pixels = g.pixels(), rows = g.batch * pixels, oc = g.out_channels;
  KILN_ASSIGN_OR_RETURN(float* patches, scratch_floats(ctx, rows * k, "input patches"));
  KILN_ASSIGN_OR_RETURN(float* product, scratch_floats(ctx, rows * oc, "the product"));
  parallel_for(rows, rows * k > kParallelWork, [&](int64_t row) { gather_patch_row(g, x, row, patches + row * k); });
  gemm::Epilogue e = fused_epilogue(ctx, false);
  const float* residual = std::exchange(e.residual, nullptr);  // shaped like Y, not like the product
  // B[t, o] = W[o, t], packed: by the plan, else here.
  if (g.bf16_products) {
    const bf16* packed = g.bf16_weight.data;
    if (!packed) {
      KILN_ASSIGN_OR_RETURN(void* p, scratch_bytes(ctx, size_t(gemm::packed_bf16_count(k, oc)) * sizeof(bf16),
                                                   "the packed weight"));
      gemm::pack_bf16(w, 1, k, k, oc, static_cast<bf16*>(p));
      packed = static_cast<const bf16*>(p);
    }
    const int64_t depth = gemm::bf16_depth(k);
    KILN_ASSIGN_OR_RETURN(void* a, scratch_bytes(ctx, size_t(rows * depth) * sizeof(bf16), "bf16 patches"));
    round_rows_to_bf16(patches, rows, k, static_cast<bf16*>(a));
    gemm::multiply(gemm::Bf16Problem{rows, oc, depth, static_cast<const bf16*>(a), depth, packed, product, oc}, e,
                   true);
  } else {
    const float* packed = g.weight.data;
    if (!packed) {
      KILN_ASSIGN_OR_RETURN(float* p, scratch_floats(ctx, gemm::packed_floats(k, oc), "the packed weight"));
      gemm::pack(w, 1, k, k, oc, p);
      packed = p;
    }
    gemm::multiply({rows, oc, k, patches, k, packed, product, oc}, e, true);
  }
  parallel_for(g.batch * oc, rows * oc > kParallelWork, [&](int64_t plane) {
    const int64_t image = plane / oc, channel = plane % oc;
    const float* from = product + image * pixels * oc + channel;
    float* to = y + plane * pixels;
    const float* add = residual ? residual + plane * pixels : nullptr;
    for (int64_t q = 0; q < pixels; ++q) to[q] = from[q * oc] + (add ? add[q] : 0.0f);
  });
  return ok_status();
}

// rows_in_place, in tasks of one image, a band of output rows and a group
// of output channels: the band's input rows (and the kernel's reach below
// them) are copied with their zero padding into the thread's scratch, then
// each output row is Y[image, :, row] = W [OC, K] x B, where B's row
// (channel, kernel row r, kernel column s) is the output row's width of
// padded inputs from padded row `row + r * dilation`, column s * dilation.
Status conv_rows_in_place(KernelContext& ctx, const ConvGeometry& g) {
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const float *x = in.x, *w = in.w;
  float* y = ctx.output(0)->as<float>();
  const int64_t k = g.patch(), pixels = g.pixels(), oc = g.out_channels, threads = thread_slots();
  const int64_t reach = (g.kernel_h - 1) * g.dilation_h, padded_w = g.out_width + (g.kernel_w - 1) * g.dilation_w;
  // Padded rows laid out [row, channel, column]: one output row's patches
  // lie in kernel_h runs of contiguous memory. (Laid out [channel, row,
  // column], the reads hop a whole plane per channel and the convs ran 0-12 %
  // slower than with im2col.)
  const int64_t row_stride = g.in_channels * padded_w;
  // Bands of up to 8 rows (a few tasks per thread): the copy is the band's
  // rows and `reach` more, and the scratch a band per thread, not the image.
  const int64_t band = std::clamp<int64_t>(g.batch * g.out_height / (4 * threads), 1, 8);
  const int64_t bands = (g.out_height + band - 1) / band, band_floats = thread_slot<float>((band + reach) * row_stride);
  KILN_ASSIGN_OR_RETURN(float* scratch, scratch_floats(ctx, threads * band_floats, "the padded input rows"));
  KILN_ASSIGN_OR_RETURN(void* offsets, scratch_bytes(ctx, size_t(k) * sizeof(int64_t), "the patch row offsets"));
  auto* b_rows = static_cast<int64_t*>(offsets);
  for (int64_t c = 0, t = 0; c < g.in_channels; ++c)
    for (int64_t r = 0; r < g.kernel_h; ++r)
      for (int64_t s = 0; s < g.kernel_w; ++s)
        b_rows[t++] = r * g.dilation_h * row_stride + c * padded_w + s * g.dilation_w;
  const int64_t band_tasks = g.batch * bands;
  const ChannelGroups groups(band_tasks, oc);
  const int64_t channel_groups = groups.count, group_size = groups.size;
  const gemm::Epilogue epilogue = fused_epilogue(ctx, true);
  parallel_for(band_tasks * channel_groups, g.batch * oc * pixels * k > kParallelWork, [&](int64_t task) {
    const int64_t image = task / channel_groups / bands, row0 = task / channel_groups % bands * band;
    const int64_t rows = std::min(band, g.out_height - row0);
    const int64_t c0 = task % channel_groups * group_size, channels = std::min(group_size, oc - c0);
    if (channels <= 0) return;
    float* padded = scratch + omp_get_thread_num() * band_floats;
    for (int64_t p = 0; p < rows + reach; ++p) {  // padded row row0 + p is input row row0 + p - pad_h
      float* to = padded + p * row_stride;
      const int64_t i = row0 + p - g.pad_h;
      if (i < 0 || i >= g.height) {
        std::fill_n(to, row_stride, 0.0f);
        continue;
      }
      for (int64_t c = 0; c < g.in_channels; ++c, to += padded_w) {
        const float* from = x + ((image * g.in_channels + c) * g.height + i) * g.width;
        std::fill_n(to, g.pad_w, 0.0f);
        std::copy_n(from, g.width, to + g.pad_w);
        std::fill(to + g.pad_w + g.width, to + padded_w, 0.0f);
      }
    }
    // The band's output rows are one product: B's columns are the rows'
    // pixels (a segment per row, row_stride apart in the padded copy), so
    // each slice of the weight is read once for the whole band.
    const int64_t y_offset = (image * oc + c0) * pixels + row0 * g.out_width;
    gemm::block({channels, rows * g.out_width, k, w + c0 * k, k, padded, y + y_offset, pixels, b_rows,
                 g.out_width, row_stride},
                epilogue_at(epilogue, c0, y_offset));
  });
  return ok_status();
}

winograd::Conv winograd_conv(const ConvGeometry& g) {
  return {g.batch, g.in_channels, g.height, g.width, g.out_channels, g.out_height, g.out_width, g.pad_h, g.pad_w,
          g.winograd_tile};
}

// Winograd's filters from w, into `owner`: a plan step's copy of input 1.
template <typename T>
Status own_winograd_filters(const KernelContext& ctx, const ConvGeometry& g, const float* w,
                            PackedOperand<T>& owner) {
  const winograd::Conv c = winograd_conv(g);
  KILN_RETURN_IF_ERROR(allocate_owned(ctx, owner, 1, winograd::filter_count(c, std::is_same_v<T, bf16>)));
  winograd::transform_filters(c, w, owner.data, omp_get_max_threads());
  return ok_status();
}

// Winograd with filters of T: those the plan kept (`kept`), else transformed
// into scratch on this call.
template <typename T>
Status conv_winograd_as(KernelContext& ctx, const ConvGeometry& g, const T* kept) {
  const winograd::Conv c = winograd_conv(g);
  const int threads = omp_get_max_threads();
  constexpr bool bf16 = std::is_same_v<T, kiln::bf16>;
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const T* filters = kept;
  if (!filters) {
    KILN_ASSIGN_OR_RETURN(void* u,
                          scratch_bytes(ctx, winograd::filter_count(c, bf16) * sizeof(T), "Winograd's filters"));
    winograd::transform_filters(c, in.w, static_cast<T*>(u), threads);
    filters = static_cast<const T*>(u);
  }
  KILN_ASSIGN_OR_RETURN(void* scratch,
                        scratch_bytes(ctx, winograd::scratch_bytes(c, threads, bf16), "Winograd's tiles"));
  const TensorView *bias = ctx.input(2), *residual = ctx.node->op == OpKind::kFusedConv ? ctx.input(3) : nullptr;
  winograd::convolve(c, in.x, filters, bias ? bias->as<float>() : nullptr,
                     residual ? residual->as<float>() : nullptr, ctx.output(0)->as<float>(), scratch, threads);
  return ok_status();
}

Status conv_winograd(KernelContext& ctx, const ConvGeometry& g) {
  return g.bf16_products ? conv_winograd_as<bf16>(ctx, g, g.bf16_weight.data)
                         : conv_winograd_as<float>(ctx, g, g.weight.data);
}

// The tile a convolution marked by the winograd_conv pass computes with (0:
// direct): winograd::best_tile's, or the attribute's when it names one
// (winograd = 2 or 4: benchmarks and tests comparing the two).
int64_t winograd_tile(const KernelContext& ctx, const winograd::Conv& c, bool bf16) {
  const int64_t marked = ctx.attrs().get_int("winograd", 0);
  if (marked == 2 || marked == 4) return marked;
  return winograd::best_tile(c, packs_weight(ctx, 1), bf16);
}

// A plan step's copy of its constant weight w as its path reads it:
// Winograd's transformed filters; packed as B (pixels_as_rows); else, for
// bf16 products, its rows rounded to bf16 (f32 products read w itself, or
// its rows rounded through bf16 where g.rounds_operands). Where
// g.rounds_operands, the filters and the packed B are made from w rounded.
Status own_conv_weight(const KernelContext& ctx, ConvGeometry& g, const float* w) {
  const int64_t k = g.patch();
  std::vector<float> rounded;  // a plan's recording call only
  if (g.rounds_operands) {
    const bool rows = !g.winograd_tile && !g.pixels_as_rows;
    if (rows) KILN_RETURN_IF_ERROR(allocate_owned(ctx, g.weight, 1, size_t(g.out_channels * k)));
    else rounded.resize(size_t(g.out_channels * k));
    float* to = rows ? g.weight.data : rounded.data();
    round_through_bf16(w, to, g.out_channels * k, true);
    if (rows) return ok_status();
    w = to;
  }
  if (g.winograd_tile)
    return g.bf16_products ? own_winograd_filters(ctx, g, w, g.bf16_weight) : own_winograd_filters(ctx, g, w, g.weight);
  if (g.pixels_as_rows)
    return g.bf16_products ? pack_owned(ctx, g.bf16_weight, 1, w, 1, k, k, g.out_channels)
                           : pack_owned(ctx, g.weight, 1, w, 1, k, k, g.out_channels);
  if (!g.bf16_products) return ok_status();
  KILN_RETURN_IF_ERROR(allocate_owned(ctx, g.bf16_weight, 1, size_t(g.out_channels * gemm::bf16_depth(k))));
  round_rows_to_bf16(w, g.out_channels, k, g.bf16_weight.data);
  return ok_status();
}

Status conv_gemm_or_rows(KernelContext& ctx, const ConvGeometry& g) {
  if (g.winograd_tile) return conv_winograd(ctx, g);
  if (g.pixels_as_rows) return conv_pixel_rows(ctx, g);
  return g.rows_in_place ? conv_rows_in_place(ctx, g) : conv_gemm(ctx, g);
}

// Below this many output channels (per group), a convolution marked bf16
// computes in f32: oneDNN's bf16 kernels leave most of their tiles empty and
// kiln's f32 GEMM is faster (3x3 over 256 channels at 128x128, f32 against
// bf16: 8 outputs 3.5 against 6.4 ms, 16: 6.4 against 7.0, 32: 12.0 against
// 10.8, 64: 23.4 against 14.3; SD's VAE's last conv, 3 outputs at 256x256,
// 9.5 against 30 ms). Every CPU computes these nodes in f32, so results do
// not depend on the machine.
constexpr int64_t kBf16MinOutChannels = 32;

// A convolution computing in bf16 that kiln's GEMM does not take (grouped or
// 3-D ones, and every one on a CPU without AVX512-BF16) runs on oneDNN, on
// the layouts it picks: over plain NCHW tensors it falls back to im2col and
// a GEMM (x64:gemm:jit, 310-370 GFLOP/s on SD's convs here), in its blocked
// layouts it runs its direct kernels (brgconv, 450-480). Each call reorders
// (and rounds) the input into the conv's layout and the output back into Y;
// a plan step reorders a constant weight once and keeps it. The activation
// is a post-op of the conv; the residual is added by the output reorder (a
// sum onto Y, which first holds the residual).
struct BlockedBf16Conv final : KernelState {
  dnnl::reorder to_blocked, weight_to_blocked, to_plain;
  dnnl::convolution_forward conv;
  memory x, x_blocked, weight, weight_blocked, bias, y_blocked, y, scratchpad;
  bool owns_weight = false;  // weight_blocked is the step's own copy of input 1
  size_t owned_bytes() const override { return owns_weight ? weight_blocked.get_desc().get_size() : 0; }
  bool copies_input(size_t index) const override { return owns_weight && index == 1; }
};

// Scratch for a oneDNN memory object's data (null when it has none).
Result<void*> scratch_for(KernelContext& ctx, const memory& mem, std::string_view what) {
  const size_t bytes = mem.get_desc().get_size();
  if (!bytes) return nullptr;
  return scratch_bytes(ctx, bytes, what);
}

// One call: every buffer re-pointed at this call's tensors and scratch.
Status run_blocked_bf16_conv(KernelContext& ctx, const BlockedBf16Conv& c) {
  const TensorView* residual = ctx.input(3);
  TensorView& y = *ctx.output(0);
  KILN_RETURN_IF_ERROR(point(ctx, c.x, ctx.input(0)->data));
  KILN_RETURN_IF_ERROR(point(ctx, c.y, y.data));
  if (ctx.input(2)) KILN_RETURN_IF_ERROR(point(ctx, c.bias, ctx.input(2)->data));
  KILN_ASSIGN_OR_RETURN(void* x_blocked, scratch_for(ctx, c.x_blocked, "the blocked input"));
  KILN_ASSIGN_OR_RETURN(void* y_blocked, scratch_for(ctx, c.y_blocked, "the blocked output"));
  KILN_ASSIGN_OR_RETURN(void* pad, scratch_for(ctx, c.scratchpad, "oneDNN's scratchpad"));
  KILN_RETURN_IF_ERROR(point(ctx, c.x_blocked, x_blocked));
  KILN_RETURN_IF_ERROR(point(ctx, c.y_blocked, y_blocked));
  KILN_RETURN_IF_ERROR(point(ctx, c.scratchpad, pad));
  dnnl::stream& stream = ctx.cpu->stream;
  c.to_blocked.execute(stream, {{DNNL_ARG_FROM, c.x}, {DNNL_ARG_TO, c.x_blocked}});
  if (!c.owns_weight) {
    KILN_ASSIGN_OR_RETURN(void* w, scratch_for(ctx, c.weight_blocked, "the blocked weight"));
    KILN_RETURN_IF_ERROR(point(ctx, c.weight, ctx.input(1)->data));
    KILN_RETURN_IF_ERROR(point(ctx, c.weight_blocked, w));
    c.weight_to_blocked.execute(stream, {{DNNL_ARG_FROM, c.weight}, {DNNL_ARG_TO, c.weight_blocked}});
  }
  Args args{{DNNL_ARG_SRC, c.x_blocked}, {DNNL_ARG_WEIGHTS, c.weight_blocked}, {DNNL_ARG_DST, c.y_blocked},
            {DNNL_ARG_SCRATCHPAD, c.scratchpad}};
  if (ctx.input(2)) args.emplace(DNNL_ARG_BIAS, c.bias);
  c.conv.execute(stream, args);
  if (residual && residual->data != y.data) {
    stream.wait();
    std::memcpy(y.data, residual->data, y.nbytes());
  }
  c.to_plain.execute(stream, {{DNNL_ARG_FROM, c.y_blocked}, {DNNL_ARG_TO, c.y}});
  stream.wait();
  return ok_status();
}

// Builds the conv (and its reorders) over oneDNN's chosen layouts; a plan
// step keeps it, with a constant weight reordered once.
Status blocked_bf16_conv(KernelContext& ctx, const memory::desc& wd, const memory::dims& strides,
                         const memory::dims& dilates, const memory::dims& pad_l, const memory::dims& pad_r) {
  const TensorView &x = *ctx.input(0), &y = *ctx.output(0);
  const TensorView* bias = ctx.input(2);
  using dt = memory::data_type;
  const dnnl::engine& engine = ctx.cpu->engine;
  const memory::desc xd = plain_desc(x.shape), yd = plain_desc(y.shape);
  auto any = [](const memory::desc& d, dt type) { return memory::desc(d.dims(), type, memory::format_tag::any); };
  const memory::desc bd = bias ? plain_desc(bias->shape) : memory::desc();
  const bool fused = ctx.node->op == OpKind::kFusedConv;  // its activation a post-op, its residual the sum below
  const dnnl::primitive_attr attr = fused ? epilogue_attr(ctx, yd, false) : user_scratchpad_attr();
  const dnnl::convolution_forward::primitive_desc pd(
      {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, any(xd, dt::bf16), any(wd, dt::bf16),
       bd, any(yd, dt::f32), strides, dilates, pad_l, pad_r},
      attr, engine);
  auto c = std::make_unique<BlockedBf16Conv>();
  c->conv = dnnl::convolution_forward(pd);
  c->x = memory(xd, engine, DNNL_MEMORY_NONE);
  c->x_blocked = memory(pd.src_desc(), engine, DNNL_MEMORY_NONE);
  c->y_blocked = memory(pd.dst_desc(), engine, DNNL_MEMORY_NONE);
  c->y = memory(yd, engine, DNNL_MEMORY_NONE);
  c->weight = memory(wd, engine, DNNL_MEMORY_NONE);
  c->scratchpad = memory(pd.scratchpad_desc(), engine, DNNL_MEMORY_NONE);
  if (bias) c->bias = memory(bd, engine, DNNL_MEMORY_NONE);
  c->to_blocked = dnnl::reorder(c->x, c->x_blocked);
  c->weight_to_blocked = dnnl::reorder(c->weight, memory(pd.weights_desc(), engine, DNNL_MEMORY_NONE));
  dnnl::primitive_attr sum;
  if (ctx.input(3)) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    sum.set_post_ops(ops);
  }
  c->to_plain = dnnl::reorder(c->y_blocked, c->y, sum);
  if (packs_weight(ctx, 1)) {  // a plan's constant weight: reordered once, into memory the step owns
    c->weight_blocked = memory(pd.weights_desc(), engine);
    KILN_RETURN_IF_ERROR(point(ctx, c->weight, ctx.input(1)->data));
    c->weight_to_blocked.execute(ctx.cpu->stream, c->weight, c->weight_blocked);
    c->owns_weight = true;
  } else {
    c->weight_blocked = memory(pd.weights_desc(), engine, DNNL_MEMORY_NONE);
  }
  KILN_RETURN_IF_ERROR(run_blocked_bf16_conv(ctx, *c));
  if (recording(ctx)) *ctx.state = std::move(c);
  return ok_status();
}

// Conv and ConvTranspose share everything but the weight layout and the
// primitive. ONNX weights: Conv [OC, IC/g, k...], ConvTranspose [IC, OC/g, k...];
// oneDNN wants both as [OC, IC, k...] (or [g, OC/g, IC/g, k...] with groups),
// which for ConvTranspose is a transposed, strided view.
Status conv_cpu(KernelContext& ctx, bool transpose) {
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  if (const ConvGeometry* g = geometry_of(ctx)) return conv_gemm_or_rows(ctx, *g);
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  if (const auto* c = ctx.state ? dynamic_cast<const BlockedBf16Conv*>(ctx.state->get()) : nullptr)
    return guard_dnnl(ctx, [&] { return run_blocked_bf16_conv(ctx, *c); });
  const TensorView &x = *ctx.input(0), &w = *ctx.input(1);
  const TensorView* bias = ctx.input(2);
  TensorView& y = *ctx.output(0);
  const size_t spatial = size_t(x.rank()) - 2;
  if (spatial < 1 || spatial > 3)
    return ctx.unsupported_error("{} spatial dims (1 to 3 are implemented)", spatial);
  if (y.numel() == 0) return ok_status();
  const Shape kernel_dims(w.shape.begin() + 2, w.shape.end());
  KILN_ASSIGN_OR_RETURN(ConvAttrs a, conv_attrs(*ctx.node, spatial, sym_shape_from(kernel_dims)));
  const int64_t in_channels = x.shape[1], out_channels = y.shape[1], g = a.group;
  if (x.numel() == 0) {  // no input channels: the output is the bias alone
    fill_bias(y, bias);
    return ok_status();
  }

  memory::dims strides = a.strides, dilates(spatial), pad_l(spatial), pad_r(spatial);
  // ConvTranspose outputs that no input reaches (an output_shape larger than
  // the full result) hold the bias only. oneDNN takes a pad_begin >= 0 and a
  // pad_end > -stride, so it computes the window of Y inside those limits,
  // in scratch (it treats a destination as dense from its first element).
  Shape window = y.shape;
  int64_t window_offset = 0;
  const Shape y_strides = shape_strides(y.shape);
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t in = x.shape[2 + d], out = y.shape[2 + d];
    dilates[d] = a.dilations[d] - 1;  // oneDNN counts the gaps
    if (transpose) {
      pad_l[d] = conv_transpose_pad_begin(a, d, in, out);
      if (pad_l[d] < 0) {
        window[2 + d] += pad_l[d];
        window_offset -= pad_l[d] * y_strides[2 + d];
        pad_l[d] = 0;
      }
      pad_r[d] = (in - 1) * a.strides[d] + a.extent(d) - pad_l[d] - window[2 + d];
      if (pad_r[d] <= -a.strides[d]) {
        window[2 + d] += pad_r[d];
        pad_r[d] = 0;
      }
    } else {
      std::tie(pad_l[d], pad_r[d]) = conv_pads(a, d, in, out);
    }
  }
  // In bf16 (never a ConvTranspose: assign_precision marks none), oneDNN's
  // convolution with the input and weights rounded to bf16; with few output
  // channels, f32 (see kBf16MinOutChannels).
  const bool bf16 =
      !transpose && computes_in_bf16(*ctx.node) && out_channels / g >= kBf16MinOutChannels;
  // kiln's GEMM: f32, or bf16 where bf16_gemm() picks it (bf16 products, or
  // f32 ones on rounded operands).
  const bool winograd_marked = ctx.attrs().get_int("winograd", 0) > 0;
  if (!transpose && g == 1 && spatial <= 2 && (!bf16 || bf16_gemm() != Bf16Gemm::kOnednn)) {
    auto geometry = std::make_unique<ConvGeometry>();
    ConvGeometry& cg = *geometry;
    const size_t h = spatial - 1;  // the last spatial dim is the width; 1-D has no height
    cg.batch = x.shape[0], cg.in_channels = in_channels, cg.out_channels = out_channels;
    cg.width = x.shape[2 + h], cg.out_width = y.shape[2 + h], cg.kernel_w = kernel_dims[h];
    cg.stride_w = a.strides[h], cg.pad_w = pad_l[h], cg.dilation_w = a.dilations[h];
    if (spatial == 2) {
      cg.height = x.shape[2], cg.out_height = y.shape[2], cg.kernel_h = kernel_dims[0];
      cg.stride_h = a.strides[0], cg.pad_h = pad_l[0], cg.dilation_h = a.dilations[0];
    } else {
      cg.height = cg.out_height = 1;
    }
    cg.pixels_as_rows = cg.pixels() < gemm::panel_width();
    cg.bf16_products = bf16 && bf16_gemm() == Bf16Gemm::kKiln;
    cg.rounds_operands = bf16 && bf16_gemm() == Bf16Gemm::kKilnF32;
    cg.rows_in_place = !cg.bf16_products && !cg.pixels_as_rows && cg.stride_h == 1 && cg.stride_w == 1 &&
                       cg.out_width % gemm::panel_width() == 0;  // its B rows in place are f32
    if (winograd_marked && spatial == 2 && cg.kernel_h == 3 && cg.kernel_w == 3 && cg.stride_h == 1 &&
        cg.stride_w == 1 && cg.dilation_h == 1 && cg.dilation_w == 1 && !fused_epilogue(ctx, true).activate)
      cg.winograd_tile = winograd_tile(ctx, winograd_conv(cg), cg.bf16_products);
    if (packs_weight(ctx, 1))  // a plan's constant weight, as the path below reads it (conv_gemm_or_rows)
      KILN_RETURN_IF_ERROR(own_conv_weight(ctx, cg, w.as<float>()));
    if (!recording(ctx)) return conv_gemm_or_rows(ctx, cg);
    *ctx.state = std::move(geometry);
    return conv_gemm_or_rows(ctx, *geometry_of(ctx));
  }
  const bool windowed = window != y.shape;
  float* dst = y.as<float>();
  if (windowed) {
    fill_bias(y, bias);
    if (*std::min_element(window.begin(), window.end()) <= 0) return ok_status();
    KILN_ASSIGN_OR_RETURN(dst, scratch_floats(ctx, shape_numel(window), "the output window"));
  }
  const int64_t taps = shape_numel(kernel_dims);
  Shape wd{out_channels / g, in_channels / g}, ws;
  if (transpose) ws = {taps, out_channels / g * taps};  // ONNX [IC/g][OC/g] transposed
  else ws = {in_channels / g * taps, taps};
  if (g > 1) {
    wd.insert(wd.begin(), g);
    ws.insert(ws.begin(), in_channels / g * out_channels / g * taps);
  }
  const Shape kernel_strides = shape_strides(kernel_dims);
  wd.insert(wd.end(), kernel_dims.begin(), kernel_dims.end());
  ws.insert(ws.end(), kernel_strides.begin(), kernel_strides.end());

  if (bf16 && onednn_has_bf16())
    return guard_dnnl(ctx, [&] {
      return blocked_bf16_conv(ctx, strided_desc(wd, ws), strides, dilates, pad_l, pad_r);
    });
  return guard_dnnl(ctx, [&] {
    memory::desc xd = plain_desc(x.shape), yd = plain_desc(window), wmd = strided_desc(wd, ws);
    memory::desc packed_wmd = weights_desc(ctx, 1, wmd);
    const memory::desc bd = bias ? plain_desc(bias->shape) : memory::desc();
    Args args{{DNNL_ARG_SRC, bind(ctx, xd, x.data)},
              {DNNL_ARG_WEIGHTS, bind(ctx, wmd, w.data)},
              {DNNL_ARG_DST, bind(ctx, yd, dst)}};
    Bf16Inputs rounded;
    if (bf16) {
      KILN_ASSIGN_OR_RETURN(args[DNNL_ARG_SRC], bf16_input(ctx, 0, x.shape, shape_strides(x.shape)));
      rounded.push_back({DNNL_ARG_SRC, 0});
      xd = args[DNNL_ARG_SRC].get_desc();
      if (packs_bf16_weight(ctx, 1)) {  // f32 here; execute() rounds and packs it once
        packed_wmd = memory::desc(wd, memory::data_type::bf16, memory::format_tag::any);
      } else {
        KILN_ASSIGN_OR_RETURN(args[DNNL_ARG_WEIGHTS], bf16_input(ctx, 1, wd, ws));
        rounded.push_back({DNNL_ARG_WEIGHTS, 1});
        packed_wmd = args[DNNL_ARG_WEIGHTS].get_desc();
      }
    }
    if (bias) args.emplace(DNNL_ARG_BIAS, bind(ctx, bd, bias->data));
    using Conv = dnnl::convolution_forward;
    using Deconv = dnnl::deconvolution_forward;
    const auto inference = dnnl::prop_kind::forward_inference;
    const bool fused = ctx.node->op == OpKind::kFusedConv;  // kiln.Conv: the epilogue rides along
    const dnnl::primitive_attr attr = fused ? epilogue_attr(ctx, yd) : user_scratchpad_attr();
    if (fused) add_residual_arg(ctx, yd, args);
    if (transpose) {
      Deconv::desc desc(inference, dnnl::algorithm::deconvolution_direct, xd, packed_wmd, bd, yd, strides,
                        dilates, pad_l, pad_r);
      KILN_RETURN_IF_ERROR(execute<Deconv>(ctx, {desc, attr, ctx.cpu->engine}, std::move(args)));
    } else {
      Conv::desc desc(inference, dnnl::algorithm::convolution_direct, xd, packed_wmd, bd, yd, strides,
                      dilates, pad_l, pad_r);
      KILN_RETURN_IF_ERROR(execute<Conv>(ctx, {desc, attr, ctx.cpu->engine}, std::move(args), rounded));
    }
    if (windowed) copy_strided(dst, shape_strides(window), y.as<float>() + window_offset, y_strides, window);
    return ok_status();
  });
}

}  // namespace

Status cpu_Conv(KernelContext& ctx) { return conv_cpu(ctx, false); }
Status cpu_ConvTranspose(KernelContext& ctx) { return conv_cpu(ctx, true); }

// ---------------------------------------------------------------------------
// Einsum: two-operand contractions (what attention and torch exports write)
// become one batched oneDNN matmul, each operand used in place when its
// labels are already in matmul order (or its transpose) and copied into that
// order otherwise. Everything else (one or three+ operands, diagonals, sums
// over a label only one operand has, f64) runs a direct loop.

namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Row-major strides of an operand, by label; 0 where the operand broadcasts
// (its dim is 1 but the label is larger), summed where a label repeats
// (a diagonal).
Shape label_strides(const EinsumSpec& spec, size_t t, const Shape& shape, const Shape& sizes) {
  Shape strides(sizes.size(), 0);
  const Shape row_major = shape_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    const size_t l = size_t(spec.inputs[t][d]);
    if (shape[d] == sizes[l]) strides[l] += row_major[d];
  }
  return strides;
}

template <typename T>
void einsum_loop(KernelContext& ctx, const EinsumSpec& spec, const Shape& sizes) {
  std::vector<int> summed;
  for (int l = 0; l < spec.num_labels(); ++l)
    if (!contains(spec.output, l) && sizes[size_t(l)] != 1) summed.push_back(l);
  // strides[t][j]: operand t's stride along output label j, then summed label j.
  const size_t operands = spec.inputs.size();
  std::vector<Shape> out_strides(operands), sum_strides(operands);
  for (size_t t = 0; t < operands; ++t) {
    const Shape s = label_strides(spec, t, ctx.inputs[t]->shape, sizes);
    for (int l : spec.output) out_strides[t].push_back(s[size_t(l)]);
    for (int l : summed) sum_strides[t].push_back(s[size_t(l)]);
  }
  Shape out_dims, sum_dims;
  for (int l : spec.output) out_dims.push_back(sizes[size_t(l)]);
  for (int l : summed) sum_dims.push_back(sizes[size_t(l)]);
  const int64_t out_count = shape_numel(out_dims), sum_count = shape_numel(sum_dims);
  T* out = ctx.output(0)->as<T>();

  parallel_for(out_count, double(out_count) * double(sum_count) * double(operands) > kParallelWork, [&](int64_t o) {
    double acc = 0;
    for (int64_t s = 0; s < sum_count; ++s) {
      double product = 1;
      for (size_t t = 0; t < operands; ++t) {
        int64_t offset = 0;
        for (int64_t rest = o, j = int64_t(out_dims.size()); j-- > 0; rest /= out_dims[size_t(j)])
          offset += rest % out_dims[size_t(j)] * out_strides[t][size_t(j)];
        for (int64_t rest = s, j = int64_t(sum_dims.size()); j-- > 0; rest /= sum_dims[size_t(j)])
          offset += rest % sum_dims[size_t(j)] * sum_strides[t][size_t(j)];
        product *= double(ctx.inputs[t]->as<T>()[offset]);
      }
      acc += product;
    }
    out[o] = T(acc);
  });
}

// Labels of a two-operand contraction, by role in the matmul Y = A x B.
struct Contraction {
  std::vector<int> batch, m, n, k;  // batch, m, n in output order; k in A's order
};

// The contraction a two-operand equation is, if it is one oneDNN can run.
std::optional<Contraction> as_contraction(const EinsumSpec& spec, const Shape& a_shape,
                                          const Shape& b_shape) {
  const std::vector<int>&la = spec.inputs[0], &lb = spec.inputs[1], &lo = spec.output;
  for (const auto* labels : {&la, &lb})
    for (int l : *labels)
      if (std::count(labels->begin(), labels->end(), l) > 1) return std::nullopt;  // a diagonal
  Contraction c;
  for (int l : lo) {
    const bool in_a = contains(la, l), in_b = contains(lb, l);
    (in_a && in_b ? c.batch : in_a ? c.m : c.n).push_back(l);
  }
  for (size_t d = 0; d < la.size(); ++d) {
    const int l = la[d];
    if (contains(lo, l)) continue;
    const auto in_b = std::find(lb.begin(), lb.end(), l);
    if (in_b == lb.end()) return std::nullopt;  // summed over A alone
    if (a_shape[d] != b_shape[size_t(in_b - lb.begin())]) return std::nullopt;  // broadcast k
    c.k.push_back(l);
  }
  for (int l : lb)
    if (!contains(lo, l) && !contains(la, l)) return std::nullopt;  // summed over B alone
  if (c.batch.size() + 2 > DNNL_MAX_NDIMS) return std::nullopt;
  return c;
}

std::vector<int> concat(std::initializer_list<const std::vector<int>*> parts) {
  std::vector<int> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// One matmul operand: `labels` (an operand's subscripts) presented as
// [batch..., rows, cols] with rows = the `rows` labels flattened, cols alike.
// Uses the operand in place when its layout allows (rows/cols in order, or
// transposed); otherwise copies it into scratch in that order.
Result<std::pair<memory::desc, const float*>> matmul_operand(
    KernelContext& ctx, const float* data, const Shape& shape, const std::vector<int>& labels,
    const Contraction& c, const std::vector<int>& rows, const std::vector<int>& cols) {
  auto dim_of = [&](int l) { return shape[size_t(std::find(labels.begin(), labels.end(), l) - labels.begin())]; };
  auto group_size = [&](const std::vector<int>& g) {
    int64_t n = 1;
    for (int l : g) n *= dim_of(l);
    return n;
  };
  Shape dims;
  for (int l : c.batch) dims.push_back(dim_of(l));
  const int64_t r = group_size(rows), q = group_size(cols);
  dims.push_back(r);
  dims.push_back(q);
  Shape batch_strides = shape_strides(dims);
  batch_strides.resize(c.batch.size());
  auto with_inner = [&](int64_t row_stride, int64_t col_stride) {
    Shape s = batch_strides;
    s.push_back(row_stride);
    s.push_back(col_stride);
    return s;
  };
  if (labels == concat({&c.batch, &rows, &cols})) return std::pair{strided_desc(dims, with_inner(q, 1)), data};
  if (labels == concat({&c.batch, &cols, &rows})) return std::pair{strided_desc(dims, with_inner(1, r)), data};

  const std::vector<int> order = concat({&c.batch, &rows, &cols});
  const Shape row_major = shape_strides(shape);
  Shape order_dims, order_strides;
  for (int l : order) {
    const size_t d = size_t(std::find(labels.begin(), labels.end(), l) - labels.begin());
    order_dims.push_back(shape[d]);
    order_strides.push_back(row_major[d]);
  }
  KILN_ASSIGN_OR_RETURN(float* copy, scratch_floats(ctx, shape_numel(shape), "an operand copy"));
  copy_strided(data, order_strides, copy, shape_strides(order_dims), order_dims);
  return std::pair{plain_desc(dims), static_cast<const float*>(copy)};
}

Status einsum_matmul(KernelContext& ctx, const EinsumSpec& spec, const Contraction& c,
                     const Shape& sizes) {
  const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
  TensorView& y = *ctx.output(0);
  KILN_ASSIGN_OR_RETURN(auto ad, matmul_operand(ctx, a.as<float>(), a.shape, spec.inputs[0], c, c.m, c.k));
  KILN_ASSIGN_OR_RETURN(auto bd, matmul_operand(ctx, b.as<float>(), b.shape, spec.inputs[1], c, c.k, c.n));
  Shape y_dims;
  int64_t m = 1, n = 1;
  for (int l : c.batch) y_dims.push_back(sizes[size_t(l)]);
  for (int l : c.m) m *= sizes[size_t(l)];
  for (int l : c.n) n *= sizes[size_t(l)];
  y_dims.push_back(m);
  y_dims.push_back(n);
  const std::vector<int> y_order = concat({&c.batch, &c.m, &c.n});
  const bool in_place = y_order == spec.output;
  float* py = y.as<float>();
  if (!in_place) {
    KILN_ASSIGN_OR_RETURN(py, scratch_floats(ctx, y.numel(), "the result"));
  }
  KILN_RETURN_IF_ERROR(run_matmul(ctx, ad.first, ad.second, bd.first, bd.second, plain_desc(y_dims), py));
  if (in_place) return ok_status();
  // Permute the [batch, m, n] result into the output's label order.
  Shape result_dims, out_dims;
  for (int l : y_order) result_dims.push_back(sizes[size_t(l)]);
  const Shape result_strides = shape_strides(result_dims);
  Shape strides_in_out_order;
  for (int l : spec.output) {
    out_dims.push_back(sizes[size_t(l)]);
    strides_in_out_order.push_back(result_strides[size_t(std::find(y_order.begin(), y_order.end(), l) - y_order.begin())]);
  }
  copy_strided(py, strides_in_out_order, y.as<float>(), shape_strides(out_dims), out_dims);
  return ok_status();
}

}  // namespace

Status cpu_Einsum(KernelContext& ctx) {
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  const DType dtype = ctx.input(0)->dtype;
  if (dtype != DType::kF32 && dtype != DType::kF64)
    return ctx.unsupported_error("dtype {} is not implemented", dtype_name(dtype));
  Shape sizes;
  KILN_ASSIGN_OR_RETURN(EinsumSpec spec,
                        einsum_parse_concrete(ctx.attrs().get_string("equation", ""), ctx.inputs, &sizes));
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();

  if (dtype == DType::kF32 && ctx.cpu && spec.inputs.size() == 2) {
    if (const auto c = as_contraction(spec, ctx.input(0)->shape, ctx.input(1)->shape)) {
      int64_t k = 1;
      for (int l : c->k) k *= sizes[size_t(l)];
      if (k == 0) {
        fill_zero(y);
        return ok_status();
      }
      return guard_dnnl(ctx, [&] { return einsum_matmul(ctx, spec, *c, sizes); });
    }
  }
  if (dtype == DType::kF32) einsum_loop<float>(ctx, spec, sizes);
  else einsum_loop<double>(ctx, spec, sizes);
  return ok_status();
}

}  // namespace kiln

namespace kiln {

// kiln.Linear: one GEMM, A folded to [M, K], the weight packed once, and the
// bias, activation, gate and residual applied to each tile while it is in
// cache.
Status cpu_Linear(KernelContext& ctx) {
  if (const DnnlReplay* r = replay_of(ctx)) {
    KILN_RETURN_IF_ERROR(replay(ctx, *r));
    return apply_gate(ctx);
  }
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  const TensorView &a = *ctx.input(0), &w = *ctx.input(1);
  TensorView& y = *ctx.output(0);
  const int64_t k = w.shape[0], n = w.shape[1];
  if (y.numel() == 0) return ok_status();
  if (k == 0) return ctx.unsupported_error("an empty inner dimension");
  if (computes_in_bf16(*ctx.node) && bf16_gemm() == Bf16Gemm::kKiln)
    return multiply_bf16(ctx, a.numel() / k, n, k, n, 1, fused_epilogue(ctx, false));
  if (computes_in_bf16(*ctx.node) && bf16_gemm() == Bf16Gemm::kOnednn) {  // the epilogue as post-ops, a gate after
    const bool gated = ctx.input(4) != nullptr;
    KILN_RETURN_IF_ERROR(guard_dnnl(ctx, [&] {
      const int64_t m = a.numel() / k;
      const memory::desc yd = plain_desc({m, n});
      Args args;
      if (!gated) add_residual_arg(ctx, yd, args);
      return run_matmul_bf16(ctx, {m, k}, {k, 1}, {k, n}, {n, 1}, {m, n}, ctx.input(2), epilogue_attr(ctx, yd, !gated),
                             std::move(args));
    }));
    return apply_gate(ctx);
  }
  KILN_ASSIGN_OR_RETURN(const float* packed, packed_product_operand(ctx, 1, w.as<float>(), n, 1, k, n));
  KILN_ASSIGN_OR_RETURN(const float* pa, product_input(ctx, 0));
  const int64_t m = a.numel() / k;
  gemm::Epilogue e = fused_epilogue(ctx, false);
  set_gate(ctx, m, n, e);
  gemm::multiply({m, n, k, pa, k, packed, y.as<float>(), n}, e, true);
  return ok_status();
}

Status cpu_FusedConv(KernelContext& ctx) { return conv_cpu(ctx, false); }

}  // namespace kiln
