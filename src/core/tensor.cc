#include "core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

size_t physical_memory_bytes() {
  static const size_t bytes = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  return bytes;
}

Result<int64_t> shape_numel_checked(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("negative dimension in shape {}", shape_to_string(shape));
    if (d != 0 && n > kMaxTensorElements / d)
      return resource_exhausted("shape {} has more than 2^40 elements",
                                shape_to_string(shape));
    n *= d;
  }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

Shape shape_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

namespace {

// A tensor of at least this many bytes gets pages of its own (an anonymous
// mapping, zero-filled by the kernel), which go back to the system when it
// is freed. From malloc, a large block freed amid others stays resident,
// and a plan frees each constant weight once it has packed it (measured:
// docs/performance.md#memory).
constexpr size_t kMappedBytes = size_t(1) << 20;

// `bytes` (a multiple of 64) zero-filled and 64-byte aligned, and its owner; null when none is left.
std::shared_ptr<const void> zeroed_block(size_t bytes) {
  if (bytes >= kMappedBytes) {
    // Populated up front: such a tensor is written whole at once (a
    // constant's bytes copied in, an output), and one call faults in its
    // pages for less than a fault per page does (a VM's faults are dear).
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    return std::shared_ptr<const void>(p, [bytes](const void* q) { munmap(const_cast<void*>(q), bytes); });
  }
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, bytes);
  return std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
}

}  // namespace

Result<Tensor> Tensor::copy_of(const TensorView& view) {
  KILN_ASSIGN_OR_RETURN(Tensor t, empty(view.dtype, view.shape));
  if (view.nbytes()) std::memcpy(t.raw(), view.data, view.nbytes());
  return t;
}

Result<Tensor> Tensor::empty(DType dtype, Shape shape) {
  KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel_checked(shape));
  size_t bytes = size_t(n) * dtype_size(dtype);
  if (bytes > physical_memory_bytes())
    return resource_exhausted("a tensor of shape {} needs {} bytes, more than this machine has",
                              shape_to_string(shape), bytes);
  std::shared_ptr<const void> owner = zeroed_block(bytes == 0 ? 64 : (bytes + 63) / 64 * 64);
  if (owner == nullptr)
    return resource_exhausted("cannot allocate {} bytes for a tensor of shape {}", bytes,
                              shape_to_string(shape));
  void* p = const_cast<void*>(owner.get());
  return Tensor(dtype, std::move(shape), p, std::move(owner));
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.view_.shape = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  Tensor t = *this;
  const int64_t row = rank() ? numel() / std::max<int64_t>(shape()[0], 1) : 1;
  t.view_.shape[0] = count;
  t.view_.data = static_cast<char*>(view_.data) + size_t(begin * row) * dtype_size(dtype());
  return t;
}

double Tensor::element_as_double(int64_t i) const {
  return dtype_visit(dtype(), [&](auto tag) -> double {
    using T = decltype(tag);
    T v = data<T>()[i];
    if constexpr (std::is_same_v<T, f16>) return f16_to_f32(v);
    else if constexpr (std::is_same_v<T, bf16>) return bf16_to_f32(v);
    else return static_cast<double>(v);
  });
}

int64_t Tensor::element_as_int(int64_t i) const {
  return dtype_visit(dtype(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    T v = data<T>()[i];
    if constexpr (std::is_same_v<T, f16>) return int64_t(f16_to_f32(v));
    else if constexpr (std::is_same_v<T, bf16>) return int64_t(bf16_to_f32(v));
    else return static_cast<int64_t>(v);
  });
}

}  // namespace kiln
