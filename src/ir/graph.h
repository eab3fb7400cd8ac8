// The graph IR: Values (tensors flowing between nodes) and Nodes (op
// applications), with use-def lists and nodes kept in topological order.
//
//   Graph g;
//   Value* x = g.add_input("x", DType::kF32, SymShape{Dim::symbol("batch"), Dim(8)});
//   Node* n = g.add_node(OpKind::kRelu, "relu0", {x}, {g.add_value("y")});
//   g.mark_output(n->outputs[0]);
//   KILN_RETURN_IF_ERROR(graph_infer_shapes(g));
//   KILN_RETURN_IF_ERROR(graph_verify(g));
//   fmt::print("{}", graph_to_string(g));
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "ir/attribute.h"
#include "ir/op.h"

namespace kiln {

// A dimension: a known size, a named symbol ("batch"), or unknown.
struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string symbol;  // set for named symbolic dims

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from sizes reads naturally
  static Dim named(std::string name) {
    Dim d;
    d.symbol = std::move(name);
    return d;
  }
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const {
    return known() ? value == o.value : (!symbol.empty() && symbol == o.symbol);
  }
};
using SymShape = std::vector<Dim>;

std::string dim_to_string(const Dim& d);
std::string sym_shape_to_string(const SymShape& s);
SymShape sym_shape_from(const Shape& s);
// The concrete shape when every dim is known.
std::optional<Shape> sym_shape_concrete(const SymShape& s);

struct Node;

struct Value {
  size_t id = 0;  // index in Graph::values(): executors keep per-value slots by it
  std::string name;
  DType dtype = DType::kF32;
  std::optional<SymShape> shape;  // nullopt: rank unknown
  Node* producer = nullptr;       // null for graph inputs and constants
  std::vector<Node*> users;       // one entry per use (a node using it twice appears twice)
  std::optional<Tensor> constant; // initializers and Constant-node outputs
  bool is_input = false;
  bool is_output = false;
};

struct Node {
  OpKind op;
  std::string name;
  std::vector<Value*> inputs;  // nullptr for an omitted optional input
  std::vector<Value*> outputs; // nullptr for an omitted optional output
  Attributes attrs;

  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // Creates a value; names must be unique (checked by graph_verify).
  Value* add_value(std::string name);
  Value* add_input(std::string name, DType dtype, std::optional<SymShape> shape);
  Value* add_constant(std::string name, Tensor tensor);
  // Appends a node; the caller appends in topological order or calls topo_sort().
  Node* add_node(OpKind op, std::string name, std::vector<Value*> inputs,
                 std::vector<Value*> outputs, Attributes attrs = {});
  void mark_output(Value* v);

  Value* find_value(std::string_view name) const;
  // Gives `v` a new name (unique names are checked by graph_verify).
  void rename_value(Value* v, std::string name);
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }

  // Orders nodes so producers precede users; an error on cycles.
  Status topo_sort();

  // Editing, for passes. Every reader of `from` reads `to` instead; a graph
  // output is rewired too (the output keeps `from`'s name, which callers bind).
  void replace_all_uses(Value* from, Value* to);
  // Marks a node for removal: it stops using its inputs; its outputs lose
  // their producer. Removed nodes and values nothing refers to any more are
  // dropped by compact().
  void remove_node(Node* node);
  // Drops removed nodes and unreferenced values; renumbers Value::id.
  void compact();
  // A fresh value name with this prefix ("prefix", "prefix_1", ...).
  std::string unique_name(std::string_view prefix) const;

  std::string name;
  int64_t opset = 0;

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Node*> removed_;
};

// Checks the invariants every pass and executor relies on: unique names,
// use-def lists consistent, topological order, every node input defined,
// outputs produced once.
Status graph_verify(const Graph& g);

// The names of the symbolic dims of the graph inputs ("batch", ...).
std::set<std::string> graph_input_symbols(const Graph& g);

// Fills Value::dtype/shape for every node output from its inputs.
Status graph_infer_shapes(Graph& g);
// The same for one node: `known` holds what inference could evaluate of
// earlier values (shape arithmetic), and gains this node's outputs'.
Status infer_node_outputs(Node& node, std::unordered_map<const Value*, Tensor>& known);

// Text form, one line per node: `%y: f32[batch,8] = Relu(%x)  # relu0`.
std::string graph_to_string(const Graph& g);

// "node 'name' (Op)" for error messages.
std::string node_label(const Node& n);

}  // namespace kiln
