// ref kernel for kiln.Attention (see kernels/kernel.h): the unfused formula,
// softmax(Qh Kt * scale + Mask) Vh, in double, one row of scores at a time.
// Operands are indexed by mapping logical coordinates back through their
// perms (and slices), not by the strides the CPU kernel derives, so the two
// stay independent.
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "ir/attention_attrs.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

// Logical coordinates [batch..., row, col]; only the first `rank` are used.
using Coords = std::array<int64_t, 4>;

// Q, K or V: Transpose(x[slice], perm), where the slice (attribute
// q_slice = [axis, start, length], likewise k_slice and v_slice) cuts x's
// dim `axis` to [start, start + length).
struct Operand {
  const TensorView* x = nullptr;
  std::vector<int64_t> perm;
  Shape shape;  // x's, sliced
  int64_t axis = 0, start = 0;

  int64_t dim(int64_t j) const { return shape[size_t(perm[size_t(j)])]; }
  // The element at logical coordinate `at`.
  double at(const Coords& at) const {
    Coords source{};
    for (size_t j = 0; j < perm.size(); ++j) source[size_t(perm[j])] = at[j];
    source[size_t(axis)] += start;
    int64_t flat = 0;
    for (size_t k = 0; k < perm.size(); ++k) flat = flat * x->shape[k] + source[k];
    return x->as<float>()[flat];
  }
};

// Element of the mask broadcast (numpy-style, trailing dims aligned) to the
// rank-`rank` coordinate `at`.
double at_broadcast(const TensorView& mask, const Coords& at, int64_t rank) {
  int64_t flat = 0;
  const size_t skip = size_t(rank - mask.rank());
  for (size_t k = 0; k < size_t(mask.rank()); ++k)
    flat = flat * mask.shape[k] + (mask.shape[k] == 1 ? 0 : at[skip + k]);
  return mask.as<float>()[flat];
}

std::vector<int64_t> perm_attr(const KernelContext& ctx, std::string_view name, int64_t rank) {
  if (const auto* perm = ctx.attrs().get_ints(name)) return *perm;
  std::vector<int64_t> identity(static_cast<size_t>(rank));
  std::iota(identity.begin(), identity.end(), 0);
  return identity;
}

// `batch` with the last two of `rank` coordinates set to a, b.
Coords with_last(Coords batch, int64_t rank, int64_t a, int64_t b) {
  batch[size_t(rank - 2)] = a;
  batch[size_t(rank - 1)] = b;
  return batch;
}

Operand operand(const KernelContext& ctx, size_t i) {
  Operand o;
  o.x = ctx.input(i);
  o.perm = perm_attr(ctx, attention_attrs::kOperands[i].perm, o.x->rank());
  o.shape = o.x->shape;
  if (const std::vector<int64_t>* s = ctx.attrs().get_ints(attention_attrs::kOperands[i].slice)) {
    o.axis = (*s)[0];
    o.start = (*s)[1];
    o.shape[size_t(o.axis)] = (*s)[2];
  }
  return o;
}

struct Problem {
  Operand q, k, v;
  const TensorView* mask = nullptr;
  TensorView* y = nullptr;
  int64_t rank = 0;
  std::vector<int64_t> out_perm;
  double scale = 1;
  int64_t sq = 0, d = 0, sk = 0, dv = 0;
};

Problem read_problem(const KernelContext& ctx) {
  Problem a;
  a.q = operand(ctx, 0);
  a.k = operand(ctx, 1);
  a.v = operand(ctx, 2);
  a.mask = ctx.input(3);
  a.y = ctx.output(0);
  a.rank = a.q.x->rank();
  a.out_perm = perm_attr(ctx, attention_attrs::kOutPerm, a.rank);
  a.scale = ctx.attrs().get_float(attention_attrs::kScale, 1.0f);
  a.sq = a.q.dim(a.rank - 2);
  a.d = a.q.dim(a.rank - 1);
  a.sk = a.k.dim(a.rank - 1);
  a.dv = a.v.dim(a.rank - 1);
  return a;
}

// p = softmax over j of (Qh[i] . Kt[:, j]) * scale + Mask[i, j], for batch index `at`.
void softmax_row(const Problem& a, const Coords& at, int64_t i, std::vector<double>& p) {
  double max = -INFINITY;
  for (int64_t j = 0; j < a.sk; ++j) {
    double dot = 0;
    for (int64_t t = 0; t < a.d; ++t)
      dot += a.q.at(with_last(at, a.rank, i, t)) * a.k.at(with_last(at, a.rank, t, j));
    p[j] = dot * a.scale + (a.mask ? at_broadcast(*a.mask, with_last(at, a.rank, i, j), a.rank) : 0.0);
    max = std::max(max, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < a.sk; ++j) {
    p[j] = std::exp(p[j] - max);  // NaN throughout for a row of -inf, as softmax gives
    sum += p[j];
  }
  for (double& x : p) x /= sum;
}

// Y at O's coordinate [at..., i, e] = sum over j of p[j] Vh[j, e].
void write_row(const Problem& a, const Coords& at, int64_t i, const std::vector<double>& p) {
  for (int64_t e = 0; e < a.dv; ++e) {
    double o = 0;
    for (int64_t j = 0; j < a.sk; ++j) o += p[j] * a.v.at(with_last(at, a.rank, j, e));
    const Coords out = with_last(at, a.rank, i, e);
    int64_t flat = 0;
    for (size_t k = 0; k < a.out_perm.size(); ++k) flat = flat * a.y->shape[k] + out[size_t(a.out_perm[k])];
    a.y->as<float>()[flat] = float(o);
  }
}

}  // namespace

Status ref_Attention(KernelContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.input(i) && ctx.input(i)->dtype != DType::kF32)
      return ctx.unsupported_error("input {} has dtype {}", i, dtype_name(ctx.input(i)->dtype));
  const Problem a = read_problem(ctx);
  int64_t batches = 1;
  for (int64_t b = 0; b < a.rank - 2; ++b) batches *= a.q.dim(b);
  std::vector<double> p(size_t(a.sk));
  for (int64_t n = 0; n < batches; ++n) {
    Coords at{};
    for (int64_t b = a.rank - 3, rest = n; b >= 0; --b) {
      at[size_t(b)] = rest % a.q.dim(b);
      rest /= a.q.dim(b);
    }
    for (int64_t i = 0; i < a.sq; ++i) {
      softmax_row(a, at, i, p);
      write_row(a, at, i, p);
    }
  }
  return ok_status();
}

}  // namespace kiln
