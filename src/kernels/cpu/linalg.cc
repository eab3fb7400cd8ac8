// CPU kernels for MatMul, Gemm, kiln.Linear and Einsum (see
// kernels/kernel.h), f32; convolutions are in conv.cc.
//
// MatMul, Gemm and kiln.Linear run on kiln's own GEMM (kernels/cpu/gemm.h),
// which allocates nothing: a constant weight is packed once into a plan
// step's state (or into scratch on each eager call), as does Einsum.
//
// Nodes marked to compute in bf16 (passes' assign_precision) round their
// operands to bf16 and sum in f32. kiln.Linear, Gemm and MatMul by one
// matrix run on the GEMM's bf16 products where bf16_gemm() says so
// (AVX512-BF16, on AMX tiles where the CPU has them; bf16.h): A rounded by
// the GEMM (gemm::F32Rows), a constant weight rounded and packed once,
// nothing allocated. Without AVX512-BF16, every MatMul too runs on the
// GEMM's f32 products with its operands rounded through bf16 (products.h).
// Batched MatMuls with AVX512-BF16 (and everything, where KILN_BF16_GEMM=onednn)
// run on oneDNN's bf16 primitives: each f32 operand rounded into
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
// run on kiln's GEMM, a product per batch entry, each operand used in place
// when its labels are already in product order (B also transposed) and
// copied into that order otherwise. One operand that only permutes (an
// unpatchify) is a strided copy. Everything else (three+ operands,
// diagonals, sums over a label only one operand has, f64) runs a direct
// loop. The equation is worked out once into an EinsumState, which a plan
// step keeps, so a replay reads no attribute and allocates nothing.

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

// Labels of a two-operand contraction, by role in the product Y = A x B.
struct Contraction {
  std::vector<int> batch, m, n, k;  // batch, m, n in output order; k in A's order
};

// The contraction a two-operand equation is, if it is one.
std::optional<Contraction> as_contraction(const EinsumSpec& spec, const Shape& a_shape, const Shape& b_shape) {
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
  return c;
}

std::vector<int> concat(std::initializer_list<const std::vector<int>*> parts) {
  std::vector<int> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// A strided copy, worked out ahead: element i of `dims` from src + the
// dot of its index with src_strides to dst likewise.
struct StridedCopy {
  Shape dims, src_strides, dst_strides;
  void run(const float* src, float* dst) const { copy_strided(src, src_strides, dst, dst_strides, dims); }
};

// Operand t's elements in `order` (labels), as a copy into that order's row-major layout.
StridedCopy copy_into_order(const EinsumSpec& spec, size_t t, const Shape& shape, const std::vector<int>& order) {
  const std::vector<int>& labels = spec.inputs[t];
  const Shape row_major = shape_strides(shape);
  StridedCopy c;
  for (int l : order) {
    const size_t d = size_t(std::find(labels.begin(), labels.end(), l) - labels.begin());
    c.dims.push_back(shape[d]);
    c.src_strides.push_back(row_major[d]);
  }
  c.dst_strides = shape_strides(c.dims);
  return c;
}

struct EinsumState final : KernelState {
  enum class Path { kProduct, kPermute, kLoop } path = Path::kLoop;
  // kPermute: the output is the one operand's elements, reordered.
  StridedCopy permute;
  // kProduct: per batch entry, Y[m, n] = A[m, k] x B[k, n].
  int64_t m = 0, n = 0, k = 0, batches = 0;
  Shape batch_dims, a_batch_strides, b_batch_strides;  // operands' strides by batch label (0: broadcast)
  std::optional<StridedCopy> a_copy, b_copy;             // into [batch, m, k] and [batch, k, n] order
  int64_t b_row_stride = 0, b_col_stride = 0;            // B's (t, j) at t * row + j * col within an entry
  std::optional<StridedCopy> y_permute;                  // [batch, m, n] into the output's order
  int64_t a_floats = 0, b_floats = 0;                    // copies' sizes (0: used in place)
  // kLoop: operand t's strides along output labels, then summed labels.
  Shape out_dims, sum_dims;
  std::vector<Shape> out_strides, sum_strides;
};

// An operand's strides by batch label within the layout it is read from
// (its copy, in [batch, rows, cols] order, or itself), 0 where it broadcasts.
Shape batch_strides_of(const EinsumSpec& spec, size_t t, const Shape& shape, const Contraction& c,
                       const Shape& sizes, const std::optional<StridedCopy>& copy) {
  Shape strides;
  const Shape own = copy ? copy->dst_strides : label_strides(spec, t, shape, sizes);
  for (size_t i = 0; i < c.batch.size(); ++i) {
    const int l = c.batch[i];
    const size_t d = size_t(std::find(spec.inputs[t].begin(), spec.inputs[t].end(), l) - spec.inputs[t].begin());
    const bool broadcast = shape[d] != sizes[size_t(l)];
    strides.push_back(broadcast ? 0 : copy ? own[i] : own[size_t(l)]);
  }
  return strides;
}

Result<EinsumState> einsum_state(const KernelContext& ctx, DType dtype) {
  Shape sizes;
  KILN_ASSIGN_OR_RETURN(EinsumSpec spec,
                        einsum_parse_concrete(ctx.attrs().get_string("equation", ""), ctx.inputs, &sizes));
  EinsumState st;
  auto group = [&](const std::vector<int>& labels) {
    int64_t n = 1;
    for (int l : labels) n *= sizes[size_t(l)];
    return n;
  };
  std::optional<Contraction> c;
  if (dtype == DType::kF32 && spec.inputs.size() == 2)
    c = as_contraction(spec, ctx.input(0)->shape, ctx.input(1)->shape);
  if (c) {
    st.path = EinsumState::Path::kProduct;
    const Shape &a_shape = ctx.input(0)->shape, &b_shape = ctx.input(1)->shape;
    st.m = group(c->m), st.n = group(c->n), st.k = group(c->k), st.batches = group(c->batch);
    for (int l : c->batch) st.batch_dims.push_back(sizes[size_t(l)]);
    if (spec.inputs[0] != concat({&c->batch, &c->m, &c->k})) {
      st.a_copy = copy_into_order(spec, 0, a_shape, concat({&c->batch, &c->m, &c->k}));
      st.a_floats = ctx.input(0)->numel();
    }
    st.b_row_stride = st.n, st.b_col_stride = 1;
    if (spec.inputs[1] == concat({&c->batch, &c->n, &c->k})) {
      st.b_row_stride = 1, st.b_col_stride = st.k;  // transposed in place
    } else if (spec.inputs[1] != concat({&c->batch, &c->k, &c->n})) {
      st.b_copy = copy_into_order(spec, 1, b_shape, concat({&c->batch, &c->k, &c->n}));
      st.b_floats = ctx.input(1)->numel();
    }
    st.a_batch_strides = batch_strides_of(spec, 0, a_shape, *c, sizes, st.a_copy);
    st.b_batch_strides = batch_strides_of(spec, 1, b_shape, *c, sizes, st.b_copy);
    const std::vector<int> y_order = concat({&c->batch, &c->m, &c->n});
    if (y_order != spec.output) {
      StridedCopy p;
      const Shape result_strides = shape_strides([&] {
        Shape d;
        for (int l : y_order) d.push_back(sizes[size_t(l)]);
        return d;
      }());
      for (int l : spec.output) {
        p.dims.push_back(sizes[size_t(l)]);
        p.src_strides.push_back(result_strides[size_t(std::find(y_order.begin(), y_order.end(), l) - y_order.begin())]);
      }
      p.dst_strides = shape_strides(p.dims);
      st.y_permute = std::move(p);
    }
    return st;
  }
  std::vector<int> summed;
  for (int l = 0; l < spec.num_labels(); ++l)
    if (!contains(spec.output, l) && sizes[size_t(l)] != 1) summed.push_back(l);
  const size_t operands = spec.inputs.size();
  st.out_strides.resize(operands);
  st.sum_strides.resize(operands);
  for (size_t t = 0; t < operands; ++t) {
    const Shape s = label_strides(spec, t, ctx.inputs[t]->shape, sizes);
    for (int l : spec.output) st.out_strides[t].push_back(s[size_t(l)]);
    for (int l : summed) st.sum_strides[t].push_back(s[size_t(l)]);
  }
  for (int l : spec.output) st.out_dims.push_back(sizes[size_t(l)]);
  for (int l : summed) st.sum_dims.push_back(sizes[size_t(l)]);
  if (dtype == DType::kF32 && operands == 1 && summed.empty()) {
    st.path = EinsumState::Path::kPermute;
    st.permute = {st.out_dims, st.out_strides[0], shape_strides(st.out_dims)};
  }
  return st;
}

template <typename T>
void einsum_loop(KernelContext& ctx, const EinsumState& st) {
  const int64_t out_count = shape_numel(st.out_dims), sum_count = shape_numel(st.sum_dims);
  const size_t operands = st.out_strides.size();
  T* out = ctx.output(0)->as<T>();
  parallel_for(out_count, double(out_count) * double(sum_count) * double(operands) > kParallelWork, [&](int64_t o) {
    double acc = 0;
    for (int64_t s = 0; s < sum_count; ++s) {
      double product = 1;
      for (size_t t = 0; t < operands; ++t) {
        int64_t offset = 0;
        for (int64_t rest = o, j = int64_t(st.out_dims.size()); j-- > 0; rest /= st.out_dims[size_t(j)])
          offset += rest % st.out_dims[size_t(j)] * st.out_strides[t][size_t(j)];
        for (int64_t rest = s, j = int64_t(st.sum_dims.size()); j-- > 0; rest /= st.sum_dims[size_t(j)])
          offset += rest % st.sum_dims[size_t(j)] * st.sum_strides[t][size_t(j)];
        product *= double(ctx.inputs[t]->as<T>()[offset]);
      }
      acc += product;
    }
    out[o] = T(acc);
  });
}

// Offset of batch entry `b` (row-major over dims) along `strides`.
int64_t batch_offset(int64_t b, const Shape& dims, const Shape& strides) {
  int64_t offset = 0;
  for (size_t d = dims.size(); d-- > 0; b /= dims[d]) offset += b % dims[d] * strides[d];
  return offset;
}

// The products: operands copied into product order where needed, then one
// product per batch entry (B packed into the thread's scratch), entries
// across the threads, or one entry's tiles when there are fewer entries
// than threads.
Status einsum_product(KernelContext& ctx, const EinsumState& st) {
  const float* a = ctx.input(0)->as<float>();
  const float* b = ctx.input(1)->as<float>();
  if (st.a_copy) {
    KILN_ASSIGN_OR_RETURN(float* copy, scratch_floats(ctx, st.a_floats, "A in product order"));
    st.a_copy->run(a, copy);
    a = copy;
  }
  if (st.b_copy) {
    KILN_ASSIGN_OR_RETURN(float* copy, scratch_floats(ctx, st.b_floats, "B in product order"));
    st.b_copy->run(b, copy);
    b = copy;
  }
  float* y = ctx.output(0)->as<float>();
  if (st.y_permute) {
    KILN_ASSIGN_OR_RETURN(y, scratch_floats(ctx, st.batches * st.m * st.n, "the products"));
  }
  if (st.k == 0) {
    std::fill_n(y, st.batches * st.m * st.n, 0.0f);
  } else {
    const int64_t threads = thread_slots(), packed = gemm::packed_floats(st.k, st.n);
    const bool across = st.batches >= threads;
    const int64_t slot = across ? thread_slot<float>(packed) : packed;
    KILN_ASSIGN_OR_RETURN(float* panels, scratch_floats(ctx, (across ? threads : 1) * slot, "packed B"));
    auto product = [&](int64_t entry, float* pb, bool parallel) {
      gemm::pack(b + batch_offset(entry, st.batch_dims, st.b_batch_strides), st.b_row_stride, st.b_col_stride, st.k,
                 st.n, pb);
      const gemm::Problem p{st.m, st.n, st.k, a + batch_offset(entry, st.batch_dims, st.a_batch_strides), st.k, pb,
                            y + entry * st.m * st.n, st.n};
      if (parallel) gemm::multiply(p, {}, true);
      else gemm::block(p, {});
    };
    if (across) {
      parallel_for(st.batches, true, [&](int64_t entry) { product(entry, panels + omp_get_thread_num() * slot, false); });
    } else {
      for (int64_t entry = 0; entry < st.batches; ++entry) product(entry, panels, st.m * st.n * st.k > kParallelWork);
    }
  }
  if (st.y_permute) st.y_permute->run(y, ctx.output(0)->as<float>());
  return ok_status();
}

Status run_einsum(KernelContext& ctx, const EinsumState& st) {
  switch (st.path) {
    case EinsumState::Path::kProduct:
      return einsum_product(ctx, st);
    case EinsumState::Path::kPermute:
      st.permute.run(ctx.input(0)->as<float>(), ctx.output(0)->as<float>());
      return ok_status();
    case EinsumState::Path::kLoop:
      if (ctx.input(0)->dtype == DType::kF32) einsum_loop<float>(ctx, st);
      else einsum_loop<double>(ctx, st);
      return ok_status();
  }
  return ok_status();
}

}  // namespace

Status cpu_Einsum(KernelContext& ctx) {
  if (const auto* st = ctx.state ? dynamic_cast<const EinsumState*>(ctx.state->get()) : nullptr)
    return run_einsum(ctx, *st);
  const DType dtype = ctx.input(0)->dtype;
  if (dtype != DType::kF32 && dtype != DType::kF64)
    return ctx.unsupported_error("dtype {} is not implemented", dtype_name(dtype));
  if (ctx.output(0)->numel() == 0) return ok_status();
  KILN_ASSIGN_OR_RETURN(EinsumState st, einsum_state(ctx, dtype));
  if (!recording(ctx)) return run_einsum(ctx, st);
  *ctx.state = std::make_unique<EinsumState>(std::move(st));
  return run_einsum(ctx, static_cast<const EinsumState&>(**ctx.state));
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
