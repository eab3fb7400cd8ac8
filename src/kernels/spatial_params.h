// Pad and Resize parameters decoded from a node's attributes and inputs, and
// the index arithmetic both the reference and the CPU kernels follow. Decoding
// never allocates, so CPU kernels may call it.
//
//   KILN_ASSIGN_OR_RETURN(PadParams p, pad_params_decode(ctx));
//   int64_t src = pad_source_index(p.mode, o, p.begin[a], x.shape[a], p.end[a]);
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "kernels/kernel.h"

namespace kiln {

// Pad and Resize kernels handle ranks up to this (fixed arrays, no heap).
inline constexpr int kSpatialMaxRank = 8;

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

struct PadParams {
  PadMode mode = PadMode::kConstant;
  std::array<int64_t, kSpatialMaxRank> begin{}, end{};  // negative: crop
  uint64_t fill_bits = 0;  // constant_value converted to the data dtype, raw bytes
};

Result<PadParams> pad_params_decode(const KernelContext& ctx);

// The input index feeding output index `o` along one axis, or -1 for the
// constant. Negative pads crop first; edge/reflect/wrap read the cropped span.
int64_t pad_source_index(PadMode mode, int64_t o, int64_t begin, int64_t in_len, int64_t end);

enum class ResizeCoord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize,
};
enum class ResizeNearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

struct ResizeParams {
  bool linear = false;  // else nearest
  ResizeCoord coord = ResizeCoord::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  double extrapolation = 0;
  uint64_t extrapolation_bits = 0;  // extrapolation converted to the data dtype, raw bytes
  // Per axis; an axis not listed in `axes` is not resampled at all.
  std::array<bool, kSpatialMaxRank> resized{};
  std::array<double, kSpatialMaxRank> scale{}, roi_start{}, roi_end{};
};

// For a non-empty output only: an axis resized to 0 would have scale 0.
Result<ResizeParams> resize_params_decode(const KernelContext& ctx);

// Where output index `o` of `axis` samples the input (the spec's
// x_original), clamped to [-1, in_len]; nullopt when tf_crop_and_resize
// lands outside the input (the output is then the extrapolation value).
std::optional<double> resize_source_coord(const ResizeParams& p, int axis, int64_t o,
                                          int64_t in_len, int64_t out_len);

// The input index nearest mode picks for source coordinate x, in [0, in_len).
int64_t resize_nearest_index(ResizeNearest mode, double x, int64_t in_len);

// Element i of a numeric view as double (for small parameter tensors).
double view_element_as_double(const TensorView& v, int64_t i);

// The bytes of `v` converted to `dtype` (non-finite to 0 for integer types).
uint64_t value_bits_as(DType dtype, double v);

}  // namespace kiln
