#include "ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/shape_inference.h"

namespace kiln {

std::string dim_to_string(const Dim& d) {
  if (d.known()) return fmt::format("{}", d.value);
  return d.symbol.empty() ? "?" : d.symbol;
}

std::string sym_shape_to_string(const SymShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += dim_to_string(s[i]);
  }
  return out + "]";
}

SymShape sym_shape_from(const Shape& s) { return SymShape(s.begin(), s.end()); }

std::optional<Shape> sym_shape_concrete(const SymShape& s) {
  Shape out;
  out.reserve(s.size());
  for (const Dim& d : s) {
    if (!d.known()) return std::nullopt;
    out.push_back(d.value);
  }
  return out;
}

std::string node_label(const Node& n) {
  return fmt::format("node '{}' ({})", n.name, op_name(n.op));
}

Value* Graph::add_value(std::string name) {
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->id = values_.size() - 1;
  v->name = std::move(name);
  by_name_.emplace(v->name, v);  // duplicates are kept out of the map; verify reports them
  return v;
}

Value* Graph::add_input(std::string name, DType dtype, std::optional<SymShape> shape) {
  Value* v = add_value(std::move(name));
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->is_input = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(std::string name, Tensor tensor) {
  Value* v = add_value(std::move(name));
  v->dtype = tensor.dtype();
  v->shape = sym_shape_from(tensor.shape());
  v->constant = std::move(tensor);
  return v;
}

Node* Graph::add_node(OpKind op, std::string name, std::vector<Value*> inputs,
                      std::vector<Value*> outputs, Attributes attrs) {
  nodes_.push_back(std::make_unique<Node>());
  Node* n = nodes_.back().get();
  n->op = op;
  n->name = std::move(name);
  n->inputs = std::move(inputs);
  n->outputs = std::move(outputs);
  n->attrs = std::move(attrs);
  for (Value* in : n->inputs)
    if (in) in->users.push_back(n);
  for (Value* out : n->outputs)
    if (out && !out->producer) out->producer = n;
  return n;
}

void Graph::mark_output(Value* v) {
  v->is_output = true;
  outputs_.push_back(v);
}

Value* Graph::find_value(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

void Graph::rename_value(Value* v, std::string name) {
  if (auto it = by_name_.find(v->name); it != by_name_.end() && it->second == v) by_name_.erase(it);
  v->name = std::move(name);
  by_name_.emplace(v->name, v);
}

Status Graph::topo_sort() {
  // Kahn's algorithm, stable: among ready nodes, the earlier one goes first.
  std::unordered_map<const Node*, size_t> pending;
  for (const auto& n : nodes_) {
    size_t count = 0;
    for (const Value* in : n->inputs)
      if (in && in->producer) ++count;
    pending[n.get()] = count;
  }
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  std::vector<bool> taken(nodes_.size(), false);
  bool progress = true;
  while (sorted.size() < nodes_.size() && progress) {
    progress = false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (taken[i] || pending[nodes_[i].get()] != 0) continue;
      taken[i] = true;
      progress = true;
      for (const Value* out : nodes_[i]->outputs)
        if (out)
          for (const Node* user : out->users) --pending[user];
      sorted.push_back(std::move(nodes_[i]));
    }
  }
  if (sorted.size() < nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (!taken[i]) return invalid_argument("graph has a cycle through {}", node_label(*nodes_[i]));
  }
  nodes_ = std::move(sorted);
  return ok_status();
}

void Graph::replace_all_uses(Value* from, Value* to) {
  for (Node* user : from->users)
    for (Value*& in : user->inputs)
      if (in == from) {
        in = to;
        to->users.push_back(user);
      }
  from->users.clear();
  for (Value*& out : outputs_)
    if (out == from) {
      // The caller binds outputs by name: keep the name on the new value.
      out = to;
      from->is_output = false;
      to->is_output = true;
      by_name_.erase(from->name);
      std::swap(from->name, to->name);
      by_name_[to->name] = to;
      if (!from->name.empty()) by_name_[from->name] = from;
    }
}

void Graph::remove_node(Node* node) {
  for (Value* in : node->inputs) {
    if (!in) continue;
    auto it = std::find(in->users.begin(), in->users.end(), node);
    if (it != in->users.end()) in->users.erase(it);
  }
  node->inputs.clear();
  for (Value* out : node->outputs)
    if (out && out->producer == node) out->producer = nullptr;
  removed_.push_back(node);
}

void Graph::compact() {
  std::unordered_set<const Node*> removed(removed_.begin(), removed_.end());
  std::erase_if(nodes_, [&](const std::unique_ptr<Node>& n) { return removed.count(n.get()) > 0; });
  removed_.clear();
  std::unordered_set<const Value*> referenced;
  for (const auto& n : nodes_) {
    for (const Value* v : n->inputs) referenced.insert(v);
    for (const Value* v : n->outputs) referenced.insert(v);
  }
  std::erase_if(values_, [&](const std::unique_ptr<Value>& v) {
    bool keep = referenced.count(v.get()) || v->is_input || v->is_output;
    if (!keep) by_name_.erase(v->name);
    return !keep;
  });
  for (size_t i = 0; i < values_.size(); ++i) values_[i]->id = i;
}

std::string Graph::unique_name(std::string_view prefix) const {
  std::string name(prefix);
  for (int i = 1; by_name_.count(name); ++i) name = fmt::format("{}_{}", prefix, i);
  return name;
}

Status graph_verify(const Graph& g) {
  std::unordered_set<std::string_view> names;
  for (const auto& v : g.values())
    if (!v->name.empty() && !names.insert(v->name).second)
      return invalid_argument("value '{}' is defined more than once", v->name);
  std::unordered_set<const Value*> defined;
  for (const Value* v : g.inputs()) defined.insert(v);
  for (const auto& v : g.values())
    if (v->constant) defined.insert(v.get());
  for (const auto& n : g.nodes()) {
    for (const Value* in : n->inputs)
      if (in && !defined.count(in))
        return invalid_argument("{}: input '{}' is used before it is defined", node_label(*n),
                                in->name);
    for (const Value* out : n->outputs) {
      if (!out) continue;
      if (out->producer != n.get() || defined.count(out) || out->constant || out->is_input)
        return invalid_argument("{}: output '{}' is produced more than once", node_label(*n),
                                out->name);
      defined.insert(out);
    }
    for (const Value* in : n->inputs) {
      if (!in) continue;
      size_t uses = std::count(n->inputs.begin(), n->inputs.end(), in);
      size_t listed = std::count(in->users.begin(), in->users.end(), n.get());
      if (uses != listed)
        return internal_error("{}: use list of '{}' is out of date", node_label(*n), in->name);
    }
  }
  for (const Value* out : g.outputs())
    if (!defined.count(out))
      return invalid_argument("graph output '{}' is never produced", out->name);
  return ok_status();
}

std::set<std::string> graph_input_symbols(const Graph& g) {
  std::set<std::string> names;
  for (const Value* in : g.inputs())
    for (const Dim& d : in->shape.value_or(SymShape{}))
      if (!d.known() && !d.symbol.empty()) names.insert(d.symbol);
  return names;
}

Status infer_node_outputs(Node& n, std::unordered_map<const Value*, Tensor>& known) {
  InferContext ctx(n);
  ctx.inputs.resize(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* in = n.inputs[i];
    if (!in) continue;
    ctx.inputs[i] = TypeInfo{true, in->dtype, in->shape, in->constant};
    if (auto it = known.find(in); !in->constant && it != known.end()) ctx.inputs[i].value = it->second;
  }
  ctx.outputs.resize(n.outputs.size());
  KILN_RETURN_IF_ERROR(infer_node(ctx));
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    Value* out = n.outputs[i];
    if (!out) continue;
    out->dtype = ctx.outputs[i].dtype;
    if (ctx.outputs[i].shape) out->shape = ctx.outputs[i].shape;
    if (ctx.outputs[i].value) known[out] = *ctx.outputs[i].value;
  }
  return ok_status();
}

Status graph_infer_shapes(Graph& g) {
  // Values inference could compute (e.g. Shape of a fully known shape) flow
  // on to later nodes, so shape chains resolve where their inputs are known.
  std::unordered_map<const Value*, Tensor> known;
  for (const auto& n : g.nodes()) KILN_RETURN_IF_ERROR(infer_node_outputs(*n, known));
  return ok_status();
}

namespace {
std::string value_type_string(const Value& v) {
  return fmt::format("{}{}", dtype_name(v.dtype),
                     v.shape ? sym_shape_to_string(*v.shape) : std::string("[*]"));
}
}  // namespace

std::string graph_to_string(const Graph& g) {
  std::string out = fmt::format("graph {} (opset {})\n", g.name.empty() ? "main" : g.name, g.opset);
  for (const Value* v : g.inputs()) out += fmt::format("  input  %{}: {}\n", v->name, value_type_string(*v));
  size_t constants = 0, constant_bytes = 0;
  for (const auto& v : g.values())
    if (v->constant) {
      ++constants;
      constant_bytes += v->constant->nbytes();
    }
  out += fmt::format("  constants: {} ({} bytes)\n", constants, constant_bytes);
  for (const auto& n : g.nodes()) {
    std::string outs, ins, attrs;
    for (const Value* o : n->outputs) {
      if (!outs.empty()) outs += ", ";
      outs += o ? fmt::format("%{}: {}", o->name, value_type_string(*o)) : "_";
    }
    for (const Value* i : n->inputs) {
      if (!ins.empty()) ins += ", ";
      ins += i ? "%" + i->name : "_";
    }
    for (const auto& [name, value] : n->attrs.items())
      attrs += fmt::format("{}{}={}", attrs.empty() ? " {" : ", ", name, attribute_to_string(value));
    if (!attrs.empty()) attrs += "}";
    out += fmt::format("  {} = {}({}){}  # {}\n", outs, op_name(n->op), ins, attrs, n->name);
  }
  for (const Value* v : g.outputs()) out += fmt::format("  output %{}: {}\n", v->name, value_type_string(*v));
  return out;
}

}  // namespace kiln
