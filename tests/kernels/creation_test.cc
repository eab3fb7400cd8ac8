// Shape, ConstantOfShape, Range, Trilu: CPU kernels against the reference,
// the reference against hand-computed values, shape inference, invalid nodes.
#include "ir/shape_inference.h"
#include "op_test_util.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

InputSpec values(DType d, Shape s, std::vector<double> v) { return {d, std::move(s), std::move(v)}; }
InputSpec scalar(DType d, double v) { return {d, {}, std::vector<double>{v}}; }

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.element_as_double(i));
  return out;
}

std::vector<double> reference(const OpCase& c) {
  std::vector<Tensor> out = run_reference(c);
  return out.empty() ? std::vector<double>{} : as_doubles(out[0]);
}

TEST(Creation, Shape) {
  const InputSpec x = f32({2, 3, 4, 5});
  for (const OpCase& c : std::vector<OpCase>{
           {"all", OpKind::kShape, {}, {x}},
           {"start 1", OpKind::kShape, attrs({{"start", int64_t(1)}}), {x}},
           {"start 1 end -1", OpKind::kShape, attrs({{"start", int64_t(1)}, {"end", int64_t(-1)}}), {x}},
           {"clipped", OpKind::kShape, attrs({{"start", int64_t(-10)}, {"end", int64_t(10)}}), {x}},
           {"empty slice", OpKind::kShape, attrs({{"start", int64_t(3)}, {"end", int64_t(1)}}), {x}},
           {"rank 0", OpKind::kShape, {}, {f32({})}},
           {"bool input", OpKind::kShape, {}, {typed(DType::kBool, {0, 7})}},
       })
    check_op(c);
  EXPECT_EQ(reference({"all", OpKind::kShape, {}, {x}}), (std::vector<double>{2, 3, 4, 5}));
  EXPECT_EQ(reference({"slice", OpKind::kShape, attrs({{"start", int64_t(-3)}, {"end", int64_t(-1)}}), {x}}),
            (std::vector<double>{3, 4}));
  EXPECT_EQ(reference({"clip", OpKind::kShape, attrs({{"end", int64_t(10)}}), {x}}),
            (std::vector<double>{2, 3, 4, 5}));
  EXPECT_TRUE(reference({"empty", OpKind::kShape, attrs({{"start", int64_t(3)}, {"end", int64_t(1)}}), {x}}).empty());
}

// Shape's value is known at import time once the sliced dims are.
TEST(Creation, ShapeValueInferred) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("b"), Dim(77), Dim(768)});
  Node* n = g.add_node(OpKind::kShape, "shape", {x}, {g.add_value("y")}, attrs({{"start", int64_t(1)}}));
  InferContext ctx(*n);
  ctx.inputs = {TypeInfo{true, x->dtype, x->shape, std::nullopt}};
  ctx.outputs.resize(1);
  ASSERT_TRUE(infer_node(ctx).ok());
  ASSERT_TRUE(ctx.output(0).value.has_value());
  EXPECT_EQ(as_doubles(*ctx.output(0).value), (std::vector<double>{77, 768}));
  EXPECT_EQ(ctx.output(0).dtype, DType::kI64);

  n->attrs = {};  // the symbolic batch dim: shape [3] known, value not
  InferContext all(*n);
  all.inputs = ctx.inputs;
  all.outputs.resize(1);
  ASSERT_TRUE(infer_node(all).ok());
  EXPECT_FALSE(all.output(0).value.has_value());
  EXPECT_EQ(sym_shape_to_string(*all.output(0).shape), "[3]");
}

TEST(Creation, ConstantOfShape) {
  auto value = [](auto v) {
    using T = decltype(v);
    return attrs({{"value", Tensor::from_vector<T>({1}, {v}).value()}});
  };
  for (const OpCase& c : std::vector<OpCase>{
           {"default f32 zeros", OpKind::kConstantOfShape, {}, {i64_vec({2, 3})}},
           {"f32 value", OpKind::kConstantOfShape, value(1.5f), {i64_vec({4, 5, 3})}},
           {"i32 value", OpKind::kConstantOfShape, value(int32_t(-7)), {i64_vec({3})}},
           {"i64 value", OpKind::kConstantOfShape, value(int64_t(1) << 60), {i64_vec({2, 2})}},
           {"bool value", OpKind::kConstantOfShape, value(true), {i64_vec({5})}},
           {"zero dim", OpKind::kConstantOfShape, value(int32_t(3)), {i64_vec({0})}},
           {"scalar", OpKind::kConstantOfShape, value(2.0f), {i64_vec({})}},
           {"big", OpKind::kConstantOfShape, value(0.25f), {i64_vec({77, 77, 3})}},
       })
    check_op(c);
  std::vector<Tensor> out = run_reference({"i32", OpKind::kConstantOfShape, value(int32_t(-7)), {i64_vec({2, 3})}});
  EXPECT_EQ(out[0].dtype(), DType::kI32);
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(as_doubles(out[0]), std::vector<double>(6, -7));
  out = run_reference({"default", OpKind::kConstantOfShape, {}, {i64_vec({})}});
  EXPECT_EQ(out[0].dtype(), DType::kF32);
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_EQ(as_doubles(out[0]), std::vector<double>{0});
}

TEST(Creation, Range) {
  for (DType d : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    for (const OpCase& c : std::vector<OpCase>{
             {"positive", OpKind::kRange, {}, {scalar(d, 1), scalar(d, 10), scalar(d, 2)}},
             {"negative delta", OpKind::kRange, {}, {scalar(d, 10), scalar(d, 6), scalar(d, -3)}},
             {"empty", OpKind::kRange, {}, {scalar(d, 5), scalar(d, 1), scalar(d, 1)}},
             {"long", OpKind::kRange, {}, {scalar(d, -3), scalar(d, 5000), scalar(d, 1)}},
             {"one-element tensors", OpKind::kRange, {},
              {values(d, {1}, {0}), values(d, {1}, {4}), values(d, {1}, {1})}},
         })
      check_op(c);
  }
  check_op({"fractional", OpKind::kRange, {}, {scalar(DType::kF32, 0.5), scalar(DType::kF32, 2.1), scalar(DType::kF32, 0.3)}});
  EXPECT_EQ(reference({"i32", OpKind::kRange, {}, {scalar(DType::kI32, 10), scalar(DType::kI32, 6), scalar(DType::kI32, -3)}}),
            (std::vector<double>{10, 7}));
  EXPECT_EQ(reference({"i64", OpKind::kRange, {}, {scalar(DType::kI64, 1), scalar(DType::kI64, 10), scalar(DType::kI64, 3)}}),
            (std::vector<double>{1, 4, 7}));
  std::vector<double> f = reference({"f32", OpKind::kRange, {},
                                     {scalar(DType::kF32, 0.5), scalar(DType::kF32, 2.1), scalar(DType::kF32, 0.5)}});
  EXPECT_EQ(f, (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
  EXPECT_TRUE(reference({"empty", OpKind::kRange, {}, {scalar(DType::kI64, 5), scalar(DType::kI64, 1), scalar(DType::kI64, 1)}}).empty());
}

TEST(Creation, Trilu) {
  auto k = [](int64_t v) { return scalar(DType::kI64, double(v)); };
  for (int64_t upper : {0, 1}) {
    const Attributes a = attrs({{"upper", upper}});
    for (OpCase c : std::vector<OpCase>{
             {"square", OpKind::kTrilu, a, {f32({5, 5})}},
             {"wide, k 2", OpKind::kTrilu, a, {f32({3, 6}), k(2)}},
             {"tall, k -2", OpKind::kTrilu, a, {f32({6, 3}), k(-2)}},
             {"k past the end", OpKind::kTrilu, a, {f32({4, 5}), k(9)}},
             {"k before the start", OpKind::kTrilu, a, {f32({4, 5}), k(-9)}},
             {"huge k", OpKind::kTrilu, a, {f32({4, 5}), k(int64_t(1) << 62)}},
             {"huge negative k", OpKind::kTrilu, a, {f32({4, 5}), k(-(int64_t(1) << 62))}},
             {"batched", OpKind::kTrilu, a, {f32({2, 3, 4, 5}), k(1)}},
             {"i64", OpKind::kTrilu, a, {typed(DType::kI64, {4, 4}, -9, 9)}},
             {"bool", OpKind::kTrilu, a, {typed(DType::kBool, {4, 6}, -1, 1)}},
             {"u8", OpKind::kTrilu, a, {typed(DType::kU8, {3, 4}, 1, 9)}},
             {"zero rows", OpKind::kTrilu, a, {f32({2, 0, 4})}},
             {"zero columns", OpKind::kTrilu, a, {f32({2, 4, 0})}},
             {"causal mask", OpKind::kTrilu, a, {f32({77, 77}), k(1)}},
         }) {
      c.label += upper ? " upper" : " lower";
      check_op(c);
    }
  }
  const InputSpec x = values(DType::kI64, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(reference({"triu", OpKind::kTrilu, {}, {x}}), (std::vector<double>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(reference({"tril", OpKind::kTrilu, attrs({{"upper", int64_t(0)}}), {x}}),
            (std::vector<double>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(reference({"triu k=-1", OpKind::kTrilu, {}, {x, k(-1)}}),
            (std::vector<double>{1, 2, 3, 4, 5, 6, 0, 8, 9}));
  EXPECT_EQ(reference({"tril k=1", OpKind::kTrilu, attrs({{"upper", int64_t(0)}}), {x, k(1)}}),
            (std::vector<double>{1, 2, 0, 4, 5, 6, 7, 8, 9}));
}

TEST(Creation, InferShapes) {
  Graph g;
  Value* shape_in = g.add_input("dims", DType::kI64, SymShape{Dim(3)});
  Value* cos = g.add_value("cos");
  g.add_node(OpKind::kConstantOfShape, "cos", {shape_in}, {cos});
  Value* cos_known = g.add_value("cos_known");
  g.add_node(OpKind::kConstantOfShape, "cos_known",
             {g.add_constant("c", Tensor::from_vector<int64_t>({2}, {4, 5}).value())}, {cos_known},
             attrs({{"value", Tensor::from_vector<int32_t>({1}, {1}).value()}}));
  Value* range = g.add_value("range");
  g.add_node(OpKind::kRange, "range",
             {g.add_input("s", DType::kI64, SymShape{}), g.add_input("l", DType::kI64, SymShape{}),
              g.add_input("d", DType::kI64, SymShape{})},
             {range});
  Value* range_known = g.add_value("range_known");
  g.add_node(OpKind::kRange, "range_known",
             {g.add_constant("s0", Tensor::from_vector<float>({}, {0}).value()),
              g.add_constant("l0", Tensor::from_vector<float>({}, {1}).value()),
              g.add_constant("d0", Tensor::from_vector<float>({}, {0.25f}).value())},
             {range_known});
  ASSERT_TRUE(graph_infer_shapes(g).ok());
  EXPECT_EQ(sym_shape_to_string(*cos->shape), sym_shape_to_string(SymShape(3)));
  EXPECT_EQ(sym_shape_to_string(*cos_known->shape), "[4,5]");
  EXPECT_EQ(cos_known->dtype, DType::kI32);
  EXPECT_EQ(sym_shape_to_string(*range->shape), sym_shape_to_string(SymShape(1)));
  EXPECT_EQ(sym_shape_to_string(*range_known->shape), "[4]");
}

TEST(Creation, InvalidNodesAreErrors) {
  auto infer_with = [](OpKind op, std::vector<Tensor> constants, Attributes a = {}) {
    Graph g;
    std::vector<Value*> ins;
    for (size_t i = 0; i < constants.size(); ++i)
      ins.push_back(g.add_constant("c" + std::to_string(i), std::move(constants[i])));
    g.add_node(op, "node", ins, {g.add_value("y")}, std::move(a));
    return graph_infer_shapes(g);
  };
  auto i64 = [](Shape s, std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(std::move(s), v).value(); };
  auto fails = [](const Status& st) { return !st.ok() && st.code() != StatusCode::kInternal; };
  EXPECT_TRUE(fails(infer_with(OpKind::kConstantOfShape, {i64({2}, {3, -1})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kConstantOfShape, {i64({2}, {int64_t(1) << 40, int64_t(1) << 40})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kConstantOfShape, {i64({1, 2}, {2, 2})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kConstantOfShape, {i64({1}, {2})},
                               attrs({{"value", Tensor::from_vector<float>({2}, {1, 2}).value()}}))));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {i64({}, {0}), i64({}, {5}), i64({}, {0})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {i64({}, {0}), i64({}, {INT64_MAX}), i64({}, {1})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {i64({}, {INT64_MIN}), i64({}, {INT64_MAX}), i64({}, {1})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {i64({2}, {0, 1}), i64({}, {5}), i64({}, {1})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {Tensor::from_vector<float>({}, {0}).value(),
                                                Tensor::from_vector<float>({}, {1e30f}).value(),
                                                Tensor::from_vector<float>({}, {1e-30f}).value()})));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {Tensor::from_vector<float>({}, {0}).value(),
                                                Tensor::from_vector<float>({}, {NAN}).value(),
                                                Tensor::from_vector<float>({}, {1}).value()})));
  EXPECT_TRUE(fails(infer_with(OpKind::kRange, {i64({}, {0}), i64({}, {5})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kTrilu, {i64({3}, {1, 2, 3})})));
  EXPECT_TRUE(fails(infer_with(OpKind::kTrilu, {i64({2, 2}, {1, 2, 3, 4}), i64({2}, {0, 1})})));
}

}  // namespace
}  // namespace kiln::testing
