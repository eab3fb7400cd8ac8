// CPU kernels for the linalg ops (see kernels/kernel.h), f32 through oneDNN:
// matmul for MatMul/Gemm/Einsum, convolution and deconvolution for Conv and
// ConvTranspose. Memory descriptors are plain (strided) layouts over the
// caller's buffers, so nothing is copied in or out.
//
// Eagerly, the primitive is created on every call (oneDNN's primitive cache
// makes the repeat cheap). In a compiled plan the first call records the
// primitive, its memory objects and constant weights re-laid out in the
// primitive's preferred (blocked) format; later calls only point the memory
// objects at this run's buffers and execute (see DnnlReplay).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "ir/infer/linalg.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/parallel.h"
#include "kernels/kernel.h"

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
  enum class Source { kInput, kOutput, kScratchpad, kOwned };
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
    }
    if (dnnl_memory_set_data_handle(a.mem.get(), data) != dnnl_success)
      return internal_error("{}: oneDNN refused a buffer", node_label(*ctx.node));
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
// (eltwise), then the residual, input 3 (binary add) shaped like `y`.
dnnl::primitive_attr epilogue_attr(const KernelContext& ctx, const memory::desc& y) {
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
  if (ctx.input(3)) ops.append_binary(dnnl::algorithm::binary_add, y);
  attr.set_post_ops(ops);
  return attr;
}

void add_residual_arg(const KernelContext& ctx, const memory::desc& y, Args& args) {
  if (!ctx.input(3)) return;
  const int index = ctx.attrs().get_string("activation", "none") != "none" ? 1 : 0;  // after the eltwise
  args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, bind(ctx, y, ctx.input(3)->data));
}

// Runs `Primitive` built from `pd`, its scratchpad taken from the workspace.
// On a plan step's first call it also pre-packs a constant weight the
// primitive wants in another layout, and records the call for replay.
template <typename Primitive>
Status execute(KernelContext& ctx, const typename Primitive::primitive_desc& pd, Args args) {
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
      if (arg == DNNL_ARG_WEIGHTS && packed_weights) source = {DnnlReplay::Source::kOwned, 0, mem};
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

Result<float*> scratch_floats(KernelContext& ctx, int64_t count, std::string_view what) {
  void* p = ctx.workspace->scratch(size_t(count) * sizeof(float));
  if (!p) return resource_exhausted("{}: no scratch for {}", node_label(*ctx.node), what);
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

Status cpu_MatMul(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  Shape as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (k == 0) {
    fill_zero(y);
    return ok_status();
  }
  // Same rank for both, batch dims of 1 where an operand has fewer.
  const size_t rank = std::max(as.size(), bs.size());
  as.insert(as.begin(), rank - as.size(), 1);
  bs.insert(bs.begin(), rank - bs.size(), 1);
  Shape ys(rank);
  for (size_t d = 0; d + 2 < rank; ++d) ys[d] = std::max(as[d], bs[d]);
  ys[rank - 2] = m, ys[rank - 1] = n;
  // B shared by every batch (a 2-D weight): fold A's batch into its rows,
  // one large GEMM instead of many small ones.
  if (shape_numel(bs) == k * n) {
    as = {shape_numel(as) / k, k};
    bs = {k, n};
    ys = {as[0], n};
  }
  if (ys.size() > DNNL_MAX_NDIMS) return ctx.unsupported_error("rank {} is above oneDNN's limit", rank);
  return guard_dnnl(ctx, [&] {
    return run_matmul(ctx, plain_desc(as), a.as<float>(), plain_desc(bs), b.as<float>(), plain_desc(ys),
                      y.as<float>());
  });
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

  // beta * C enters as oneDNN's sum post-op over C broadcast into Y first.
  const bool add_c = c && beta != 0.0f;
  if (add_c) {
    const int64_t c_rows = c->rank() == 2 ? c->shape[0] : 1;
    const int64_t c_cols = c->rank() >= 1 ? c->shape.back() : 1;
    const float* pc = c->as<float>();
    parallel_for(m, m * n > kParallelWork, [&](int64_t i) {
      const float* row = pc + (c_rows == 1 ? 0 : i * c_cols);
      for (int64_t j = 0; j < n; ++j) py[i * n + j] = row[c_cols == 1 ? 0 : j];
    });
  }
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  if (k == 0) {  // no products: Y = beta * C
    if (!add_c) fill_zero(y);
    else std::for_each(py, py + m * n, [beta](float& v) { v *= beta; });
    return ok_status();
  }
  return guard_dnnl(ctx, [&] {
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (add_c) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    memory::desc ad = strided_desc({m, k}, trans_a ? Shape{1, m} : Shape{k, 1});
    memory::desc bd = strided_desc({k, n}, trans_b ? Shape{1, k} : Shape{n, 1});
    return run_matmul(ctx, ad, a.as<float>(), bd, b.as<float>(), plain_desc({m, n}), py, attr);
  });
}

namespace {

// Conv and ConvTranspose share everything but the weight layout and the
// primitive. ONNX weights: Conv [OC, IC/g, k...], ConvTranspose [IC, OC/g, k...];
// oneDNN wants both as [OC, IC, k...] (or [g, OC/g, IC/g, k...] with groups),
// which for ConvTranspose is a transposed, strided view.
Status conv_cpu(KernelContext& ctx, bool transpose) {
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
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

  return guard_dnnl(ctx, [&] {
    const memory::desc xd = plain_desc(x.shape), yd = plain_desc(window), wmd = strided_desc(wd, ws);
    const memory::desc packed_wmd = weights_desc(ctx, 1, wmd);
    const memory::desc bd = bias ? plain_desc(bias->shape) : memory::desc();
    Args args{{DNNL_ARG_SRC, bind(ctx, xd, x.data)},
              {DNNL_ARG_WEIGHTS, bind(ctx, wmd, w.data)},
              {DNNL_ARG_DST, bind(ctx, yd, dst)}};
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
      KILN_RETURN_IF_ERROR(execute<Conv>(ctx, {desc, attr, ctx.cpu->engine}, std::move(args)));
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

// kiln.Linear: one oneDNN matmul, A folded to [M, K], with the bias as its
// bias argument and the epilogue as post-ops: Y is written once.
Status cpu_Linear(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  const TensorView &a = *ctx.input(0), &w = *ctx.input(1);
  const TensorView* bias = ctx.input(2);
  TensorView& y = *ctx.output(0);
  const int64_t k = w.shape[0], n = w.shape[1];
  if (y.numel() == 0) return ok_status();
  if (k == 0) return ctx.unsupported_error("an empty inner dimension");
  const int64_t m = a.numel() / k;
  return guard_dnnl(ctx, [&] {
    const memory::desc ad = plain_desc({m, k}), wd = plain_desc({k, n}), yd = plain_desc({m, n});
    const memory::desc bd = bias ? plain_desc({1, n}) : memory::desc();
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, weights_desc(ctx, 1, wd), bd, yd),
                                    epilogue_attr(ctx, yd), ctx.cpu->engine);
    Args args{{DNNL_ARG_SRC, bind(ctx, ad, a.data)}, {DNNL_ARG_WEIGHTS, bind(ctx, wd, w.data)},
              {DNNL_ARG_DST, bind(ctx, yd, y.data)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, bind(ctx, bd, bias->data));
    add_residual_arg(ctx, yd, args);
    return execute<dnnl::matmul>(ctx, pd, std::move(args));
  });
}

Status cpu_FusedConv(KernelContext& ctx) { return conv_cpu(ctx, false); }

}  // namespace kiln
