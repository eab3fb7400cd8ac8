// Each pass: a before/after IR text check on a small graph, and on a reference
// model the optimized graph computes what the original computes.
#include "passes/pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "npy/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/eager_executor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// x -> Neg -> a; x -> Neg -> b (duplicate); a + b -> y; x -> Abs (dead).
// Also Shape(x) -> Cast, which folds once x's shape is known.
Graph small_graph() {
  Graph g;
  g.opset = 17;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(2), Dim(3)});
  Value* a = g.add_value("a");
  Value* b = g.add_value("b");
  Value* y = g.add_value("y");
  Value* dead = g.add_value("dead");
  Value* shape = g.add_value("shape");
  Value* z = g.add_value("z");
  g.add_node(OpKind::kNeg, "neg1", {x}, {a});
  g.add_node(OpKind::kNeg, "neg2", {x}, {b});
  g.add_node(OpKind::kAdd, "add", {a, b}, {y});
  g.add_node(OpKind::kAbs, "unused", {x}, {dead});
  g.add_node(OpKind::kShape, "shape", {x}, {shape});
  Attributes to_float;
  to_float.set("to", int64_t(1));
  g.add_node(OpKind::kCast, "cast", {shape}, {z}, to_float);
  g.mark_output(y);
  g.mark_output(z);
  EXPECT_TRUE(graph_infer_shapes(g).ok());
  return g;
}

std::string body(const Graph& g) {
  std::string text = graph_to_string(g);
  return text.substr(text.find('\n') + 1);  // drop the header line
}

TEST(Passes, FoldConstantsBeforeAfter) {
  Graph g = small_graph();
  PassStats stats;
  ASSERT_TRUE(fold_constants(g, &stats).ok());
  EXPECT_EQ(stats.counts["fold_constants"], 2);  // Shape, then Cast of its value
  // Shape's output is no longer referenced: only z remains as a constant.
  EXPECT_EQ(body(g),
            "  input  %x: f32[2,3]\n"
            "  constants: 1 (8 bytes)\n"
            "  %a: f32[2,3] = Neg(%x)  # neg1\n"
            "  %b: f32[2,3] = Neg(%x)  # neg2\n"
            "  %y: f32[2,3] = Add(%a, %b)  # add\n"
            "  %dead: f32[2,3] = Abs(%x)  # unused\n"
            "  output %y: f32[2,3]\n"
            "  output %z: f32[2]\n");
  EXPECT_EQ(g.find_value("z")->constant->data<float>()[1], 3.0f);
}

TEST(Passes, EliminateCommonSubexpressionsBeforeAfter) {
  Graph g = small_graph();
  PassStats stats;
  ASSERT_TRUE(eliminate_common_subexpressions(g, &stats).ok());
  EXPECT_EQ(stats.counts["eliminate_common_subexpressions"], 1);
  EXPECT_NE(body(g).find("%y: f32[2,3] = Add(%a, %a)  # add"), std::string::npos) << body(g);
  EXPECT_EQ(body(g).find("neg2"), std::string::npos) << body(g);
}

TEST(Passes, EliminateDeadCodeBeforeAfter) {
  Graph g = small_graph();
  PassStats stats;
  ASSERT_TRUE(eliminate_dead_code(g, &stats).ok());
  EXPECT_EQ(stats.counts["eliminate_dead_code"], 1);
  EXPECT_EQ(body(g).find("unused"), std::string::npos) << body(g);
  EXPECT_TRUE(graph_verify(g).ok());
}

TEST(Passes, FusionSwitchFileTurnsPassesOff) {
  fs::path path = fs::temp_directory_path() / "kiln_switch_test.json";
  std::ofstream(path) << R"({"eliminate_dead_code": false, "fold_constants": true})";
  auto options = pass_options_from_json(path.string());
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->disabled, std::set<std::string>{"eliminate_dead_code"});
  Graph g = small_graph();
  PassStats stats;
  ASSERT_TRUE(run_passes(g, *options, &stats).ok());
  EXPECT_EQ(stats.counts.count("eliminate_dead_code"), 0u);
  EXPECT_NE(body(g).find("unused"), std::string::npos);

  std::ofstream(path) << R"({"fuse_everything": true})";
  auto bad = pass_options_from_json(path.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown pass 'fuse_everything'"), std::string::npos);
  fs::remove(path);
}

// --precision bf16 marks the products; a policy file overrides per op and per
// node, a node name also covering the nodes fused from it ("_linear") and the
// module inside it ("/blocks.0/..."), the longest name winning.
Graph named_nodes_graph() {
  Graph g;
  g.opset = 17;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(2), Dim(3)});
  std::vector<Value*> v;
  for (int i = 0; i < 5; ++i) v.push_back(g.add_value("v" + std::to_string(i)));
  g.add_node(OpKind::kMatMul, "/blocks.0/attn/MatMul", {x, x}, {v[0]});
  g.add_node(OpKind::kMatMul, "/blocks.0/mlp/MatMul_linear", {x, x}, {v[1]});
  g.add_node(OpKind::kMatMul, "/blocks.1/mlp/MatMul", {x, x}, {v[2]});
  g.add_node(OpKind::kSoftmax, "/blocks.1/Softmax", {x}, {v[3]});
  g.add_node(OpKind::kConv, "/conv", {x, x}, {v[4]});
  return g;
}

TEST(Passes, PrecisionPolicyMarksNodes) {
  auto marked = [&](Graph& graph) {
    std::string names;
    for (const auto& n : graph.nodes())
      if (computes_in_bf16(*n)) names += n->name + " ";
    return names;
  };

  Graph all = named_nodes_graph();
  auto bf16 = precision_policy("bf16", "");
  ASSERT_TRUE(bf16.ok());
  ASSERT_TRUE(assign_precision(all, *bf16, nullptr).ok());
  EXPECT_EQ(marked(all), "/blocks.0/attn/MatMul /blocks.0/mlp/MatMul_linear /blocks.1/mlp/MatMul /conv ");

  fs::path path = fs::temp_directory_path() / "kiln_policy_test.json";
  std::ofstream(path) << R"({"ops": {"Conv": "f32"}, "nodes": {"/blocks.0": "f32", "/blocks.0/mlp/MatMul": "bf16"}})";
  auto policy = precision_policy("bf16", path.string());
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  Graph some = named_nodes_graph();
  PassStats stats;
  ASSERT_TRUE(assign_precision(some, *policy, &stats).ok());
  EXPECT_EQ(marked(some), "/blocks.0/mlp/MatMul_linear /blocks.1/mlp/MatMul ");
  EXPECT_EQ(stats.counts["assign_precision"], 2);

  std::ofstream(path) << R"({"default": "f32", "nodes": {"/blocks.1": "bf16"}})";
  auto scoped = precision_policy("bf16", path.string());
  ASSERT_TRUE(scoped.ok()) << scoped.status().message();
  Graph one = named_nodes_graph();
  ASSERT_TRUE(assign_precision(one, *scoped, nullptr).ok());
  EXPECT_EQ(marked(one), "/blocks.1/mlp/MatMul ") << "Softmax has no bf16 kernel: never marked";

  std::ofstream(path) << R"({"nodes": {"/blocks.2": "f32", "/blocks.1": "f32"}})";
  auto missing = precision_policy("f32", path.string());
  ASSERT_TRUE(missing.ok());
  Graph none = named_nodes_graph();
  Status s = assign_precision(none, *missing, nullptr);
  EXPECT_NE(s.message().find("names node '/blocks.2'"), std::string::npos) << s.message();
  fs::remove(path);
}

TEST(Passes, SpecializeShapesNamesUnknownAndMissingDims) {
  Graph g;
  g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), Dim(3)});
  Status unknown = specialize_shapes(g, {{"btch", 2}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.message(), "no input has a dim named 'btch'");
  Status missing = specialize_shapes(g, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "input 'x': give a size for dim 'batch'");
  ASSERT_TRUE(specialize_shapes(g, {{"batch", 4}}).ok());
  EXPECT_EQ(sym_shape_to_string(*g.inputs()[0]->shape), "[4,3]");
}

// On every reference model: specialize to the stored inputs' shapes, run the
// pipeline, and the optimized graph's outputs equal the original's.
class PassesOnModel : public ::testing::TestWithParam<std::string> {};

TEST_P(PassesOnModel, OptimizedGraphComputesTheSame) {
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / GetParam();
  auto original = onnx_import_file((dir / "model.onnx").string());
  auto optimized = onnx_import_file((dir / "model.onnx").string());
  ASSERT_TRUE(original.ok() && optimized.ok());
  NamedTensors inputs;
  std::map<std::string, int64_t> dims;
  for (const Value* v : original->inputs()) {
    auto t = npy_read((dir / "inputs" / (v->name + ".npy")).string());
    ASSERT_TRUE(t.ok());
    for (size_t i = 0; i < v->shape->size(); ++i)
      if (!(*v->shape)[i].known()) dims[(*v->shape)[i].symbol] = t->shape()[i];
    inputs.emplace_back(v->name, std::move(t).value());
  }
  ASSERT_TRUE(specialize_shapes(*optimized, dims).ok());
  PassStats stats;
  Status s = run_passes(*optimized, PassOptions{}, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_LT(optimized->nodes().size(), original->nodes().size() * 3 / 4)
      << "folding should remove the shape arithmetic";
  EagerExecutor a(*original), b(*optimized);
  auto ya = a.run(inputs);
  auto yb = b.run(inputs);
  ASSERT_TRUE(ya.ok() && yb.ok()) << (ya.ok() ? yb.status().message() : ya.status().message());
  for (size_t k = 0; k < ya->size(); ++k) {
    ASSERT_EQ((*ya)[k].shape(), (*yb)[k].shape());
    for (int64_t i = 0; i < (*ya)[k].numel(); ++i)
      ASSERT_NEAR((*ya)[k].data<float>()[i], (*yb)[k].data<float>()[i], 1e-5) << GetParam();
  }
}

// Every decomposed LayerNorm in the reference models is fused: text_encoder
// has 2 layers x 2 + final, dit 4 blocks x 2 + final, dit_tiny 6 x 2 + final,
// unet 7 transformer blocks x 3; the VAE has none.
TEST(Passes, FusesEveryLayerNormInTheReferenceModels) {
  const std::map<std::string, std::map<std::string, int64_t>> models = {
      {"text_encoder", {{"batch", 2}, {"sequence", 16}}},
      {"dit", {{"batch", 2}}},
      {"dit_tiny", {{"batch", 2}}},
      {"unet", {{"batch", 2}, {"height", 16}, {"width", 16}, {"sequence", 8}}},
      {"vae_decoder", {{"batch", 1}, {"height", 8}, {"width", 8}}},
  };
  const std::map<std::string, int64_t> expected = {
      {"text_encoder", 5}, {"dit", 9}, {"dit_tiny", 13}, {"unet", 21}, {"vae_decoder", 0}};
  for (const auto& [model, dims] : models) {
    auto g = onnx_import_file((fs::path(KILN_SOURCE_DIR) / "tests" / "models" / model / "model.onnx").string());
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(specialize_shapes(*g, dims).ok());
    PassStats stats;
    ASSERT_TRUE(run_passes(*g, PassOptions{}, &stats).ok());
    EXPECT_EQ(stats.counts["fuse_layer_norm"], expected.at(model)) << model;
    int64_t reduce_means = 0;
    for (const auto& n : g->nodes()) reduce_means += n->op == OpKind::kReduceMean;
    EXPECT_EQ(reduce_means, 0) << model << ": an unfused LayerNorm is left";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PassesOnModel,
                         ::testing::Values("unet", "vae_decoder", "text_encoder", "dit", "dit_tiny"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
