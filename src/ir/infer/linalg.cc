// Shape inference for the linalg ops (see ir/shape_inference.h), and the
// Conv geometry and Einsum parsing the linalg kernels share (ir/infer/linalg.h).
#include "ir/infer/linalg.h"

#include <algorithm>

#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::kF32, DType::kF64, DType::kF16,
                                                      DType::kBF16};
constexpr std::initializer_list<DType> kNumericTypes = {
    DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64};

// Error unless every present input has input 0's dtype, one of `allowed`.
Status check_same_dtype(const InferContext& ctx, std::initializer_list<DType> allowed) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, allowed));
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype != ctx.input(0).dtype)
      return ctx.error("input {} has dtype {} but input 0 has {}", i,
                       dtype_name(ctx.input(i).dtype), dtype_name(ctx.input(0).dtype));
  return ok_status();
}

Status check_dims_match(const InferContext& ctx, const Dim& a, const Dim& b, std::string_view what) {
  if (a.known() && b.known() && a.value != b.value)
    return ctx.error("{} disagree: {} vs {}", what, a.value, b.value);
  return ok_status();
}

// Bounds that keep the size arithmetic below far from overflow: attribute
// values up to 2^20, spatial sizes up to kMaxTensorElements (2^40).
constexpr int64_t kMaxConvAttr = int64_t(1) << 20;

// Per-spatial-dim int list attribute: `dflt` when absent, else exactly n
// values in [min_value, kMaxConvAttr].
Result<std::vector<int64_t>> spatial_attr(const Node& node, std::string_view name, size_t n,
                                          int64_t dflt, int64_t min_value) {
  const std::vector<int64_t>* v = node.attrs.get_ints(name);
  if (!v) return std::vector<int64_t>(n, dflt);
  if (v->size() != n)
    return invalid_argument("{}: {} has {} values, expected {}", node_label(node), name, v->size(), n);
  for (int64_t x : *v)
    if (x < min_value || x > kMaxConvAttr)
      return invalid_argument("{}: {} value {} is out of range", node_label(node), name, x);
  return *v;
}

Status check_spatial_size(const Node& node, size_t i, int64_t in) {
  if (in > kMaxTensorElements)
    return invalid_argument("{}: spatial dim {} has size {}, past the limit", node_label(node), i, in);
  return ok_status();
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

Result<ConvAttrs> conv_attrs(const Node& node, size_t spatial, const SymShape& weight_kernel) {
  ConvAttrs a;
  a.group = node.attrs.get_int("group", 1);
  if (a.group < 1) return invalid_argument("{}: group {} must be positive", node_label(node), a.group);
  std::string auto_pad = node.attrs.get_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") a.auto_pad = AutoPad::kNotSet;
  else if (auto_pad == "SAME_UPPER") a.auto_pad = AutoPad::kSameUpper;
  else if (auto_pad == "SAME_LOWER") a.auto_pad = AutoPad::kSameLower;
  else if (auto_pad == "VALID") a.auto_pad = AutoPad::kValid;
  else return invalid_argument("{}: unknown auto_pad '{}'", node_label(node), auto_pad);

  KILN_ASSIGN_OR_RETURN(a.kernel, spatial_attr(node, "kernel_shape", spatial, -1, 1));
  for (size_t i = 0; i < spatial; ++i) {
    const Dim& w = weight_kernel[i];
    if (a.kernel[i] < 0) a.kernel[i] = w.value;  // stays -1 (unknown) when W's dim is
    if (w.known() && w.value != a.kernel[i])
      return invalid_argument("{}: kernel_shape[{}] is {} but the weight has {}", node_label(node),
                              i, a.kernel[i], w.value);
    if (a.kernel[i] == 0 || a.kernel[i] > kMaxConvAttr)
      return invalid_argument("{}: kernel size {} is {}", node_label(node), i, a.kernel[i]);
  }
  KILN_ASSIGN_OR_RETURN(a.strides, spatial_attr(node, "strides", spatial, 1, 1));
  KILN_ASSIGN_OR_RETURN(a.dilations, spatial_attr(node, "dilations", spatial, 1, 1));
  KILN_ASSIGN_OR_RETURN(a.pads, spatial_attr(node, "pads", 2 * spatial, 0, 0));
  KILN_ASSIGN_OR_RETURN(a.output_padding, spatial_attr(node, "output_padding", spatial, 0, 0));
  for (size_t i = 0; i < spatial; ++i)
    if (a.output_padding[i] >= std::max(a.strides[i], a.dilations[i]))
      return invalid_argument("{}: output_padding {} must be below stride or dilation",
                              node_label(node), a.output_padding[i]);
  if (const std::vector<int64_t>* os = node.attrs.get_ints("output_shape")) {
    // Some exporters write the full [N, C, spatial...] shape.
    size_t skip = os->size() == spatial + 2 ? 2 : 0;
    if (os->size() != spatial + skip)
      return invalid_argument("{}: output_shape has {} values, expected {}", node_label(node),
                              os->size(), spatial);
    a.output_shape.assign(os->begin() + skip, os->end());
    for (int64_t x : a.output_shape)
      if (x < 0 || x > kMaxTensorElements)
        return invalid_argument("{}: output_shape value {} is out of range", node_label(node), x);
  }
  return a;
}

Result<Dim> conv_output_dim(const Node& node, const ConvAttrs& a, size_t i, const Dim& in) {
  if (!in.known() || a.kernel[i] < 0) return Dim();
  KILN_RETURN_IF_ERROR(check_spatial_size(node, i, in.value));
  int64_t s = a.strides[i];
  if (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower)
    return Dim((in.value + s - 1) / s);
  size_t n = a.kernel.size();
  int64_t padded = in.value + (a.auto_pad == AutoPad::kValid ? 0 : a.pads[i] + a.pads[n + i]);
  if (padded < a.extent(i))
    return invalid_argument("{}: spatial dim {} ({} with padding) is smaller than the kernel extent {}",
                            node_label(node), i, padded, a.extent(i));
  return Dim((padded - a.extent(i)) / s + 1);
}

std::pair<int64_t, int64_t> conv_pads(const ConvAttrs& a, size_t i, int64_t in, int64_t out) {
  switch (a.auto_pad) {
    case AutoPad::kNotSet: return {a.pads[i], a.pads[a.kernel.size() + i]};
    case AutoPad::kValid: return {0, 0};
    case AutoPad::kSameUpper:
    case AutoPad::kSameLower: {
      int64_t total = std::max<int64_t>(0, (out - 1) * a.strides[i] + a.extent(i) - in);
      int64_t small = total / 2;
      return a.auto_pad == AutoPad::kSameUpper ? std::pair{small, total - small}
                                              : std::pair{total - small, small};
    }
  }
  return {0, 0};
}

Result<Dim> conv_transpose_output_dim(const Node& node, const ConvAttrs& a, size_t i,
                                      const Dim& in) {
  if (!a.output_shape.empty()) return Dim(a.output_shape[i]);
  if (!in.known() || a.kernel[i] < 0) return Dim();
  KILN_RETURN_IF_ERROR(check_spatial_size(node, i, in.value));
  int64_t s = a.strides[i];
  if (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower)
    return Dim(in.value * s);
  size_t n = a.kernel.size();
  int64_t pads = a.auto_pad == AutoPad::kValid ? 0 : a.pads[i] + a.pads[n + i];
  int64_t out = s * (in.value - 1) + a.output_padding[i] + a.extent(i) - pads;
  if (out < 0)
    return invalid_argument("{}: spatial dim {} would have size {}", node_label(node), i, out);
  return Dim(out);
}

int64_t conv_transpose_pad_begin(const ConvAttrs& a, size_t i, int64_t in, int64_t out) {
  bool explicit_pads = a.output_shape.empty() &&
                       (a.auto_pad == AutoPad::kNotSet || a.auto_pad == AutoPad::kValid);
  if (explicit_pads) return a.auto_pad == AutoPad::kValid ? 0 : a.pads[i];
  // The ONNX rule (floor division: the total is negative when output_shape
  // asks for more than the full result).
  int64_t total = a.strides[i] * (in - 1) + a.output_padding[i] + a.extent(i) - out;
  int64_t half = floor_div(total, 2);
  return a.auto_pad == AutoPad::kSameUpper ? half : total - half;
}

Result<EinsumSpec> einsum_parse(std::string_view equation, const std::vector<int64_t>& ranks) {
  std::string eq;
  for (char c : equation)
    if (c != ' ' && c != '\t') eq += c;
  size_t arrow = eq.find("->");
  std::string_view lhs = std::string_view(eq).substr(0, arrow);
  std::optional<std::string_view> rhs;
  if (arrow != std::string::npos) rhs = std::string_view(eq).substr(arrow + 2);

  // Each term as letters with -1 standing for "...".
  auto split_term = [&](std::string_view term) -> Result<std::vector<int>> {
    std::vector<int> out;
    bool ellipsis = false;
    for (size_t k = 0; k < term.size(); ++k) {
      char c = term[k];
      if (c >= 'A' && c <= 'Z') out.push_back(c - 'A');
      else if (c >= 'a' && c <= 'z') out.push_back(26 + c - 'a');
      else if (term.substr(k, 3) == "..." && !ellipsis) {
        out.push_back(-1);
        ellipsis = true;
        k += 2;
      } else {
        return invalid_argument("einsum equation '{}': unexpected '{}'", equation, c);
      }
    }
    return out;
  };
  std::vector<std::vector<int>> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    KILN_ASSIGN_OR_RETURN(auto term, split_term(lhs.substr(start, comma - start)));
    terms.push_back(std::move(term));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size())
    return invalid_argument("einsum equation '{}' has {} operands, the node {}", equation,
                            terms.size(), ranks.size());

  EinsumSpec spec;
  std::vector<int64_t> ellipsis_rank(terms.size(), 0);
  for (size_t t = 0; t < terms.size(); ++t) {
    bool has_ellipsis = std::count(terms[t].begin(), terms[t].end(), -1) > 0;
    int64_t letters = int64_t(terms[t].size()) - has_ellipsis;
    if (has_ellipsis ? ranks[t] < letters : ranks[t] != letters)
      return invalid_argument("einsum equation '{}': operand {} has rank {}", equation, t, ranks[t]);
    ellipsis_rank[t] = ranks[t] - letters;
    spec.num_ellipsis = std::max(spec.num_ellipsis, int(ellipsis_rank[t]));
  }
  const int e = spec.num_ellipsis;
  auto expand = [&](const std::vector<int>& term, int64_t ellipsis_dims) {
    std::vector<int> labels;
    for (int c : term) {
      if (c >= 0) labels.push_back(e + c);
      else
        for (int64_t k = e - ellipsis_dims; k < e; ++k) labels.push_back(int(k));
    }
    return labels;
  };
  std::vector<int> uses(size_t(spec.num_labels()), 0);
  for (size_t t = 0; t < terms.size(); ++t) {
    spec.inputs.push_back(expand(terms[t], ellipsis_rank[t]));
    for (int l : spec.inputs.back()) ++uses[size_t(l)];
  }
  if (rhs) {
    KILN_ASSIGN_OR_RETURN(auto term, split_term(*rhs));
    spec.output = expand(term, e);
    for (int l : spec.output) {
      if (uses[size_t(l)] == 0)
        return invalid_argument("einsum equation '{}': output label not in any input", equation);
      if (std::count(spec.output.begin(), spec.output.end(), l) > 1)
        return invalid_argument("einsum equation '{}': output label repeats", equation);
    }
  } else {
    // Implicit output: the broadcast dims, then the labels used once, in order.
    for (int l = 0; l < spec.num_labels(); ++l)
      if (l < e || uses[size_t(l)] == 1) spec.output.push_back(l);
  }
  return spec;
}

Result<std::vector<Dim>> einsum_label_dims(const EinsumSpec& spec,
                                           const std::vector<SymShape>& shapes) {
  std::vector<Dim> dims(size_t(spec.num_labels()), Dim(1));
  for (size_t t = 0; t < spec.inputs.size(); ++t)
    for (size_t k = 0; k < spec.inputs[t].size(); ++k) {
      Dim& d = dims[size_t(spec.inputs[t][k])];
      auto merged = broadcast_shapes({d}, {shapes[t][k]});
      if (!merged.ok()) return invalid_argument("einsum operand {} dim {}: {}", t, k, merged.status().message());
      d = (*merged)[0];
    }
  return dims;
}

Result<EinsumSpec> einsum_parse_concrete(std::string_view equation,
                                         const std::vector<const TensorView*>& operands,
                                         Shape* label_sizes) {
  std::vector<int64_t> ranks;
  std::vector<SymShape> shapes;
  for (const TensorView* t : operands) {
    ranks.push_back(t->rank());
    shapes.push_back(sym_shape_from(t->shape));
  }
  KILN_ASSIGN_OR_RETURN(EinsumSpec spec, einsum_parse(equation, ranks));
  KILN_ASSIGN_OR_RETURN(std::vector<Dim> dims, einsum_label_dims(spec, shapes));
  label_sizes->clear();
  for (const Dim& d : dims) label_sizes->push_back(d.value);
  return spec;
}

Status infer_MatMul(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_same_dtype(ctx, kNumericTypes));
  const DType dtype = ctx.input(0).dtype;
  if (!ctx.input(0).shape || !ctx.input(1).shape) {
    set_output(ctx, 0, dtype, std::nullopt);
    return ok_status();
  }
  SymShape a = *ctx.input(0).shape, b = *ctx.input(1).shape;
  if (a.empty() || b.empty()) return ctx.error("MatMul operands must have rank >= 1");
  // numpy: a 1-D operand is a row (A) or a column (B) that the result drops.
  bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), Dim(1));
  if (b_vector) b.push_back(Dim(1));
  KILN_RETURN_IF_ERROR(check_dims_match(ctx, a.back(), b[b.size() - 2], "inner dims of A and B"));
  auto batch = broadcast_shapes(SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2));
  if (!batch.ok()) return ctx.error("batch dims: {}", batch.status().message());
  SymShape out = std::move(batch).value();
  if (!a_vector) out.push_back(a[a.size() - 2]);
  if (!b_vector) out.push_back(b.back());
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

Status infer_Gemm(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_same_dtype(ctx, kNumericTypes));
  SymShape a(2), b(2);
  for (size_t i = 0; i < 2; ++i) {
    if (!ctx.input(i).shape) continue;
    if (ctx.input(i).shape->size() != 2)
      return ctx.error("input {} must have rank 2, got {}", i, ctx.input(i).shape->size());
    (i == 0 ? a : b) = *ctx.input(i).shape;
  }
  bool trans_a = ctx.attrs().get_int("transA", 0) != 0, trans_b = ctx.attrs().get_int("transB", 0) != 0;
  Dim m = a[trans_a ? 1 : 0], k = a[trans_a ? 0 : 1];
  Dim kb = b[trans_b ? 1 : 0], n = b[trans_b ? 0 : 1];
  KILN_RETURN_IF_ERROR(check_dims_match(ctx, k, kb, "inner dims of A and B"));
  if (ctx.has_input(2) && ctx.input(2).shape) {
    // C broadcasts one way, to [M, N].
    const SymShape& c = *ctx.input(2).shape;
    if (c.size() > 2) return ctx.error("C must have rank <= 2, got {}", c.size());
    SymShape target{m, n};
    for (size_t j = 0; j < c.size(); ++j) {
      const Dim& want = target[2 - c.size() + j];
      if (c[j].known() && c[j].value != 1 && want.known() && c[j].value != want.value)
        return ctx.error("C of shape {} does not broadcast to [M, N] = {}", sym_shape_to_string(c),
                         sym_shape_to_string(target));
    }
  }
  set_output(ctx, 0, ctx.input(0).dtype, SymShape{m, n});
  return ok_status();
}

namespace {

// Conv: X [N, C, in...], W [M, C/group, k...]  -> [N, M, out...]
// ConvTranspose: X [N, C, in...], W [C, M/group, k...] -> [N, M, out...]
// Inputs f32 but for a weight (input 1) stored in f16 or bf16, which
// executors widen before a kernel reads it (kernels/kernel.h).
Status check_f32_with_stored_weight(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i))
      KILN_RETURN_IF_ERROR(i == 1 ? require_dtype(ctx, i, {DType::kF32, DType::kF16, DType::kBF16})
                                  : require_dtype(ctx, i, {DType::kF32}));
  return ok_status();
}

// Conv and ConvTranspose (inputs of one dtype) and kiln.Conv (stored_weight:
// check_f32_with_stored_weight).
Status infer_conv(InferContext& ctx, bool transpose, bool stored_weight = false) {
  KILN_RETURN_IF_ERROR(stored_weight ? check_f32_with_stored_weight(ctx) : check_same_dtype(ctx, kFloatTypes));
  const DType dtype = ctx.input(0).dtype;
  const auto& xs = ctx.input(0).shape;
  const auto& ws = ctx.input(1).shape;
  if (xs && xs->size() < 3) return ctx.error("X must have rank >= 3, got {}", xs->size());
  if (ws && ws->size() < 3) return ctx.error("W must have rank >= 3, got {}", ws->size());
  if (xs && ws && xs->size() != ws->size())
    return ctx.error("X has rank {} but W has rank {}", xs->size(), ws->size());
  const std::optional<SymShape>& bias = ctx.has_input(2) ? ctx.input(2).shape : std::nullopt;
  if (bias && bias->size() != 1) return ctx.error("B must have rank 1, got {}", bias->size());
  size_t rank = xs ? xs->size() : ws ? ws->size() : 0;
  if (const std::vector<int64_t>* ks = ctx.attrs().get_ints("kernel_shape"); rank == 0 && ks)
    rank = ks->size() + 2;
  if (rank == 0) {
    set_output(ctx, 0, dtype, std::nullopt);
    return ok_status();
  }
  const size_t spatial = rank - 2;
  const SymShape x = xs ? *xs : unknown_shape(int64_t(rank));
  const SymShape w = ws ? *ws : unknown_shape(int64_t(rank));
  KILN_ASSIGN_OR_RETURN(ConvAttrs a, conv_attrs(ctx.node(), spatial, SymShape(w.begin() + 2, w.end())));

  const Dim& channels = x[1];
  Dim out_channels = w[0];
  if (transpose) {
    KILN_RETURN_IF_ERROR(check_dims_match(ctx, channels, w[0], "X channels and W's first dim"));
    out_channels = w[1].known() ? Dim(w[1].value * a.group) : Dim();
  } else if (channels.known() && w[1].known() && w[1].value * a.group != channels.value) {
    return ctx.error("W has {} input channels per group, X has {} channels in {} groups",
                     w[1].value, channels.value, a.group);
  }
  for (const Dim& c : {channels, w[0]})
    if (c.known() && c.value % a.group != 0)
      return ctx.error("{} channels do not split into {} groups", c.value, a.group);
  if (bias) KILN_RETURN_IF_ERROR(check_dims_match(ctx, (*bias)[0], out_channels, "B size and output channels"));

  SymShape out{x[0], out_channels};
  for (size_t i = 0; i < spatial; ++i) {
    auto d = transpose ? conv_transpose_output_dim(ctx.node(), a, i, x[2 + i])
                       : conv_output_dim(ctx.node(), a, i, x[2 + i]);
    if (!d.ok()) return d.status();
    out.push_back(*d);
  }
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

}  // namespace

Status infer_Conv(InferContext& ctx) { return infer_conv(ctx, false); }
Status infer_ConvTranspose(InferContext& ctx) { return infer_conv(ctx, true); }

Status infer_Einsum(InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)  // the op table allows any count; none may be omitted
    if (!ctx.has_input(i)) return ctx.error("input {} is required", i);
  KILN_RETURN_IF_ERROR(check_same_dtype(ctx, kNumericTypes));
  const DType dtype = ctx.input(0).dtype;
  std::string equation = ctx.attrs().get_string("equation", "");
  if (equation.empty()) return ctx.error("equation attribute is missing");
  std::vector<int64_t> ranks;
  std::vector<SymShape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.input(i).shape) {
      set_output(ctx, 0, dtype, std::nullopt);
      return ok_status();
    }
    shapes.push_back(*ctx.input(i).shape);
    ranks.push_back(int64_t(shapes.back().size()));
  }
  auto spec = einsum_parse(equation, ranks);
  if (!spec.ok()) return spec.status().with_context(node_label(ctx.node()));
  auto dims = einsum_label_dims(*spec, shapes);
  if (!dims.ok()) return dims.status().with_context(node_label(ctx.node()));
  SymShape out;
  for (int l : spec->output) out.push_back((*dims)[size_t(l)]);
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

}  // namespace kiln

namespace kiln {

namespace {

// kiln.Linear's and kiln.Conv's epilogue: a known activation, and input 3
// (the residual), when present, shaped like the output.
Status check_epilogue(InferContext& ctx) {
  const std::string act = ctx.attrs().get_string("activation", "none");
  if (act != "none" && act != "gelu" && act != "gelu_tanh" && act != "swish" && act != "relu")
    return ctx.error("activation must be none, gelu, gelu_tanh, swish or relu, got '{}'", act);
  if (!ctx.has_input(3) || !ctx.input(3).shape || !ctx.output(0).shape) return ok_status();
  const SymShape &r = *ctx.input(3).shape, &out = *ctx.output(0).shape;
  bool same = r.size() == out.size();
  for (size_t d = 0; same && d < r.size(); ++d) same = !r[d].known() || !out[d].known() || r[d] == out[d];
  if (!same)
    return ctx.error("residual must have the output's shape {}, got {}", sym_shape_to_string(out), sym_shape_to_string(r));
  return ok_status();
}

}  // namespace

namespace {

// kiln.Linear's gate (input 4): [N] for every row of Y, or [B or 1, 1, ...,
// 1, N] against Y [B, ..., N]: one row of N for each batch entry's rows.
Status check_gate(InferContext& ctx) {
  if (!ctx.has_input(4) || !ctx.input(4).shape || !ctx.output(0).shape) return ok_status();
  const SymShape &g = *ctx.input(4).shape, &out = *ctx.output(0).shape;
  auto is = [](const Dim& d, const Dim& want) { return !d.known() || !want.known() || d == want; };
  bool ok = !g.empty() && !out.empty() && is(g.back(), out.back()) && (g.size() == 1 || g.size() == out.size());
  if (ok && g.size() > 1) {
    ok = is(g[0], out[0]) || g[0].value == 1;
    for (size_t d = 1; ok && d + 1 < g.size(); ++d) ok = g[d].value == 1;
  }
  if (!ok)
    return ctx.error("gate must be [N] or [B or 1, 1, ..., 1, N] against the output's {}, got {}",
                     sym_shape_to_string(out), sym_shape_to_string(g));
  return ok_status();
}

}  // namespace

// kiln.Linear: A [..., K], W [K, N] (transB: [N, K]), optional bias [N],
// residual shaped like Y [..., N], gate (see check_gate).
Status infer_Linear(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_f32_with_stored_weight(ctx));
  const int64_t trans_b = ctx.attrs().get_int("transB", 0);
  if (trans_b != 0 && trans_b != 1) return ctx.error("transB must be 0 or 1, got {}", trans_b);
  const std::optional<SymShape> bias = ctx.has_input(2) ? ctx.input(2).shape : std::nullopt;
  std::optional<SymShape> w = ctx.input(1).shape;
  if (w && w->size() == 2 && trans_b) std::swap((*w)[0], (*w)[1]);  // as [K, N]
  const auto& a = ctx.input(0).shape;
  if (!a || !w) {
    set_output(ctx, 0, DType::kF32, std::nullopt);
    return check_epilogue(ctx);
  }
  if (a->empty() || w->size() != 2) return ctx.error("A must have rank >= 1 and W rank 2");
  KILN_RETURN_IF_ERROR(check_dims_match(ctx, a->back(), (*w)[0], "inner dims of A and W"));
  if (bias && (bias->size() != 1)) return ctx.error("bias must be [N], got {}", sym_shape_to_string(*bias));
  if (bias) KILN_RETURN_IF_ERROR(check_dims_match(ctx, (*bias)[0], (*w)[1], "bias and N"));
  SymShape out(a->begin(), a->end() - 1);
  out.push_back((*w)[1]);
  set_output(ctx, 0, DType::kF32, std::move(out));
  KILN_RETURN_IF_ERROR(check_epilogue(ctx));
  return check_gate(ctx);
}

// kiln.Conv: Conv's inputs and attributes, then the epilogue.
Status infer_FusedConv(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(infer_conv(ctx, false, /*stored_weight=*/true));
  return check_epilogue(ctx);
}

}  // namespace kiln
