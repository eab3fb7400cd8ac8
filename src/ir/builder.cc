#include "ir/builder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

GraphBuilder::GraphBuilder(std::string graph_name, int64_t opset) {
  graph_.name = std::move(graph_name);
  graph_.opset = opset;
}

GraphBuilder::Scope::~Scope() { b_.scopes_.pop_back(); }

GraphBuilder::Scope GraphBuilder::scope(std::string_view name) {
  scopes_.emplace_back(name);
  return Scope(*this);
}

std::string GraphBuilder::module_path(size_t from) const {
  return from >= scopes_.size() ? std::string()
                                : fmt::format("{}", fmt::join(scopes_.begin() + std::ptrdiff_t(from), scopes_.end(), "."));
}

std::string GraphBuilder::node_name(std::string_view name) {
  std::string path;
  for (const std::string& s : scopes_) path += "/" + s;
  path += "/";
  path += name.starts_with('/') ? name.substr(1) : name;  // an imported node's own path
  const int used = names_used_[path]++;
  return used ? fmt::format("{}_{}", path, used) : path;
}

Value* GraphBuilder::poison() {
  if (!poison_) poison_ = graph_.add_value(graph_.unique_name("poison"));
  return poison_;
}

Value* GraphBuilder::fail(Status status) {
  if (status_.ok()) status_ = std::move(status);
  return poison();
}

Value* GraphBuilder::input(std::string name, DType dtype, SymShape shape) {
  return graph_.add_input(std::move(name), dtype, std::move(shape));
}

void GraphBuilder::output(Value* v, std::string name) {
  if (!ok()) return;
  if (v->is_input || v->constant || v->is_output || graph_.find_value(name)) v = op(OpKind::kIdentity, {v});
  if (!ok()) return;
  graph_.rename_value(v, std::move(name));
  graph_.mark_output(v);
}

Value* GraphBuilder::constant(std::string name, Tensor tensor) {
  if (graph_.find_value(name)) name = graph_.unique_name(name);
  return graph_.add_constant(std::move(name), std::move(tensor));
}

Value* GraphBuilder::floats(std::string_view name, Shape shape, const std::vector<float>& values) {
  auto t = Tensor::from_vector<float>(std::move(shape), values);
  if (!t.ok()) return fail(t.status());
  return constant(node_name(name), std::move(*t));
}

Value* GraphBuilder::ints(std::string_view name, const std::vector<int64_t>& values) {
  auto t = Tensor::from_vector<int64_t>({int64_t(values.size())}, values);
  if (!t.ok()) return fail(t.status());
  return constant(node_name(name), std::move(*t));
}

Value* GraphBuilder::op(OpKind op, std::vector<Value*> inputs, Attributes attrs, std::string_view name) {
  return ops(op, std::move(inputs), 1, std::move(attrs), name)[0];
}

std::vector<Value*> GraphBuilder::ops(OpKind op, std::vector<Value*> inputs, size_t outputs, Attributes attrs,
                                      std::string_view name) {
  for (const Value* in : inputs)
    if (in == poison_ && poison_) fail(internal_error("an op reads the poison value"));
  if (!ok()) return std::vector<Value*>(std::max<size_t>(outputs, 1), poison());
  const std::string label = node_name(name.empty() ? op_name(op) : name);
  std::vector<Value*> outs;
  for (size_t i = 0; i < outputs; ++i) outs.push_back(graph_.add_value(graph_.unique_name(fmt::format("{}_output_{}", label, i))));
  Node* node = graph_.add_node(op, label, std::move(inputs), outs, std::move(attrs));
  if (Status s = infer_node_outputs(*node, inferred_values_); !s.ok()) {
    fail(s);
    return std::vector<Value*>(std::max<size_t>(outputs, 1), poison());
  }
  return outs;
}

std::vector<Value*> GraphBuilder::inline_graph(const Graph& from, const std::map<std::string, Value*>& inputs) {
  std::unordered_map<const Value*, Value*> mapped;
  for (const Value* in : from.inputs()) {
    auto it = inputs.find(in->name);
    if (it == inputs.end()) {
      fail(invalid_argument("{}: its input '{}' is not fed", from.name.empty() ? "the graph" : from.name, in->name));
      return std::vector<Value*>(from.outputs().size(), poison());
    }
    mapped[in] = it->second;
  }
  for (const auto& v : from.values())
    if (v->constant) mapped[v.get()] = constant(fmt::format("{}/{}", module_path(), v->name), *v->constant);
  for (const auto& node : from.nodes()) {
    std::vector<Value*> ins;
    for (const Value* in : node->inputs) {
      if (!in) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = mapped.find(in);
      if (it == mapped.end()) return {fail(internal_error("{}: an input is used before it is defined", node_label(*node)))};
      ins.push_back(it->second);
    }
    std::vector<Value*> outs = ops(node->op, std::move(ins), node->outputs.size(), node->attrs, node->name);
    for (size_t i = 0; i < node->outputs.size(); ++i)
      if (node->outputs[i]) mapped[node->outputs[i]] = outs[i];
  }
  std::vector<Value*> outputs;
  for (const Value* out : from.outputs()) {
    auto it = mapped.find(out);
    outputs.push_back(it == mapped.end() ? poison() : it->second);
  }
  return outputs;
}

Result<Graph> GraphBuilder::finish() && {
  if (!ok()) return status_;
  graph_.compact();  // drops the poison value and anything built but unused
  KILN_RETURN_IF_ERROR(graph_verify(graph_));
  return std::move(graph_);
}

}  // namespace kiln
