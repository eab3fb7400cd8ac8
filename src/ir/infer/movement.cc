// Shape inference for the movement ops (see ir/shape_inference.h).
//
// At import time shape-carrying inputs (Reshape's shape, Slice's starts, ...)
// are often computed by Shape->Gather->Concat chains and so unknown: the
// output then gets unknown dims of the right rank when the carrying input's
// length is known, else unknown rank.
#include <algorithm>
#include <string>

#include "ir/infer/movement.h"

#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

Status require_index_dtype(const InferContext& ctx, size_t i) {
  return require_dtype(ctx, i, {DType::kI64, DType::kI32});
}

// a * b, an error past kMaxTensorElements (so later arithmetic cannot overflow).
Result<int64_t> checked_mul(const InferContext& ctx, int64_t a, int64_t b) {
  int64_t p;
  if (__builtin_mul_overflow(a, b, &p) || p > kMaxTensorElements)
    return ctx.error("a dimension product ({} x {}) exceeds {} elements", a, b, kMaxTensorElements);
  return p;
}

// Errors when a fully known shape has too many elements.
Status check_numel(const InferContext& ctx, const SymShape& s) {
  int64_t n = 1;
  for (const Dim& d : s) {
    if (!d.known()) return ok_status();
    if (d.value == 0) return ok_status();
  }
  for (const Dim& d : s) {
    KILN_ASSIGN_OR_RETURN(n, checked_mul(ctx, n, d.value));
  }
  return ok_status();
}

// Product of s[begin, end): known when every dim is; a lone symbolic dim
// among known 1s keeps its symbol; otherwise unknown.
Result<Dim> dims_product(const InferContext& ctx, const SymShape& s, size_t begin, size_t end) {
  int64_t known = 1;
  const Dim* other = nullptr;
  int others = 0;
  for (size_t i = begin; i < end; ++i) {
    if (s[i].known()) {
      KILN_ASSIGN_OR_RETURN(known, checked_mul(ctx, known, s[i].value));
    } else {
      other = &s[i];
      ++others;
    }
  }
  if (others == 0) return Dim(known);
  if (known == 0) return Dim(0);
  if (others == 1 && known == 1) return *other;
  return Dim();
}

Status unknown_rank_output(InferContext& ctx, DType dtype) {
  set_output(ctx, 0, dtype, std::nullopt);
  return ok_status();
}

// Input i carries an int list (a shape, repeats, axes, split sizes): i32 or
// i64, 1-D (or a scalar, read as one entry, where `scalar_ok`). Returns its
// length when known.
Result<std::optional<int64_t>> int_list_length(const InferContext& ctx, size_t i,
                                               bool scalar_ok = false) {
  KILN_RETURN_IF_ERROR(require_index_dtype(ctx, i));
  const auto& shape = ctx.input(i).shape;
  if (!shape) return std::optional<int64_t>();
  if (shape->empty() && scalar_ok) return std::optional<int64_t>(1);
  if (shape->size() != 1) return ctx.error("input {} must be 1-D, got rank {}", i, shape->size());
  return (*shape)[0].known() ? std::optional((*shape)[0].value) : std::nullopt;
}

// An int list given as attribute `attr` (older opsets) or as input `input`
// (newer ones, e.g. Squeeze/Unsqueeze axes from 13, Split's split from 13).
struct IntListArg {
  bool present = false;
  std::optional<std::vector<int64_t>> values;
  std::optional<int64_t> length;
};

Result<IntListArg> int_list_arg(const InferContext& ctx, std::string_view attr, size_t input) {
  IntListArg arg;
  if (const std::vector<int64_t>* v = ctx.attrs().get_ints(attr)) {
    arg.present = true;
    arg.values = *v;
  } else if (ctx.has_input(input)) {
    arg.present = true;
    KILN_ASSIGN_OR_RETURN(arg.length, int_list_length(ctx, input, /*scalar_ok=*/true));
    arg.values = input_ints(ctx, input);
  }
  if (arg.values) arg.length = int64_t(arg.values->size());
  return arg;
}

// Normalizes every axis into [0, rank); an error on duplicates.
Result<std::vector<int64_t>> normalize_axes(const InferContext& ctx, std::vector<int64_t> axes,
                                            int64_t rank) {
  for (int64_t& a : axes) {
    KILN_ASSIGN_OR_RETURN(a, normalize_axis(ctx, a, rank));
  }
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return ctx.error("axes contain a duplicate");
  return axes;
}

// Known product and symbol multiset of a shape, for cancelling symbols.
struct SymProduct {
  int64_t known = 1;
  std::vector<std::string> symbols;
  bool anonymous = false;  // holds a dim with neither value nor name
};

Status add_to_product(const InferContext& ctx, SymProduct& p, const Dim& d) {
  if (d.known()) {
    KILN_ASSIGN_OR_RETURN(p.known, checked_mul(ctx, p.known, d.value));
  } else if (!d.symbol.empty()) {
    p.symbols.push_back(d.symbol);
  } else {
    p.anonymous = true;
  }
  return ok_status();
}

// Reshape's target from the shape values: 0 copies the input dim (unless
// allowzero), -1 takes what is left. Symbols cancel, so that
// [batch,77,768] -> [0,-1,12,64] still gives [batch,77,12,64].
Result<SymShape> reshape_target(const InferContext& ctx, const std::optional<SymShape>& in,
                                const std::vector<int64_t>& target, bool allowzero) {
  SymShape out(target.size());
  int infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t v = target[i];
    if (v == -1) {
      if (infer_at >= 0) return ctx.error("shape has more than one -1");
      infer_at = int(i);
    } else if (v < -1) {
      return ctx.error("shape value {} is invalid (must be >= -1)", v);
    } else if (v == 0 && !allowzero) {
      if (in && i >= in->size())
        return ctx.error("shape value 0 at position {} copies a dim the rank-{} input lacks", i,
                         in->size());
      out[i] = in ? (*in)[i] : Dim();
    } else {
      out[i] = Dim(v);
    }
  }
  if (allowzero && infer_at >= 0 && std::count(target.begin(), target.end(), 0) > 0)
    return ctx.error("shape has both 0 and -1 while allowzero=1");
  if (!in) return out;

  SymProduct have, want;
  for (const Dim& d : *in) KILN_RETURN_IF_ERROR(add_to_product(ctx, have, d));
  for (size_t i = 0; i < out.size(); ++i)
    if (int(i) != infer_at) KILN_RETURN_IF_ERROR(add_to_product(ctx, want, out[i]));
  bool concrete = have.symbols.empty() && want.symbols.empty() && !have.anonymous && !want.anonymous;
  for (const std::string& s : want.symbols) {
    auto it = std::find(have.symbols.begin(), have.symbols.end(), s);
    if (it == have.symbols.end()) return out;  // cannot relate the two: leave unknown
    have.symbols.erase(it);
  }
  if (!have.symbols.empty() || have.anonymous || want.anonymous) return out;
  if (infer_at < 0) {
    if (concrete && have.known != want.known)
      return ctx.error("cannot reshape {} ({} elements) to {}", sym_shape_to_string(*in),
                       have.known, sym_shape_to_string(out));
    return out;
  }
  if (want.known == 0 || have.known % want.known != 0) {
    if (concrete)
      return ctx.error("cannot reshape {} to {} (no size fits the -1)", sym_shape_to_string(*in),
                       sym_shape_to_string(out));
    return out;
  }
  out[size_t(infer_at)] = Dim(have.known / want.known);
  return out;
}

}  // namespace

SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return {};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
  }
  int64_t span = step > 0 ? end - start : start - end;
  if (span <= 0) return {start, 0};
  // Step magnitude as unsigned: -INT64_MIN does not fit an int64_t.
  uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  return {start, int64_t((uint64_t(span) - 1) / stride + 1)};
}


Status infer_Reshape(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> length, int_list_length(ctx, 1));
  bool allowzero = ctx.attrs().get_int("allowzero", 0) != 0;
  std::optional<std::vector<int64_t>> target = input_ints(ctx, 1);
  if (!target) {
    if (!length) return unknown_rank_output(ctx, data.dtype);
    set_output(ctx, 0, data.dtype, unknown_shape(*length));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(SymShape out, reshape_target(ctx, data.shape, *target, allowzero));
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

Status infer_Flatten(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  if (!data.shape) {
    set_output(ctx, 0, data.dtype, unknown_shape(2));
    return ok_status();
  }
  const SymShape& in = *data.shape;
  int64_t rank = int64_t(in.size());
  int64_t axis = ctx.attrs().get_int("axis", 1);
  if (axis < -rank || axis > rank)
    return ctx.error("axis {} is out of range for rank {} (allowed [{}, {}])", axis, rank, -rank, rank);
  if (axis < 0) axis += rank;
  KILN_ASSIGN_OR_RETURN(Dim outer, dims_product(ctx, in, 0, size_t(axis)));
  KILN_ASSIGN_OR_RETURN(Dim inner, dims_product(ctx, in, size_t(axis), in.size()));
  set_output(ctx, 0, data.dtype, SymShape{outer, inner});
  return ok_status();
}

Status infer_Squeeze(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(IntListArg axes, int_list_arg(ctx, "axes", 1));
  if (!data.shape) return unknown_rank_output(ctx, data.dtype);
  const SymShape& in = *data.shape;
  int64_t rank = int64_t(in.size());
  if (!axes.present) {  // drop every 1; an unknown dim may or may not be one
    SymShape out;
    for (const Dim& d : in) {
      if (!d.known()) return unknown_rank_output(ctx, data.dtype);
      if (d.value != 1) out.push_back(d);
    }
    set_output(ctx, 0, data.dtype, std::move(out));
    return ok_status();
  }
  if (!axes.values) {
    if (!axes.length || *axes.length > rank) return unknown_rank_output(ctx, data.dtype);
    set_output(ctx, 0, data.dtype, unknown_shape(rank - *axes.length));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> norm, normalize_axes(ctx, *axes.values, rank));
  std::vector<bool> drop(in.size(), false);
  for (int64_t a : norm) {
    if (in[size_t(a)].known() && in[size_t(a)].value != 1)
      return ctx.error("cannot squeeze axis {} of size {}", a, in[size_t(a)].value);
    drop[size_t(a)] = true;
  }
  SymShape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i]) out.push_back(in[i]);
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

Status infer_Unsqueeze(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(IntListArg axes, int_list_arg(ctx, "axes", 1));
  if (!axes.present) return ctx.error("needs axes (attribute before opset 13, input from 13)");
  if (!data.shape || !axes.length) return unknown_rank_output(ctx, data.dtype);
  if (!axes.values) {
    set_output(ctx, 0, data.dtype, unknown_shape(int64_t(data.shape->size()) + *axes.length));
    return ok_status();
  }
  const SymShape& in = *data.shape;
  int64_t out_rank = int64_t(in.size() + axes.values->size());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> norm, normalize_axes(ctx, *axes.values, out_rank));
  std::vector<bool> inserted(size_t(out_rank), false);
  for (int64_t a : norm) inserted[size_t(a)] = true;
  SymShape out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[size_t(i)] ? Dim(1) : in[next++]);
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

Status infer_Transpose(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  const std::vector<int64_t>* perm = ctx.attrs().get_ints("perm");
  if (!data.shape) {
    set_output(ctx, 0, data.dtype,
               perm ? std::optional(unknown_shape(int64_t(perm->size()))) : std::nullopt);
    return ok_status();
  }
  const SymShape& in = *data.shape;
  if (!perm) {
    set_output(ctx, 0, data.dtype, SymShape(in.rbegin(), in.rend()));
    return ok_status();
  }
  if (perm->size() != in.size())
    return ctx.error("perm has {} entries for a rank-{} input", perm->size(), in.size());
  std::vector<bool> seen(in.size(), false);
  SymShape out;
  for (int64_t p : *perm) {
    if (p < 0 || p >= int64_t(in.size()) || seen[size_t(p)])
      return ctx.error("perm is not a permutation of 0..{}", int64_t(in.size()) - 1);
    seen[size_t(p)] = true;
    out.push_back(in[size_t(p)]);
  }
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

Status infer_Concat(InferContext& ctx) {
  DType dtype = ctx.input(0).dtype;
  std::optional<SymShape> first;  // the first input of known rank
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input {} is missing", i);
    if (ctx.input(i).dtype != dtype)
      return ctx.error("input {} is {} but input 0 is {}", i, dtype_name(ctx.input(i).dtype),
                       dtype_name(dtype));
    if (!first && ctx.input(i).shape) first = ctx.input(i).shape;
  }
  if (!first) return unknown_rank_output(ctx, dtype);
  int64_t rank = int64_t(first->size());
  if (rank == 0) return ctx.error("cannot concatenate rank-0 tensors");
  // Opset 1-3 default the axis to 1; from 4 it is required.
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx, ctx.attrs().get_int("axis", 1), rank));
  SymShape out = *first;
  Dim total(0);
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const auto& s = ctx.input(i).shape;
    if (!s) {
      total = Dim();
      continue;
    }
    if (int64_t(s->size()) != rank)
      return ctx.error("input {} has rank {}, input 0 has rank {}", i, s->size(), rank);
    for (int64_t d = 0; d < rank; ++d) {
      const Dim& here = (*s)[size_t(d)];
      if (d == axis) {
        if (total.known() && here.known()) {
          if (__builtin_add_overflow(total.value, here.value, &total.value) ||
              total.value > kMaxTensorElements)
            return ctx.error("concatenated axis is too large");
        } else {
          total = Dim();
        }
      } else if (here.known() && out[size_t(d)].known() && here.value != out[size_t(d)].value) {
        return ctx.error("input {} has shape {}, which does not match {} off axis {}", i,
                         sym_shape_to_string(*s), sym_shape_to_string(*first), axis);
      } else if (here.known()) {
        out[size_t(d)] = here;
      }
    }
  }
  out[size_t(axis)] = total;
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

Status infer_Split(InferContext& ctx) {
  size_t n = ctx.num_outputs();
  if (n == 0) return ctx.error("needs at least one output");
  const TypeInfo& data = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(IntListArg split, int_list_arg(ctx, "split", 1));
  if (split.length == 0) split = {};  // an empty split list means "not given"
  bool has_num_outputs = ctx.attrs().has("num_outputs");
  if (has_num_outputs && split.present)
    return ctx.error("give either split or num_outputs, not both");
  if (has_num_outputs && ctx.attrs().get_int("num_outputs", 0) != int64_t(n))
    return ctx.error("num_outputs is {} but the node has {} outputs",
                     ctx.attrs().get_int("num_outputs", 0), n);
  if (split.length && *split.length != int64_t(n))
    return ctx.error("split has {} entries for {} outputs", *split.length, n);
  if (split.values)
    for (int64_t v : *split.values)
      if (v < 0) return ctx.error("split size {} is negative", v);
  if (!data.shape) {
    for (size_t i = 0; i < n; ++i) set_output(ctx, i, data.dtype, std::nullopt);
    return ok_status();
  }
  const SymShape& in = *data.shape;
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx, ctx.attrs().get_int("axis", 0),
                                                     int64_t(in.size())));
  const Dim& dim = in[size_t(axis)];
  std::vector<Dim> sizes(n);  // unknown unless computed below
  if (split.values) {
    int64_t sum = 0;
    for (size_t i = 0; i < n; ++i) {
      sizes[i] = Dim((*split.values)[i]);
      if (__builtin_add_overflow(sum, (*split.values)[i], &sum))
        return ctx.error("split sizes overflow");
    }
    if (dim.known() && sum != dim.value)
      return ctx.error("split sizes add up to {}, but axis {} has size {}", sum, axis, dim.value);
  } else if (!split.present && dim.known()) {
    int64_t count = int64_t(n);
    if (has_num_outputs) {  // opset 18: ceil-sized chunks, the last one smaller
      int64_t chunk = (dim.value + count - 1) / count;
      int64_t last = dim.value - chunk * (count - 1);
      if (last < 0)
        return ctx.error("axis size {} cannot be split into {} chunks of {}", dim.value, count, chunk);
      for (size_t i = 0; i < n; ++i) sizes[i] = Dim(i + 1 == n ? last : chunk);
    } else {
      if (dim.value % count != 0)
        return ctx.error("axis size {} does not split evenly into {} outputs", dim.value, count);
      for (Dim& s : sizes) s = Dim(dim.value / count);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    SymShape out = in;
    out[size_t(axis)] = sizes[i];
    set_output(ctx, i, data.dtype, std::move(out));
  }
  return ok_status();
}

Status infer_Slice(InferContext& ctx) {
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) KILN_RETURN_IF_ERROR(require_index_dtype(ctx, i));
  const TypeInfo& data = ctx.input(0);
  if (!data.shape) return unknown_rank_output(ctx, data.dtype);
  const SymShape& in = *data.shape;
  int64_t rank = int64_t(in.size());
  auto starts = input_ints(ctx, 1), ends = input_ints(ctx, 2);
  auto axes = input_ints(ctx, 3), steps = input_ints(ctx, 4);
  bool axes_known = !ctx.has_input(3) || axes;
  if (!axes_known) {
    set_output(ctx, 0, data.dtype, unknown_shape(rank));
    return ok_status();
  }
  if (!starts || !ends || (ctx.has_input(4) && !steps)) {
    // Which axes are sliced is known; their extents are not.
    SymShape out = in;
    if (axes) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> norm, normalize_axes(ctx, *axes, rank));
      for (int64_t a : norm) out[size_t(a)] = Dim();
    } else {
      out = unknown_shape(rank);
    }
    set_output(ctx, 0, data.dtype, std::move(out));
    return ok_status();
  }
  size_t n = starts->size();
  if (ends->size() != n || (axes && axes->size() != n) || (steps && steps->size() != n))
    return ctx.error("starts, ends, axes and steps must have the same length");
  if (!axes) {
    if (int64_t(n) > rank) return ctx.error("{} starts for a rank-{} input", n, rank);
    axes.emplace();
    for (size_t i = 0; i < n; ++i) axes->push_back(int64_t(i));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> norm, normalize_axes(ctx, *axes, rank));
  SymShape out = in;
  for (size_t i = 0; i < n; ++i) {
    int64_t step = steps ? (*steps)[i] : 1;
    if (step == 0) return ctx.error("steps must not be 0");
    const Dim& d = in[size_t(norm[i])];
    // x[:, 0:INT64_MAX] keeps a symbolic dim whatever its size.
    bool whole = step == 1 && (*starts)[i] == 0 && (*ends)[i] >= kMaxTensorElements;
    if (d.known())
      out[size_t(norm[i])] = Dim(slice_range(d.value, (*starts)[i], (*ends)[i], step).count);
    else if (!whole)
      out[size_t(norm[i])] = Dim();
  }
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

Status infer_Gather(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_index_dtype(ctx, 1));
  const TypeInfo& data = ctx.input(0);
  const auto& indices = ctx.input(1).shape;
  if (!data.shape || !indices) return unknown_rank_output(ctx, data.dtype);
  const SymShape& in = *data.shape;
  if (in.empty()) return ctx.error("data must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx, ctx.attrs().get_int("axis", 0),
                                                     int64_t(in.size())));
  SymShape out(in.begin(), in.begin() + axis);
  out.insert(out.end(), indices->begin(), indices->end());
  out.insert(out.end(), in.begin() + axis + 1, in.end());
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

Status infer_GatherElements(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_index_dtype(ctx, 1));
  const TypeInfo& data = ctx.input(0);
  const auto& indices = ctx.input(1).shape;
  if (data.shape && indices) {
    const SymShape& in = *data.shape;
    if (in.empty()) return ctx.error("data must have rank >= 1");
    if (indices->size() != in.size())
      return ctx.error("indices have rank {}, data has rank {}", indices->size(), in.size());
    KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx, ctx.attrs().get_int("axis", 0),
                                                       int64_t(in.size())));
    for (size_t d = 0; d < in.size(); ++d)
      if (int64_t(d) != axis && in[d].known() && (*indices)[d].known() &&
          (*indices)[d].value > in[d].value)
        return ctx.error("indices shape {} exceeds data shape {} off the axis",
                         sym_shape_to_string(*indices), sym_shape_to_string(in));
  }
  set_output(ctx, 0, data.dtype, indices);
  return ok_status();
}

Status infer_Expand(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> length, int_list_length(ctx, 1));
  std::optional<std::vector<int64_t>> target = input_ints(ctx, 1);
  if (!target) {
    if (!data.shape || !length) return unknown_rank_output(ctx, data.dtype);
    // A known input dim other than 1 survives any valid target value.
    const SymShape& in = *data.shape;
    SymShape out = unknown_shape(std::max<int64_t>(*length, int64_t(in.size())));
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].known() && in[i].value != 1) out[out.size() - in.size() + i] = in[i];
    set_output(ctx, 0, data.dtype, std::move(out));
    return ok_status();
  }
  SymShape want;
  for (int64_t v : *target) {
    if (v < 0) return ctx.error("shape value {} is negative", v);
    want.push_back(Dim(v));
  }
  if (!data.shape) return unknown_rank_output(ctx, data.dtype);
  auto out = broadcast_shapes(*data.shape, want);
  if (!out.ok()) return out.status().with_context(node_label(ctx.node()));
  KILN_RETURN_IF_ERROR(check_numel(ctx, *out));
  set_output(ctx, 0, data.dtype, std::move(out).value());
  return ok_status();
}

Status infer_Tile(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> length, int_list_length(ctx, 1));
  if (!data.shape) return unknown_rank_output(ctx, data.dtype);
  const SymShape& in = *data.shape;
  if (length && *length != int64_t(in.size()))
    return ctx.error("repeats has {} entries for a rank-{} input", *length, in.size());
  std::optional<std::vector<int64_t>> repeats = input_ints(ctx, 1);
  if (!repeats) {
    set_output(ctx, 0, data.dtype, unknown_shape(int64_t(in.size())));
    return ok_status();
  }
  SymShape out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t r = (*repeats)[i];
    if (r < 0) return ctx.error("repeats value {} is negative", r);
    if (in[i].known()) {
      KILN_ASSIGN_OR_RETURN(int64_t d, checked_mul(ctx, in[i].value, r));
      out[i] = Dim(d);
    } else {
      out[i] = r == 1 ? in[i] : r == 0 ? Dim(0) : Dim();
    }
  }
  KILN_RETURN_IF_ERROR(check_numel(ctx, out));
  set_output(ctx, 0, data.dtype, std::move(out));
  return ok_status();
}

}  // namespace kiln
