#include "kernels/spatial_params.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kiln {

namespace {

// An attribute's string without copying it (get_string would allocate).
std::string_view attr_string(const Attributes& attrs, std::string_view name,
                             std::string_view dflt) {
  const AttributeValue* v = attrs.find(name);
  const std::string* s = v ? std::get_if<std::string>(v) : nullptr;
  return s ? std::string_view(*s) : dflt;
}

// A string attribute's enum value; the first table entry is the default.
template <typename E, size_t N>
Result<E> attr_enum(const KernelContext& ctx, std::string_view name,
                    const std::pair<std::string_view, E> (&table)[N]) {
  const std::string_view value = attr_string(ctx.attrs(), name, table[0].first);
  for (const auto& [text, e] : table)
    if (text == value) return e;
  return ctx.unsupported_error("{} '{}'", name, value);
}

constexpr std::pair<std::string_view, PadMode> kPadModes[] = {
    {"constant", PadMode::kConstant},
    {"reflect", PadMode::kReflect},
    {"edge", PadMode::kEdge},
    {"wrap", PadMode::kWrap},
};
constexpr std::pair<std::string_view, bool> kResizeModes[] = {{"nearest", false}, {"linear", true}};
constexpr std::pair<std::string_view, ResizeCoord> kResizeCoords[] = {
    {"half_pixel", ResizeCoord::kHalfPixel},
    {"half_pixel_symmetric", ResizeCoord::kHalfPixelSymmetric},
    {"pytorch_half_pixel", ResizeCoord::kPytorchHalfPixel},
    {"align_corners", ResizeCoord::kAlignCorners},
    {"asymmetric", ResizeCoord::kAsymmetric},
    {"tf_half_pixel_for_nn", ResizeCoord::kTfHalfPixelForNn},
    {"tf_crop_and_resize", ResizeCoord::kTfCropAndResize},
};
constexpr std::pair<std::string_view, ResizeNearest> kResizeNearests[] = {
    {"round_prefer_floor", ResizeNearest::kRoundPreferFloor},
    {"round_prefer_ceil", ResizeNearest::kRoundPreferCeil},
    {"floor", ResizeNearest::kFloor},
    {"ceil", ResizeNearest::kCeil},
};
enum class AspectPolicy { kStretch, kNotLarger, kNotSmaller };
constexpr std::pair<std::string_view, AspectPolicy> kPolicies[] = {
    {"stretch", AspectPolicy::kStretch},
    {"not_larger", AspectPolicy::kNotLarger},
    {"not_smaller", AspectPolicy::kNotSmaller},
};

// Element i of an integer view (i64 or i32).
int64_t view_element_as_int(const TensorView& v, int64_t i) {
  return v.dtype == DType::kI32 ? v.as<int32_t>()[i] : v.as<int64_t>()[i];
}

// The axes attribute/input normalized into `axis_of` (all axes when absent).
Result<int> decode_axes(const KernelContext& ctx, const int64_t* axes, int64_t count, int rank,
                        std::array<int, kSpatialMaxRank>& axis_of) {
  if (!axes) {
    for (int a = 0; a < rank; ++a) axis_of[size_t(a)] = a;
    return rank;
  }
  if (count > rank) return ctx.unsupported_error("{} axes for rank {}", count, rank);
  std::array<bool, kSpatialMaxRank> seen{};
  for (int64_t i = 0; i < count; ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank || seen[size_t(a)])
      return invalid_argument("{}: bad or repeated axis {}", node_label(*ctx.node), axes[i]);
    seen[size_t(a)] = true;
    axis_of[size_t(i)] = int(a);
  }
  return int(count);
}

}  // namespace

double view_element_as_double(const TensorView& v, int64_t i) {
  return dtype_visit(v.dtype, [&](auto tag) -> double {
    using T = decltype(tag);
    const T& e = v.as<T>()[i];
    if constexpr (std::is_same_v<T, f16>)
      return f16_to_f32(e);
    else if constexpr (std::is_same_v<T, bf16>)
      return bf16_to_f32(e);
    else
      return double(e);
  });
}

uint64_t value_bits_as(DType dtype, double v) {
  uint64_t bits = 0;
  dtype_visit(dtype, [&](auto tag) {
    using T = decltype(tag);
    T t;
    if constexpr (std::is_same_v<T, f16>)
      t = f32_to_f16(float(v));
    else if constexpr (std::is_same_v<T, bf16>)
      t = f32_to_bf16(float(v));
    else if constexpr (std::is_same_v<T, bool>)
      t = v != 0;
    else if constexpr (std::is_integral_v<T>) {
      const double whole = std::trunc(v);  // NaN fails both tests below
      const bool fits = whole >= double(std::numeric_limits<T>::min()) &&
                        whole < std::ldexp(1.0, std::numeric_limits<T>::digits);
      t = fits ? T(whole) : T(0);
    } else
      t = T(v);
    std::memcpy(&bits, &t, sizeof(T));
  });
  return bits;
}

Result<PadParams> pad_params_decode(const KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const int rank = int(x.rank());
  if (rank > kSpatialMaxRank)
    return ctx.unsupported_error("rank {} is above {}", rank, kSpatialMaxRank);
  PadParams p;
  KILN_ASSIGN_OR_RETURN(p.mode, attr_enum(ctx, "mode", kPadModes));

  std::array<int64_t, kSpatialMaxRank> axes_values{};
  const TensorView* axes = ctx.input(3);
  if (axes && axes->numel() > kSpatialMaxRank) return ctx.unsupported_error("too many axes");
  for (int64_t i = 0; axes && i < axes->numel(); ++i)
    axes_values[size_t(i)] = view_element_as_int(*axes, i);
  std::array<int, kSpatialMaxRank> axis_of{};
  KILN_ASSIGN_OR_RETURN(int naxes, decode_axes(ctx, axes ? axes_values.data() : nullptr,
                                               axes ? axes->numel() : 0, rank, axis_of));
  const TensorView& pads = *ctx.input(1);
  if (pads.numel() != 2 * naxes)
    return invalid_argument("{}: pads has {} values for {} axes", node_label(*ctx.node),
                            pads.numel(), naxes);
  for (int i = 0; i < naxes; ++i) {
    p.begin[size_t(axis_of[size_t(i)])] = view_element_as_int(pads, i);
    p.end[size_t(axis_of[size_t(i)])] = view_element_as_int(pads, naxes + i);
  }
  const TensorView* value = ctx.input(2);
  if (value && value->numel() > 0) {
    if (value->dtype == x.dtype)
      std::memcpy(&p.fill_bits, value->data, dtype_size(x.dtype));
    else
      p.fill_bits = value_bits_as(x.dtype, view_element_as_double(*value, 0));
  }
  return p;
}

int64_t pad_source_index(PadMode mode, int64_t o, int64_t begin, int64_t in_len, int64_t end) {
  const int64_t crop = std::max<int64_t>(-begin, 0);
  const int64_t len = in_len - crop - std::max<int64_t>(-end, 0);
  const int64_t rel = o - std::max<int64_t>(begin, 0);
  if (rel >= 0 && rel < len) return crop + rel;
  if (len <= 0) return -1;  // only constant mode can pad an empty span (infer checks)
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return crop + std::clamp<int64_t>(rel, 0, len - 1);
    case PadMode::kWrap: return crop + ((rel % len) + len) % len;
    case PadMode::kReflect: {
      if (len == 1) return crop;
      const int64_t period = 2 * (len - 1);
      const int64_t r = ((rel % period) + period) % period;
      return crop + (r < len ? r : period - r);
    }
  }
  return -1;
}

Result<ResizeParams> resize_params_decode(const KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const int rank = int(x.rank());
  if (rank > kSpatialMaxRank)
    return ctx.unsupported_error("rank {} is above {}", rank, kSpatialMaxRank);
  ResizeParams p;
  const Attributes& attrs = ctx.attrs();
  KILN_ASSIGN_OR_RETURN(p.linear, attr_enum(ctx, "mode", kResizeModes));
  if (attrs.get_int("antialias", 0) != 0) return ctx.unsupported_error("antialias");
  KILN_ASSIGN_OR_RETURN(p.coord, attr_enum(ctx, "coordinate_transformation_mode", kResizeCoords));
  KILN_ASSIGN_OR_RETURN(p.nearest, attr_enum(ctx, "nearest_mode", kResizeNearests));
  p.extrapolation = attrs.get_float("extrapolation_value", 0.0f);
  p.extrapolation_bits = value_bits_as(x.dtype, p.extrapolation);

  const std::vector<int64_t>* axes = attrs.get_ints("axes");
  std::array<int, kSpatialMaxRank> axis_of{};
  KILN_ASSIGN_OR_RETURN(int naxes, decode_axes(ctx, axes ? axes->data() : nullptr,
                                               axes ? int64_t(axes->size()) : 0, rank, axis_of));
  for (int a = 0; a < rank; ++a) {
    p.scale[size_t(a)] = 1;
    p.roi_start[size_t(a)] = 0;
    p.roi_end[size_t(a)] = 1;
  }
  const TensorView* scales = ctx.input(2);
  const TensorView* sizes = ctx.input(3);
  const bool by_scales = scales && scales->numel() > 0;
  const TensorView* given = by_scales ? scales : sizes;
  if (!given || given->numel() != naxes)
    return invalid_argument("{}: needs {} scales or sizes", node_label(*ctx.node), naxes);
  KILN_ASSIGN_OR_RETURN(AspectPolicy policy, attr_enum(ctx, "keep_aspect_ratio_policy", kPolicies));
  double common = policy == AspectPolicy::kNotLarger ? INFINITY : 0;
  for (int i = 0; i < naxes; ++i) {
    const size_t a = size_t(axis_of[size_t(i)]);
    p.resized[a] = true;
    // Scales are float in the model; the spec's arithmetic is then in double.
    p.scale[a] = by_scales ? double(float(view_element_as_double(*scales, i)))
                           : double(view_element_as_int(*sizes, i)) / double(x.shape[a]);
    common = policy == AspectPolicy::kNotLarger ? std::min(common, p.scale[a])
                                                : std::max(common, p.scale[a]);
  }
  // Sizes under an aspect policy: one scale for all resized axes.
  if (!by_scales && policy != AspectPolicy::kStretch)
    for (int i = 0; i < naxes; ++i) p.scale[size_t(axis_of[size_t(i)])] = common;

  const TensorView* roi = ctx.input(1);
  if (p.coord == ResizeCoord::kTfCropAndResize) {
    if (!roi || roi->numel() != 2 * naxes)
      return invalid_argument("{}: tf_crop_and_resize needs {} roi values", node_label(*ctx.node),
                              2 * naxes);
    for (int i = 0; i < naxes; ++i) {
      p.roi_start[size_t(axis_of[size_t(i)])] = view_element_as_double(*roi, i);
      p.roi_end[size_t(axis_of[size_t(i)])] = view_element_as_double(*roi, naxes + i);
    }
  }
  for (int a = 0; a < rank; ++a)
    if (p.resized[size_t(a)] && !(p.scale[size_t(a)] > 0 && std::isfinite(p.scale[size_t(a)])))
      return invalid_argument("{}: scale {} on axis {}", node_label(*ctx.node), p.scale[size_t(a)],
                              a);
  return p;
}

std::optional<double> resize_source_coord(const ResizeParams& p, int axis, int64_t o,
                                          int64_t in_len, int64_t out_len) {
  const size_t a = size_t(axis);
  if (!p.resized[a]) return double(o);
  const double s = p.scale[a], in = double(in_len), x = double(o);
  const double out_width = s * in;  // the spec's length_resized, before flooring
  double src = 0;
  switch (p.coord) {
    case ResizeCoord::kHalfPixel: src = (x + 0.5) / s - 0.5; break;
    case ResizeCoord::kHalfPixelSymmetric: {
      const double offset = in / 2 * (1 - double(out_len) / out_width);
      src = offset + (x + 0.5) / s - 0.5;
      break;
    }
    case ResizeCoord::kPytorchHalfPixel: src = out_width == 1 ? -0.5 : (x + 0.5) / s - 0.5; break;
    case ResizeCoord::kAlignCorners:
      src = out_width == 1 ? 0 : x * (in - 1) / (out_width - 1);
      break;
    case ResizeCoord::kAsymmetric: src = x / s; break;
    case ResizeCoord::kTfHalfPixelForNn: src = (x + 0.5) / s; break;
    case ResizeCoord::kTfCropAndResize: {
      const double start = p.roi_start[a], span = p.roi_end[a] - start;
      src = out_width == 1 ? span * (in - 1) / 2 : x * span * (in - 1) / (out_width - 1);
      src += start * (in - 1);
      if (!(src >= 0 && src <= in - 1)) return std::nullopt;
      break;
    }
  }
  // Past one step outside, every mode reads the edge element anyway; clamping
  // keeps later integer conversions in range.
  return std::isnan(src) ? 0.0 : std::clamp(src, -1.0, in);
}

int64_t resize_nearest_index(ResizeNearest mode, double x, int64_t in_len) {
  const double fl = std::floor(x);
  const double ratio = x - fl;
  int64_t i = int64_t(fl);
  if (ratio != 0) {
    switch (mode) {
      case ResizeNearest::kRoundPreferFloor: i += ratio > 0.5; break;
      case ResizeNearest::kRoundPreferCeil: i += ratio >= 0.5; break;
      case ResizeNearest::kFloor: break;
      case ResizeNearest::kCeil: i += 1; break;
    }
  }
  return std::clamp<int64_t>(i, 0, in_len - 1);
}

}  // namespace kiln
