// Shape inference for the spatial ops (see ir/shape_inference.h).
#include <algorithm>
#include <cmath>

#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

// Element count of input i when its shape is known; 0 for an omitted input.
std::optional<int64_t> input_numel(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return 0;
  if (!ctx.input(i).shape) return std::nullopt;
  return sym_numel(*ctx.input(i).shape);
}

// `axes` normalized to [0, rank); every axis in order when `axes` is null.
Result<std::vector<int64_t>> normalize_axes(const InferContext& ctx,
                                            const std::vector<int64_t>* axes, int64_t rank) {
  std::vector<int64_t> out;
  if (!axes) {
    for (int64_t a = 0; a < rank; ++a) out.push_back(a);
    return out;
  }
  for (int64_t axis : *axes) {
    KILN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(ctx, axis, rank));
    if (std::find(out.begin(), out.end(), a) != out.end())
      return ctx.error("axis {} is repeated", axis);
    out.push_back(a);
  }
  return out;
}

Status check_numel(const InferContext& ctx, const SymShape& shape) {
  if (auto concrete = sym_shape_concrete(shape)) {
    auto n = shape_numel_checked(*concrete);
    if (!n.ok()) return n.status().with_context(node_label(ctx.node()));
  }
  return ok_status();
}

}  // namespace

Status infer_Pad(InferContext& ctx) {
  if (ctx.attrs().has("pads"))
    return ctx.unsupported_error("the pads attribute (opset < 11) is not supported");
  const std::string mode = ctx.attrs().get_string("mode", "constant");
  if (!is_one_of(mode, {"constant", "reflect", "edge", "wrap"}))
    return ctx.error("unknown mode '{}'", mode);
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 1, {DType::kI64, DType::kI32}));
  if (ctx.has_input(3)) KILN_RETURN_IF_ERROR(require_dtype(ctx, 3, {DType::kI64, DType::kI32}));
  if (auto n = input_numel(ctx, 2); n && *n > 1)
    return ctx.error("constant_value must be a scalar, got {} elements", *n);

  const DType dtype = ctx.input(0).dtype;
  if (!ctx.input(0).shape) {
    set_output(ctx, 0, dtype, std::nullopt);
    return ok_status();
  }
  const SymShape& in = *ctx.input(0).shape;
  const int64_t rank = int64_t(in.size());
  std::optional<std::vector<int64_t>> axes_values;
  if (ctx.has_input(3)) {
    axes_values = input_ints(ctx, 3);
    if (!axes_values) {
      set_output(ctx, 0, dtype, unknown_shape(rank));
      return ok_status();
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                        normalize_axes(ctx, axes_values ? &*axes_values : nullptr, rank));
  const size_t naxes = axes.size();
  if (auto n = input_numel(ctx, 1); n && *n != int64_t(2 * naxes))
    return ctx.error("pads has {} values; {} axes need {}", *n, naxes, 2 * naxes);
  auto pads = input_ints(ctx, 1);
  if (!pads) {
    set_output(ctx, 0, dtype, unknown_shape(rank));
    return ok_status();
  }

  SymShape out = in;
  for (size_t i = 0; i < naxes; ++i) {
    const size_t a = size_t(axes[i]);
    const int64_t begin = (*pads)[i], end = (*pads)[naxes + i];
    if (begin < -kMaxTensorElements || begin > kMaxTensorElements || end < -kMaxTensorElements ||
        end > kMaxTensorElements)
      return ctx.error("pads {}, {} on axis {} are out of range", begin, end, a);
    if (begin == 0 && end == 0) continue;
    if (!in[a].known()) {
      out[a] = Dim();
      continue;
    }
    // Negative pads crop first; the other modes then read what is left.
    const int64_t kept = in[a].value - std::max<int64_t>(-begin, 0) - std::max<int64_t>(-end, 0);
    if (kept < 0)
      return ctx.error("pads {}, {} crop more than axis {} holds ({})", begin, end, a, in[a].value);
    if (mode != "constant" && kept == 0 && (begin > 0 || end > 0))
      return ctx.error("{} padding of axis {}, which has no elements", mode, a);
    if (mode == "reflect" && kept > 1 && (begin >= kept || end >= kept))
      return ctx.error("reflect pads {}, {} on axis {} must be smaller than its size {}", begin,
                       end, a, kept);
    out[a] = Dim(in[a].value + begin + end);
  }
  KILN_RETURN_IF_ERROR(check_numel(ctx, out));
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

Status infer_Resize(InferContext& ctx) {
  const Attributes& attrs = ctx.attrs();
  const std::string mode = attrs.get_string("mode", "nearest");
  if (mode == "cubic") return ctx.unsupported_error("cubic mode is not supported");
  if (!is_one_of(mode, {"nearest", "linear"})) return ctx.error("unknown mode '{}'", mode);
  const std::string coord = attrs.get_string("coordinate_transformation_mode", "half_pixel");
  if (!is_one_of(coord,
                 {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                  "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"}))
    return ctx.error("unknown coordinate_transformation_mode '{}'", coord);
  const std::string nearest = attrs.get_string("nearest_mode", "round_prefer_floor");
  if (!is_one_of(nearest, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}))
    return ctx.error("unknown nearest_mode '{}'", nearest);
  const std::string policy = attrs.get_string("keep_aspect_ratio_policy", "stretch");
  if (!is_one_of(policy, {"stretch", "not_larger", "not_smaller"}))
    return ctx.error("unknown keep_aspect_ratio_policy '{}'", policy);
  if (attrs.get_int("antialias", 0) != 0)
    return ctx.unsupported_error("antialias is not supported");

  const DType dtype = ctx.input(0).dtype;
  if (mode == "linear") KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, {DType::kF32}));
  const bool crop = coord == "tf_crop_and_resize";
  if (crop && !ctx.has_input(1)) return ctx.error("tf_crop_and_resize needs the roi input");
  if (crop) KILN_RETURN_IF_ERROR(require_dtype(ctx, 1, {DType::kF32, DType::kF64, DType::kF16}));
  if (ctx.has_input(2))
    KILN_RETURN_IF_ERROR(require_dtype(ctx, 2, {DType::kF32, DType::kF64, DType::kF16}));
  if (ctx.has_input(3)) KILN_RETURN_IF_ERROR(require_dtype(ctx, 3, {DType::kI64, DType::kI32}));

  if (!ctx.input(0).shape) {
    set_output(ctx, 0, dtype, std::nullopt);
    return ok_status();
  }
  const SymShape& in = *ctx.input(0).shape;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                        normalize_axes(ctx, attrs.get_ints("axes"), int64_t(in.size())));
  const int64_t naxes = int64_t(axes.size());
  if (auto n = input_numel(ctx, 1); crop && n && *n != 2 * naxes)
    return ctx.error("roi has {} values; {} axes need {}", *n, naxes, 2 * naxes);

  SymShape out = in;
  auto unknown_resized = [&] {
    for (int64_t a : axes) out[size_t(a)] = Dim();
    set_output(ctx, 0, dtype, out);
    return ok_status();
  };
  // Exactly one of scales and sizes is given; the other is omitted or empty.
  const auto nscales = input_numel(ctx, 2), nsizes = input_numel(ctx, 3);
  if (!nscales || !nsizes) return unknown_resized();
  if ((*nscales > 0) == (*nsizes > 0)) return ctx.error("needs exactly one of scales and sizes");
  const bool by_scales = *nscales > 0;
  if (int64_t n = by_scales ? *nscales : *nsizes; n != naxes)
    return ctx.error("{} has {} values for {} axes", by_scales ? "scales" : "sizes", n, naxes);

  if (by_scales) {
    auto scales = input_doubles(ctx, 2);
    if (!scales) return unknown_resized();
    for (int64_t i = 0; i < naxes; ++i) {
      const size_t a = size_t(axes[size_t(i)]);
      const double s = double(float((*scales)[size_t(i)]));  // float in the model
      if (!(s > 0) || !std::isfinite(s))
        return ctx.error("scale {} on axis {} must be positive", s, a);
      if (!in[a].known()) {
        out[a] = s == 1 ? in[a] : Dim();
        continue;
      }
      const double dim = std::floor(double(in[a].value) * s);
      if (dim > double(kMaxTensorElements))
        return ctx.error("scale {} makes axis {} too large", s, a);
      out[a] = Dim(int64_t(dim));
    }
  } else {
    auto sizes = input_ints(ctx, 3);
    if (!sizes) return unknown_resized();
    for (int64_t i = 0; i < naxes; ++i) {
      const size_t a = size_t(axes[size_t(i)]);
      const int64_t size = (*sizes)[size_t(i)];
      if (size < 0 || size > kMaxTensorElements)
        return ctx.error("size {} on axis {} is out of range", size, a);
      if (in[a].known() && in[a].value == 0 && size > 0)
        return ctx.error("axis {} is empty and cannot be resized to {}", a, size);
      out[a] = Dim(size);
    }
    if (policy != "stretch") {
      // One scale for every resized axis: the smallest or largest of the ratios.
      std::optional<double> common;
      for (int64_t i = 0; i < naxes; ++i) {
        const Dim& d = in[size_t(axes[size_t(i)])];
        if (!d.known()) return unknown_resized();
        if (d.value == 0) return ctx.error("keep_aspect_ratio_policy on an empty axis");
        const double r = double((*sizes)[size_t(i)]) / double(d.value);
        common = !common ? r : policy == "not_larger" ? std::min(*common, r) : std::max(*common, r);
      }
      for (int64_t a : axes) {
        const double dim = std::floor(*common * double(in[size_t(a)].value) + 0.5);
        if (dim > double(kMaxTensorElements)) return ctx.error("axis {} becomes too large", a);
        out[size_t(a)] = Dim(int64_t(dim));
      }
    }
  }
  KILN_RETURN_IF_ERROR(check_numel(ctx, out));
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

}  // namespace kiln
