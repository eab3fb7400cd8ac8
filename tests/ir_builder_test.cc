// GraphBuilder: shapes inferred as ops are added, names from the module
// path, the first error sticking, graphs copied in, outputs named.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "runtime/eager_executor.h"

namespace kiln {
namespace {

TEST(GraphBuilder, InfersShapesAsOpsAreAddedAndNamesThemByModulePath) {
  GraphBuilder b("test");
  Value* x = b.input("x", DType::kF32, {Dim::named("batch"), 4, 6});
  Value* y = nullptr;
  {
    GraphBuilder::Scope block = b.scope("blocks.0");
    GraphBuilder::Scope proj = b.scope("proj");
    EXPECT_EQ(b.module_path(), "blocks.0.proj");
    y = b.op(OpKind::kTranspose, {x}, {{"perm", std::vector<int64_t>{0, 2, 1}}});
    y = b.op(OpKind::kRelu, {y});
    y = b.op(OpKind::kRelu, {y});  // a second node of the same name gets a suffix
  }
  ASSERT_TRUE(y->shape.has_value());
  EXPECT_EQ(sym_shape_to_string(*y->shape), "[batch,6,4]");  // known before finish()
  EXPECT_EQ(y->producer->name, "/blocks.0/proj/Relu_1");
  EXPECT_EQ(b.module_path(), "");
  b.output(y, "y");
  auto g = std::move(b).finish();
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->outputs()[0]->name, "y");
  EXPECT_EQ(g->nodes()[0]->name, "/blocks.0/proj/Transpose");
}

TEST(GraphBuilder, TheFirstErrorSticksAndNamesTheNode) {
  GraphBuilder b("test");
  Value* x = b.input("x", DType::kF32, {2, 3});
  Value* w = b.floats("w", {4, 5}, std::vector<float>(20, 1.0f));
  GraphBuilder::Scope scope = b.scope("fc");
  Value* y = b.op(OpKind::kMatMul, {x, w});  // inner dims 3 and 4
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(y, b.poison());
  Value* z = b.op(OpKind::kRelu, {y});  // skipped: no node added
  EXPECT_EQ(z, b.poison());
  b.output(z, "z");
  auto g = std::move(b).finish();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/fc/MatMul"), std::string::npos) << g.status().message();
}

TEST(GraphBuilder, AnInputOrConstantOutputGetsAnIdentity) {
  GraphBuilder b("test");
  Value* x = b.input("x", DType::kF32, {2});
  b.output(x, "same");
  b.output(b.floats("c", {1}, {3.0f}), "c_out");
  auto g = std::move(b).finish();
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(g->nodes()[0]->op, OpKind::kIdentity);
  EXPECT_EQ(g->outputs()[0]->name, "same");
  EXPECT_EQ(g->outputs()[1]->name, "c_out");
}

TEST(GraphBuilder, InlinedGraphsComputeWhatTheyDidAlone) {
  // inner(a, b) = (a + b) * 2
  GraphBuilder inner_builder("inner");
  Value* a = inner_builder.input("a", DType::kF32, {3});
  Value* bb = inner_builder.input("b", DType::kF32, {3});
  Value* sum = inner_builder.op(OpKind::kAdd, {a, bb});
  inner_builder.output(inner_builder.op(OpKind::kMul, {sum, inner_builder.floats("two", {}, {2.0f})}), "out");
  auto inner = std::move(inner_builder).finish();
  ASSERT_TRUE(inner.ok()) << inner.status().message();

  GraphBuilder b("outer");
  Value* x = b.input("x", DType::kF32, {3});
  Value* neg = b.op(OpKind::kNeg, {x});
  std::vector<Value*> out;
  {
    GraphBuilder::Scope scope = b.scope("inner");
    out = b.inline_graph(*inner, {{"a", x}, {"b", neg}});
  }
  ASSERT_EQ(out.size(), 1u);
  b.output(b.op(OpKind::kAdd, {out[0], x}), "y");  // (x - x) * 2 + x
  auto g = std::move(b).finish();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_NE(g->find_value("/inner/Add_output_0"), nullptr);
  EagerExecutor exec(*g);
  auto y = exec.run({{"x", *Tensor::from_vector<float>({3}, {1.0f, -2.0f, 5.0f})}});
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ((std::vector<float>((*y)[0].data<float>(), (*y)[0].data<float>() + 3)),
            (std::vector<float>{1.0f, -2.0f, 5.0f}));

  GraphBuilder unfed("outer");
  unfed.inline_graph(*inner, {{"a", unfed.input("x", DType::kF32, {3})}});
  EXPECT_NE(unfed.status().message().find("'b' is not fed"), std::string::npos) << unfed.status().message();
}

}  // namespace
}  // namespace kiln
