// CPU kernels for MatMul, Gemm, kiln.Linear and Einsum (see
// kernels/kernel.h), f32; convolutions are in conv.cc.
//
// MatMul, Gemm and kiln.Linear run on kiln's own GEMM (kernels/cpu/gemm.h),
// which allocates nothing: a constant weight is packed once into a plan
// step's state (or into scratch on each eager call). Einsum runs through
// oneDNN (dnnl_replay.h).
//
// Nodes marked to compute in bf16 (passes' assign_precision) round their
// operands to bf16 and sum in f32. kiln.Linear, Gemm and MatMul by one
// matrix run on the GEMM's bf16 products where bf16_gemm() says so
// (AVX512-BF16 and no AMX, bf16.h): A rounded by the GEMM (gemm::F32Rows), a
// constant weight rounded and packed once, nothing allocated. Without
// AVX512-BF16, every MatMul too runs on the GEMM's f32 products with its
// operands rounded through bf16 (products.h). With AMX, and batched MatMuls
// with AVX512-BF16, oneDNN's bf16 primitives: each f32 operand rounded into
// scratch on every call (DnnlReplay's kBf16Input), a constant weight rounded
// and packed once, f32 accumulation and output.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "ir/infer/linalg.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/dnnl_replay.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/products.h"
#include "kernels/kernel.h"
#include "passes/pass.h"

namespace kiln {

namespace {

using namespace linalg;

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
// kKiln): A is input 0 (rows of k), which the GEMM rounds (gemm::F32Rows);
// B is input 1 (element (t, j) at b[t * row_stride + j * col_stride])
// packed once in a plan, else on each call.
Status multiply_bf16(KernelContext& ctx, int64_t rows, int64_t n, int64_t k, int64_t row_stride,
                     int64_t col_stride, const gemm::Epilogue& e) {
  KILN_ASSIGN_OR_RETURN(const bf16* packed,
                        packed_operand<bf16>(ctx, 1, ctx.input(1)->as<float>(), row_stride, col_stride, k, n));
  KILN_ASSIGN_OR_RETURN(void* scratch,
                        scratch_bytes(ctx, gemm::f32_rows_scratch(rows, n, k, thread_slots()), "bf16 rows of A"));
  const int64_t depth = gemm::bf16_depth(k);
  gemm::Epilogue f = e;
  set_gate(ctx, rows, n, f);
  gemm::multiply(gemm::Bf16Problem{rows, n, depth, nullptr, depth, packed, ctx.output(0)->as<float>(), n},
                 gemm::F32Rows{ctx.input(0)->as<float>(), k, k, scratch}, f, true);
  return ok_status();
}

// Where oneDNN ran kiln.Linear's product (its post-ops have no gate that
// changes from one run of rows to the next): Y = Y * gate + residual after.
Status apply_gate(KernelContext& ctx) {
  if (!ctx.input(4)) return ok_status();
  float* y = ctx.output(0)->as<float>();
  const float* residual = ctx.input(3) ? ctx.input(3)->as<float>() : nullptr;
  const int64_t n = ctx.output(0)->shape.back(), rows = n ? ctx.output(0)->numel() / n : 0;
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

}  // namespace

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
    strides_in_out_order.push_back(
        result_strides[size_t(std::find(y_order.begin(), y_order.end(), l) - y_order.begin())]);
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
  // W [K, N], or [N, K] (transB): the GEMM's packing reads either by strides.
  const bool trans_b = ctx.attrs().get_int("transB", 0) != 0;
  const int64_t k = w.shape[trans_b ? 1 : 0], n = w.shape[trans_b ? 0 : 1];
  const int64_t row_stride = trans_b ? 1 : n, col_stride = trans_b ? k : 1;
  if (y.numel() == 0) return ok_status();
  if (k == 0) return ctx.unsupported_error("an empty inner dimension");
  if (computes_in_bf16(*ctx.node) && bf16_gemm() == Bf16Gemm::kKiln)
    return multiply_bf16(ctx, a.numel() / k, n, k, row_stride, col_stride, fused_epilogue(ctx, false));
  if (computes_in_bf16(*ctx.node) && bf16_gemm() == Bf16Gemm::kOnednn) {  // the epilogue as post-ops, a gate after
    const bool gated = ctx.input(4) != nullptr;
    KILN_RETURN_IF_ERROR(guard_dnnl(ctx, [&] {
      const int64_t m = a.numel() / k;
      const memory::desc yd = plain_desc({m, n});
      Args args;
      if (!gated) add_residual_arg(ctx, yd, args);
      return run_matmul_bf16(ctx, {m, k}, {k, 1}, {k, n}, {row_stride, col_stride}, {m, n}, ctx.input(2),
                             epilogue_attr(ctx, yd, !gated), std::move(args));
    }));
    return apply_gate(ctx);
  }
  KILN_ASSIGN_OR_RETURN(const float* packed,
                        packed_product_operand(ctx, 1, w.as<float>(), row_stride, col_stride, k, n));
  KILN_ASSIGN_OR_RETURN(const float* pa, product_input(ctx, 0));
  const int64_t m = a.numel() / k;
  gemm::Epilogue e = fused_epilogue(ctx, false);
  set_gate(ctx, m, n, e);
  gemm::multiply({m, n, k, pa, k, packed, y.as<float>(), n}, e, true);
  return ok_status();
}

}  // namespace kiln
