#include "ir/attribute.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

void Attributes::set(std::string name, AttributeValue value) {
  for (auto& [n, v] : items_)
    if (n == name) {
      v = std::move(value);
      return;
    }
  items_.emplace_back(std::move(name), std::move(value));
}

const AttributeValue* Attributes::find(std::string_view name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return &v;
  return nullptr;
}

int64_t Attributes::get_int(std::string_view name, int64_t dflt) const {
  const AttributeValue* v = find(name);
  return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : dflt;
}
float Attributes::get_float(std::string_view name, float dflt) const {
  const AttributeValue* v = find(name);
  return v && std::holds_alternative<float>(*v) ? std::get<float>(*v) : dflt;
}
std::string Attributes::get_string(std::string_view name, std::string dflt) const {
  const AttributeValue* v = find(name);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : dflt;
}
const std::vector<int64_t>* Attributes::get_ints(std::string_view name) const {
  const AttributeValue* v = find(name);
  return v ? std::get_if<std::vector<int64_t>>(v) : nullptr;
}
const std::vector<float>* Attributes::get_floats(std::string_view name) const {
  const AttributeValue* v = find(name);
  return v ? std::get_if<std::vector<float>>(v) : nullptr;
}
const Tensor* Attributes::get_tensor(std::string_view name) const {
  const AttributeValue* v = find(name);
  return v ? std::get_if<Tensor>(v) : nullptr;
}

std::string attribute_to_string(const AttributeValue& value) {
  struct Printer {
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(float f) const { return fmt::format("{}", f); }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<float>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<std::string>& v) const {
      return fmt::format("[\"{}\"]", fmt::join(v, "\",\""));
    }
    std::string operator()(const Tensor& t) const {
      return fmt::format("tensor<{}{}>", dtype_name(t.dtype()), shape_to_string(t.shape()));
    }
  };
  return std::visit(Printer{}, value);
}

}  // namespace kiln
