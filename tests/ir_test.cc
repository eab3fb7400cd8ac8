#include <gtest/gtest.h>

#include <cmath>

#include "ir/graph.h"
#include "ir/shape_inference.h"

namespace kiln {
namespace {

TEST(Ir, OpTableRoundTripsNames) {
  for (int i = 0; i < kOpCount; ++i) {
    OpKind op = static_cast<OpKind>(i);
    if (op_name(op).starts_with("kiln.")) EXPECT_FALSE(op_from_onnx_name(op_name(op)).has_value());  // fused
    else EXPECT_EQ(op_from_onnx_name(op_name(op)), op);
  }
  EXPECT_FALSE(op_from_onnx_name("NoSuchOp").has_value());
}

TEST(Ir, UseDefListsAndTopologicalSort) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), Dim(8)});
  Value* a = g.add_value("a");
  Value* b = g.add_value("b");
  // Added out of order: b's producer reads a, which the second node makes.
  g.add_node(OpKind::kNeg, "second", {a}, {b});
  g.add_node(OpKind::kAbs, "first", {x}, {a});
  g.mark_output(b);
  EXPECT_FALSE(graph_verify(g).ok());  // a used before it is defined
  ASSERT_TRUE(g.topo_sort().ok());
  EXPECT_EQ(g.nodes()[0]->name, "first");
  EXPECT_TRUE(graph_verify(g).ok());
  ASSERT_EQ(a->users.size(), 1u);
  EXPECT_EQ(a->users[0]->name, "second");
  EXPECT_EQ(a->producer->name, "first");
}

TEST(Ir, VerifierRejectsDoubleDefinitionAndCycles) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(2)});
  Value* y = g.add_value("y");
  g.add_node(OpKind::kNeg, "n1", {x}, {y});
  g.add_node(OpKind::kAbs, "n2", {x}, {y});  // y produced twice
  g.mark_output(y);
  Status s = graph_verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("produced more than once"), std::string::npos) << s.message();

  Graph c;
  Value* p = c.add_value("p");
  Value* q = c.add_value("q");
  c.add_node(OpKind::kNeg, "loop1", {q}, {p});
  c.add_node(OpKind::kNeg, "loop2", {p}, {q});
  c.mark_output(q);
  Status cyc = c.topo_sort();
  ASSERT_FALSE(cyc.ok());
  EXPECT_NE(cyc.message().find("cycle"), std::string::npos);
}

TEST(Ir, PrinterShowsTypesAttributesAndNames) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), Dim(8)});
  Value* y = g.add_value("y");
  Attributes attrs;
  attrs.set("alpha", 0.5f);
  g.add_node(OpKind::kLeakyRelu, "act", {x}, {y}, attrs);
  g.mark_output(y);
  y->shape = SymShape{Dim::named("batch"), Dim(8)};
  std::string text = graph_to_string(g);
  EXPECT_NE(text.find("input  %x: f32[batch,8]"), std::string::npos) << text;
  EXPECT_NE(text.find("%y: f32[batch,8] = LeakyRelu(%x) {alpha=0.5}  # act"), std::string::npos) << text;
}

TEST(Ir, SymbolicShapeHelpers) {
  SymShape s{Dim(2), Dim::named("n"), Dim()};
  EXPECT_EQ(sym_shape_to_string(s), "[2,n,?]");
  EXPECT_FALSE(sym_shape_concrete(s).has_value());
  EXPECT_EQ(sym_shape_concrete(SymShape{Dim(2), Dim(3)}), (Shape{2, 3}));
  EXPECT_TRUE(Dim::named("n") == Dim::named("n"));
  EXPECT_FALSE(Dim() == Dim());  // two unknown dims are not known to be equal
}

TEST(Core, ShapeProductOverflowIsAnError) {
  EXPECT_FALSE(shape_numel_checked({int64_t(1) << 40, int64_t(1) << 40}).ok());
  EXPECT_FALSE(shape_numel_checked({-1, 2}).ok());
  EXPECT_EQ(shape_numel_checked({0, int64_t(1) << 62}).value(), 0);
}

TEST(Core, HalfPrecisionConversionsRoundToNearestEven) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f)), 1.0f);
  EXPECT_EQ(f32_to_f16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f).bits, 0x7c00);                  // rounds up to inf
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048).bits, 0x3c00);        // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048).bits, 0x3c02);        // tie -> even (up)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)).bits, 0x0001);     // smallest subnormal
  EXPECT_EQ(f16_to_f32(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(f16{0xfc00}), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  // Just above the halfway point between 1 and its next half: through f32 it
  // would land exactly on halfway and round down (double rounding).
  EXPECT_EQ(f64_to_f16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits, 0x3c01);
  EXPECT_EQ(f64_to_f16(1.0 + std::ldexp(1.0, -11)).bits, 0x3c00);  // exact tie -> even
  EXPECT_EQ(f64_to_f16(-70000.0).bits, 0xfc00);
  for (uint32_t b = 0; b < 0x7c00; ++b)  // every finite half round-trips
    ASSERT_EQ(f32_to_f16(f16_to_f32(f16{uint16_t(b)})).bits, b);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);   // tie -> even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.01171875f)), 1.015625f);  // tie -> even (up)
}

}  // namespace
}  // namespace kiln
