// Node attributes, as typed values keyed by name.
//
//   int64_t axis = node.attrs.get_int("axis", -1);
//   const std::vector<int64_t>* perm = node.attrs.get_ints("perm");  // null if absent
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace kiln {

using AttributeValue = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                                    std::vector<float>, std::vector<std::string>, Tensor>;

class Attributes {
 public:
  Attributes() = default;
  // Attributes{{"axis", int64_t(1)}, {"perm", std::vector<int64_t>{0, 2, 1}}}
  Attributes(std::initializer_list<std::pair<std::string, AttributeValue>> items) : items_(items) {}

  void set(std::string name, AttributeValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const AttributeValue* find(std::string_view name) const;

  // Typed getters: the default when the attribute is absent. The importer
  // checks kinds, so a present attribute of another kind is also "absent".
  int64_t get_int(std::string_view name, int64_t dflt) const;
  float get_float(std::string_view name, float dflt) const;
  std::string get_string(std::string_view name, std::string dflt) const;
  const std::vector<int64_t>* get_ints(std::string_view name) const;
  const std::vector<float>* get_floats(std::string_view name) const;
  const Tensor* get_tensor(std::string_view name) const;

  const std::vector<std::pair<std::string, AttributeValue>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, AttributeValue>> items_;  // few per node: linear search
};

std::string attribute_to_string(const AttributeValue& value);

}  // namespace kiln
