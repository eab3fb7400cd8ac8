#include "models/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kiln {

Status WeightSet::add(std::string name, Tensor tensor, std::string origin) {
  auto [it, fresh] = entries_.try_emplace(std::move(name), Entry{std::move(tensor), origin});
  if (!fresh)
    return invalid_argument("{} and {} are both {} '{}'", it->second.origin, origin, label_.empty() ? "weight" : label_,
                            it->first);
  return ok_status();
}

Status WeightSet::replace(std::string_view name, Tensor tensor, std::string_view note) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return not_found("{}: no weight '{}' to replace", label_, name);
  if (it->second.tensor.shape() != tensor.shape())
    return invalid_argument("{}: '{}' is {}, its replacement {}", label_, name, shape_to_string(it->second.tensor.shape()),
                            shape_to_string(tensor.shape()));
  it->second.tensor = std::move(tensor);
  it->second.origin += fmt::format(" {}", note);
  return ok_status();
}

const Tensor* WeightSet::find(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  used_.emplace(it->first);
  return &it->second.tensor;
}

std::string WeightSet::origin(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? std::string(name) : it->second.origin;
}

std::vector<std::string> WeightSet::names_with_prefix(std::string_view prefix) const {
  std::vector<std::string> names;
  for (auto it = entries_.lower_bound(prefix); it != entries_.end() && it->first.starts_with(prefix); ++it)
    names.push_back(it->first);
  return names;
}

int64_t WeightSet::indexed_count(std::string_view prefix) const {
  int64_t count = 0;
  for (auto it = entries_.lower_bound(prefix); it != entries_.end() && it->first.starts_with(prefix); ++it) {
    int64_t index = 0;
    size_t i = prefix.size(), digits = 0;
    for (; i < it->first.size() && std::isdigit(static_cast<unsigned char>(it->first[i])) && digits < 6; ++i, ++digits)
      index = index * 10 + (it->first[i] - '0');
    if (digits && i < it->first.size() && it->first[i] == '.') count = std::max(count, index + 1);
  }
  return count;
}

std::optional<Shape> WeightSet::shape_of(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return std::nullopt;
  return it->second.tensor.shape();
}

Result<Shape> WeightSet::checked_shape(std::string_view name, size_t rank) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return not_found("{}: the weight '{}' is missing", label_, name);
  const Shape& shape = it->second.tensor.shape();
  if (shape.size() != rank)
    return invalid_argument("{}: '{}' has shape {}, expected rank {}", label_, it->second.origin,
                            shape_to_string(shape), rank);
  for (int64_t d : shape)
    if (d < 1 || d > kMaxWidth)
      return invalid_argument("{}: '{}' has shape {}: sizes must be 1 to {}", label_, it->second.origin,
                              shape_to_string(shape), kMaxWidth);
  return shape;
}

std::vector<std::string> WeightSet::unused() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_)
    if (!used_.count(name)) names.push_back(name);
  return names;
}

int64_t WeightSet::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, entry] : entries_) n += entry.tensor.numel();
  return n;
}

std::map<DType, int64_t> WeightSet::dtype_counts() const {
  std::map<DType, int64_t> counts;
  for (const auto& [name, entry] : entries_) ++counts[entry.tensor.dtype()];
  return counts;
}

}  // namespace kiln
