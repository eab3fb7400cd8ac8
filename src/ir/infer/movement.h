// Index arithmetic the movement ops share between shape inference and the
// kernels, so that the shape inferred and the bytes copied agree.
#pragma once

#include <cstdint>

namespace kiln {

// One axis of a Slice after the ONNX rules: a negative start or end counts
// from the end, then both are clamped to [0, dim] stepping forward, or start
// to [0, dim-1] and end to [-1, dim-1] stepping backward. step must not be 0.
struct SliceRange {
  int64_t start = 0;  // first index taken
  int64_t count = 0;  // elements taken
};
SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step);

}  // namespace kiln
