// Reference kernels for the linalg ops (see kernels/kernel.h): plain loops,
// one output element at a time, accumulating in double. Test oracles only.
#include <algorithm>
#include <cmath>

#include "ir/infer/linalg.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

// Runs fn(T{}) for f32 and f64 inputs.
template <typename Fn>
Status visit_float(const KernelContext& ctx, Fn&& fn) {
  DType dtype = ctx.input(0)->dtype;
  if (dtype == DType::kF32) return fn(float{});
  if (dtype == DType::kF64) return fn(double{});
  return ctx.unsupported_error("dtype {} is not implemented", dtype_name(dtype));
}

// idx = the multi-index of row-major position `flat` within `dims`.
void unravel(int64_t flat, const Shape& dims, Shape& idx) {
  idx.resize(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
}

// Row-major offset of `idx` in `dims`; dims of size 1 broadcast (index 0).
// `idx` may have more leading entries than `dims` (they are ignored).
int64_t broadcast_offset(const Shape& dims, const Shape& idx) {
  int64_t offset = 0;
  size_t lead = idx.size() - dims.size();
  for (size_t d = 0; d < dims.size(); ++d) offset = offset * dims[d] + (dims[d] == 1 ? 0 : idx[lead + d]);
  return offset;
}

Shape drop_last(const Shape& s, size_t n) { return Shape(s.begin(), s.end() - int64_t(n)); }

}  // namespace

Status ref_MatMul(KernelContext& ctx) {
  return visit_float(ctx, [&](auto tag) {
    using T = decltype(tag);
    const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
    TensorView& y = *ctx.output(0);
    Shape as = a.shape, bs = b.shape;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
    const Shape a_batch = drop_last(as, 2), b_batch = drop_last(bs, 2);
    const Shape y_batch = drop_last(y.shape, (a.rank() > 1) + (b.rank() > 1));
    Shape idx;
    for (int64_t batch = 0; batch < shape_numel(y_batch); ++batch) {
      unravel(batch, y_batch, idx);
      const T* pa = a.as<T>() + broadcast_offset(a_batch, idx) * m * k;
      const T* pb = b.as<T>() + broadcast_offset(b_batch, idx) * k * n;
      T* py = y.as<T>() + batch * m * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p) acc += double(pa[i * k + p]) * double(pb[p * n + j]);
          py[i * n + j] = T(acc);
        }
    }
    return ok_status();
  });
}

Status ref_Gemm(KernelContext& ctx) {
  return visit_float(ctx, [&](auto tag) {
    using T = decltype(tag);
    const TensorView &a = *ctx.input(0), &b = *ctx.input(1);
    const TensorView* c = ctx.input(2);
    TensorView& y = *ctx.output(0);
    const bool trans_a = ctx.attrs().get_int("transA", 0) != 0;
    const bool trans_b = ctx.attrs().get_int("transB", 0) != 0;
    const double alpha = ctx.attrs().get_float("alpha", 1.0f), beta = ctx.attrs().get_float("beta", 1.0f);
    const int64_t m = y.shape[0], n = y.shape[1], k = a.shape[trans_a ? 0 : 1];
    Shape idx(2);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          double av = a.as<T>()[trans_a ? p * m + i : i * k + p];
          double bv = b.as<T>()[trans_b ? j * k + p : p * n + j];
          acc += av * bv;
        }
        acc *= alpha;
        if (c) {
          idx = {i, j};
          acc += beta * double(c->as<T>()[broadcast_offset(c->shape, idx)]);
        }
        y.as<T>()[i * n + j] = T(acc);
      }
    return ok_status();
  });
}

namespace {

// Conv and ConvTranspose, gathered per output element: output position o
// along a spatial dim meets input position i through kernel tap k when
//   Conv:          i = o * stride - pad_begin + k * dilation
//   ConvTranspose: o = i * stride - pad_begin + k * dilation
template <typename T>
Status conv_ref(KernelContext& ctx, bool transpose) {
  const TensorView &x = *ctx.input(0), &w = *ctx.input(1);
  const TensorView* bias = ctx.input(2);
  TensorView& y = *ctx.output(0);
  const size_t spatial = size_t(x.rank()) - 2;
  Shape in_dims(x.shape.begin() + 2, x.shape.end()), out_dims(y.shape.begin() + 2, y.shape.end());
  Shape kernel_dims(w.shape.begin() + 2, w.shape.end());
  KILN_ASSIGN_OR_RETURN(ConvAttrs a, conv_attrs(*ctx.node, spatial, sym_shape_from(kernel_dims)));
  Shape pad_begin(spatial);
  for (size_t d = 0; d < spatial; ++d)
    pad_begin[d] = transpose ? conv_transpose_pad_begin(a, d, in_dims[d], out_dims[d])
                             : conv_pads(a, d, in_dims[d], out_dims[d]).first;
  const int64_t batch = x.shape[0], in_channels = x.shape[1], out_channels = y.shape[1];
  const int64_t group_in = in_channels / a.group, group_out = out_channels / a.group;
  const int64_t in_size = shape_numel(in_dims), out_size = shape_numel(out_dims);
  const int64_t taps = shape_numel(kernel_dims);
  const Shape in_strides = shape_strides(in_dims);
  Shape o, k, i(spatial);
  for (int64_t nb = 0; nb < batch; ++nb)
    for (int64_t oc = 0; oc < out_channels; ++oc)
      for (int64_t op = 0; op < out_size; ++op) {
        unravel(op, out_dims, o);
        const int64_t g = oc / group_out;
        double acc = bias ? double(bias->as<T>()[oc]) : 0.0;
        for (int64_t c = 0; c < group_in; ++c) {
          const int64_t ic = g * group_in + c;
          for (int64_t kp = 0; kp < taps; ++kp) {
            unravel(kp, kernel_dims, k);
            bool inside = true;
            for (size_t d = 0; d < spatial && inside; ++d) {
              int64_t t = transpose ? o[d] + pad_begin[d] - k[d] * a.dilations[d]
                                    : o[d] * a.strides[d] - pad_begin[d] + k[d] * a.dilations[d];
              if (transpose) {
                inside = t >= 0 && t % a.strides[d] == 0;
                t /= a.strides[d];
              }
              inside = inside && t >= 0 && t < in_dims[d];
              i[d] = t;
            }
            if (!inside) continue;
            int64_t x_off = (nb * in_channels + ic) * in_size;
            for (size_t d = 0; d < spatial; ++d) x_off += i[d] * in_strides[d];
            const int64_t w_off = transpose ? (ic * group_out + oc % group_out) * taps + kp
                                            : (oc * group_in + c) * taps + kp;
            acc += double(x.as<T>()[x_off]) * double(w.as<T>()[w_off]);
          }
        }
        y.as<T>()[(nb * out_channels + oc) * out_size + op] = T(acc);
      }
  return ok_status();
}

}  // namespace

Status ref_Conv(KernelContext& ctx) {
  return visit_float(ctx, [&](auto tag) { return conv_ref<decltype(tag)>(ctx, false); });
}

Status ref_ConvTranspose(KernelContext& ctx) {
  return visit_float(ctx, [&](auto tag) { return conv_ref<decltype(tag)>(ctx, true); });
}

Status ref_Einsum(KernelContext& ctx) {
  return visit_float(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    Shape sizes;
    KILN_ASSIGN_OR_RETURN(EinsumSpec spec,
                          einsum_parse_concrete(ctx.attrs().get_string("equation", ""), ctx.inputs, &sizes));
    // Output labels outside, every other label summed inside.
    std::vector<int> summed;
    for (int l = 0; l < spec.num_labels(); ++l)
      if (std::find(spec.output.begin(), spec.output.end(), l) == spec.output.end()) summed.push_back(l);
    Shape out_dims, sum_dims;
    for (int l : spec.output) out_dims.push_back(sizes[size_t(l)]);
    for (int l : summed) sum_dims.push_back(sizes[size_t(l)]);
    Shape label_index(size_t(spec.num_labels())), o, s, operand_index;
    for (int64_t op = 0; op < shape_numel(out_dims); ++op) {
      unravel(op, out_dims, o);
      for (size_t j = 0; j < o.size(); ++j) label_index[size_t(spec.output[j])] = o[j];
      double acc = 0;
      for (int64_t sp = 0; sp < shape_numel(sum_dims); ++sp) {
        unravel(sp, sum_dims, s);
        for (size_t j = 0; j < s.size(); ++j) label_index[size_t(summed[j])] = s[j];
        double product = 1;
        for (size_t t = 0; t < spec.inputs.size(); ++t) {
          operand_index.clear();
          for (int l : spec.inputs[t]) operand_index.push_back(label_index[size_t(l)]);
          product *= double(ctx.inputs[t]->as<T>()[broadcast_offset(ctx.inputs[t]->shape, operand_index)]);
        }
        acc += product;
      }
      ctx.output(0)->as<T>()[op] = T(acc);
    }
    return ok_status();
  });
}

}  // namespace kiln

namespace kiln {

namespace {

// kiln.Linear's and kiln.Conv's epilogue on one value.
double activate(const std::string& act, double alpha, double v) {
  if (act == "gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  if (act == "gelu_tanh") return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  if (act == "swish") return v / (1 + std::exp(-alpha * v));
  if (act == "relu") return std::max(v, 0.0);
  return v;
}

// y = act(y) * gate + residual (inputs 4 and 3), elementwise over the
// output; kiln.Linear's gate holds one row of N for each of its equal runs
// of the output's rows.
void apply_epilogue(KernelContext& ctx) {
  const std::string act = ctx.attrs().get_string("activation", "none");
  const double alpha = ctx.attrs().get_float("alpha", 1.0f);
  const TensorView *residual = ctx.input(3), *gate = ctx.input(4);
  TensorView& y = *ctx.output(0);
  const int64_t n = y.shape.empty() ? 1 : y.shape.back();
  const int64_t runs = gate && n ? std::max<int64_t>(1, gate->numel() / n) : 1;
  const int64_t per_run = std::max<int64_t>(1, y.numel() / runs);  // outputs one gate row scales
  for (int64_t i = 0; i < y.numel(); ++i) {
    double v = activate(act, alpha, y.as<float>()[i]);
    if (gate) v *= gate->as<float>()[std::min(i / per_run, runs - 1) * n + i % n];
    y.as<float>()[i] = float(v + (residual ? residual->as<float>()[i] : 0.0));
  }
}

}  // namespace

// kiln.Linear: each row of Y = act(row of A x W + bias) + residual, in double
// up to the epilogue.
Status ref_Linear(KernelContext& ctx) {
  const TensorView &a = *ctx.input(0), &w = *ctx.input(1);
  const TensorView* bias = ctx.input(2);
  TensorView& y = *ctx.output(0);
  for (const TensorView* in : ctx.inputs)
    if (in && in->dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(in->dtype));
  const bool trans_b = ctx.attrs().get_int("transB", 0) != 0;  // W [N, K]
  const int64_t k = w.shape[trans_b ? 1 : 0], n = w.shape[trans_b ? 0 : 1], rows = n ? y.numel() / n : 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double v = bias ? bias->as<float>()[j] : 0.0;
      for (int64_t p = 0; p < k; ++p)
        v += double(a.as<float>()[i * k + p]) * w.as<float>()[trans_b ? j * k + p : p * n + j];
      y.as<float>()[i * n + j] = float(v);
    }
  apply_epilogue(ctx);
  return ok_status();
}

Status ref_FusedConv(KernelContext& ctx) {
  for (const TensorView* in : ctx.inputs)
    if (in && in->dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(in->dtype));
  KILN_RETURN_IF_ERROR(conv_ref<float>(ctx, false));
  apply_epilogue(ctx);
  return ok_status();
}

}  // namespace kiln
