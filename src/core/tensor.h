// Tensors: a dtype, a shape and a pointer to dense row-major elements.
//
// TensorView borrows memory (kernels see only views). Tensor also keeps its
// memory alive: an aligned heap buffer, a slice of a memory-mapped file, or a
// caching-allocator block (see runtime/caching_allocator.h).
//
//   KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::kF32, {2, 3}));
//   float* p = t.data<float>();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln {

using Shape = std::vector<int64_t>;

// Largest element count one tensor may have; keeps hostile shapes from
// becoming huge allocations or overflowing size arithmetic.
inline constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

// Bytes of physical memory: the largest single allocation kiln will attempt.
size_t physical_memory_bytes();

// Product of dims; an error when a dim is negative or the product passes
// kMaxTensorElements (so no later multiplication can overflow).
Result<int64_t> shape_numel_checked(const Shape& shape);
inline int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
std::string shape_to_string(const Shape& shape);  // "[2,3,4]"
// Row-major strides in elements.
Shape shape_strides(const Shape& shape);

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  void* data = nullptr;

  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t rank() const { return int64_t(shape.size()); }
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

class Tensor {
 public:
  Tensor() = default;
  // A tensor over memory owned by `owner` (kept alive as long as the tensor).
  Tensor(DType dtype, Shape shape, void* data, std::shared_ptr<const void> owner)
      : view_{dtype, std::move(shape), data}, owner_(std::move(owner)) {}

  // Fresh 64-byte aligned memory, zero-filled. Fails on hostile sizes.
  static Result<Tensor> empty(DType dtype, Shape shape);
  // A fresh copy of `view`'s elements.
  static Result<Tensor> copy_of(const TensorView& view);
  template <typename T>
  static Result<Tensor> from_vector(Shape shape, const std::vector<T>& values);

  DType dtype() const { return view_.dtype; }
  const Shape& shape() const { return view_.shape; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  int64_t rank() const { return view_.rank(); }
  void* raw() const { return view_.data; }
  template <typename T> T* data() const { return static_cast<T*>(view_.data); }
  const TensorView& view() const { return view_; }
  TensorView& mutable_view() { return view_; }
  bool defined() const { return owner_ != nullptr || view_.data != nullptr || numel() == 0; }

  // Same memory, new shape (same element count).
  Tensor reshaped(Shape shape) const;
  // Rows [begin, begin + count) of the first axis: a view of the same memory.
  Tensor rows(int64_t begin, int64_t count) const;
  // Element i converted to double / int64 (for shape-carrying tensors).
  double element_as_double(int64_t i) const;
  int64_t element_as_int(int64_t i) const;

 private:
  TensorView view_;
  std::shared_ptr<const void> owner_;
};

template <typename T>
Result<Tensor> Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  KILN_ASSIGN_OR_RETURN(Tensor t, empty(dtype_of<T>(), std::move(shape)));
  if (size_t(t.numel()) != values.size())
    return internal_error("from_vector: {} values for shape {}", values.size(),
                          shape_to_string(t.shape()));
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}

}  // namespace kiln
