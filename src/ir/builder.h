// Builds a Graph op by op, the way a model's forward() reads:
//
//   GraphBuilder b("vae_decoder");
//   Value* z = b.input("latent_sample", DType::kF32, {Dim::named("batch"), 4, Dim::named("h"), Dim::named("w")});
//   {
//     GraphBuilder::Scope conv_in = b.scope("conv_in");   // nodes named "/conv_in/..."
//     z = b.op(OpKind::kFusedConv, {z, weight, bias}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
//   }
//   b.output(z, "sample");
//   KILN_ASSIGN_OR_RETURN(Graph g, std::move(b).finish());
//
// - Each op returns its output with dtype and shape already inferred: the
//   op's infer function checks it at once, so a weight of the wrong shape is
//   an error naming the node, not a wrong answer later.
// - Node and value names come from the module path in scope
//   ("/down_blocks.0/resnets.1/conv1/Conv"), as ONNX exporters name them, so
//   precision policies, profiles and `kiln show` read the same for a built
//   model and an imported one.
// - Constants are Tensors; a weight is a view into its memory-mapped file,
//   never a copy.
// - The first error sticks: every later op returns a poison value and adds
//   nothing, and finish() returns that error. Model code reads straight
//   through without checking each op (XLA's XlaBuilder works the same way).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace kiln {

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string graph_name, int64_t opset = 18);

  // A module path component for as long as it lives ("down_blocks.0").
  class [[nodiscard]] Scope {
   public:
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class GraphBuilder;
    explicit Scope(GraphBuilder& b) : b_(b) {}
    GraphBuilder& b_;
  };
  Scope scope(std::string_view name);
  // The scopes from the `from`-th on joined by dots ("down_blocks.0.resnets.1"):
  // a module's checkpoint name.
  std::string module_path(size_t from = 0) const;
  size_t scope_depth() const { return scopes_.size(); }

  Value* input(std::string name, DType dtype, SymShape shape);
  // Makes `v` graph output `name` (an Identity when v is an input, a
  // constant or already an output).
  void output(Value* v, std::string name);
  Value* constant(std::string name, Tensor tensor);
  Value* floats(std::string_view name, Shape shape, const std::vector<float>& values);
  Value* ints(std::string_view name, const std::vector<int64_t>& values);  // i64 [n]

  // Adds a node (named "<scope path>/<name or the op's name>") and returns
  // its first output.
  Value* op(OpKind op, std::vector<Value*> inputs, Attributes attrs = {}, std::string_view name = {});
  // The same for an op with `outputs` outputs.
  std::vector<Value*> ops(OpKind op, std::vector<Value*> inputs, size_t outputs, Attributes attrs = {},
                          std::string_view name = {});

  // Copies `from`'s nodes into this graph under the current scope, its
  // inputs read from `inputs` (by input name), its constants shared with it.
  // Returns its outputs.
  std::vector<Value*> inline_graph(const Graph& from, const std::map<std::string, Value*>& inputs);

  // Records an error (the first one sticks): for what model code finds
  // wrong itself, such as a missing weight. Returns the poison value.
  Value* fail(Status status);
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // The value every op returns once an error has stuck: no shape, no producer.
  Value* poison();

  Graph& graph() { return graph_; }
  // The graph, verified; or the first error.
  Result<Graph> finish() &&;

 private:
  std::string node_name(std::string_view name);

  Graph graph_;
  Status status_;
  std::vector<std::string> scopes_;
  std::unordered_map<std::string, int> names_used_;  // node name -> times used
  std::unordered_map<const Value*, Tensor> inferred_values_;  // shape arithmetic inference could evaluate
  Value* poison_ = nullptr;
};

}  // namespace kiln
