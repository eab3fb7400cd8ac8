// Movement ops: CPU kernels against the reference, the reference against
// hand-computed values, import-time inference, and invalid nodes.
// These ops move bytes exactly, so every row's tolerance is 0.
#include <omp.h>

#include <cstring>

#include "kernels/kernel.h"
#include "op_test_util.h"
#include "runtime/eager_executor.h"

namespace kiln::testing {
namespace {

const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64,
                            DType::kI32, DType::kI8,  DType::kU8,  DType::kBool};

InputSpec i32_vec(std::vector<double> v) {
  Shape s{int64_t(v.size())};
  return {DType::kI32, s, std::move(v)};
}
InputSpec i64_scalar(double v) { return {DType::kI64, {}, std::vector<double>{v}}; }
// 0, 1, 2, ...: makes a wrong element visible in hand-checked rows.
InputSpec iota(Shape s, DType d = DType::kF32) {
  std::vector<double> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i);
  return {d, std::move(s), std::move(v)};
}
AttributeValue ints(std::vector<int64_t> v) { return AttributeValue(std::move(v)); }

void check_all(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) {
    OpCase exact = c;
    exact.tolerance = 0;
    check_op(exact);
  }
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.element_as_double(i));
  return v;
}

// Runs one node over the given tensors; for the error paths check_op cannot take.
Result<std::vector<Tensor>> run_node(OpKind op, Attributes a, std::vector<Tensor> inputs,
                                     int outputs = 1, KernelSet set = KernelSet::kCpu) {
  Graph g;
  g.opset = 18;
  NamedTensors feed;
  std::vector<Value*> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    ins.push_back(g.add_input(name, inputs[i].dtype(), sym_shape_from(inputs[i].shape())));
    feed.emplace_back(name, inputs[i]);
  }
  for (int i = 0; i < outputs; ++i) outs.push_back(g.add_value("out" + std::to_string(i)));
  g.add_node(op, "node", ins, outs, std::move(a));
  for (Value* v : outs) g.mark_output(v);
  EagerExecutor exec(g, set);
  return exec.run(feed);
}

Tensor f32_tensor(Shape s) {
  std::vector<float> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  return Tensor::from_vector<float>(std::move(s), v).value();
}
Tensor i64_tensor(std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>({int64_t(v.size())}, v).value();
}

// Both kernel sets reject the node; returns the CPU status.
Status expect_fails(OpKind op, Attributes a, std::vector<Tensor> inputs, int outputs = 1) {
  auto ref = run_node(op, a, inputs, outputs, KernelSet::kReference);
  EXPECT_FALSE(ref.ok());
  auto cpu = run_node(op, a, inputs, outputs, KernelSet::kCpu);
  EXPECT_FALSE(cpu.ok());
  return cpu.ok() ? ok_status() : cpu.status();
}

TEST(Movement, ViewOps) {
  check_all({
      {"reshape", OpKind::kReshape, {}, {f32({2, 3, 4}), i64_vec({4, 6})}},
      {"reshape zero copies", OpKind::kReshape, {}, {f32({2, 3, 4}), i64_vec({0, -1})}},
      {"reshape allowzero", OpKind::kReshape, attrs({{"allowzero", int64_t(1)}}),
       {f32({0, 3, 4}), i64_vec({3, 4, 0})}},
      {"reshape to scalar", OpKind::kReshape, {}, {f32({1, 1}), i64_vec({})}},
      {"reshape from scalar", OpKind::kReshape, {}, {f32({}), i64_vec({1, -1})}},
      {"reshape zero-size", OpKind::kReshape, {}, {f32({2, 0, 3}), i64_vec({0, 0, 5})}},
      {"flatten default", OpKind::kFlatten, {}, {f32({2, 3, 4})}},
      {"flatten axis 0", OpKind::kFlatten, attrs({{"axis", int64_t(0)}}), {f32({2, 3, 4})}},
      {"flatten axis rank", OpKind::kFlatten, attrs({{"axis", int64_t(3)}}), {f32({2, 3, 4})}},
      {"flatten negative axis", OpKind::kFlatten, attrs({{"axis", int64_t(-1)}}), {f32({2, 3, 4})}},
      {"flatten scalar", OpKind::kFlatten, attrs({{"axis", int64_t(0)}}), {f32({})}},
      {"squeeze axes input", OpKind::kSqueeze, {}, {f32({1, 3, 1, 2}), i64_vec({0, -2})}},
      {"squeeze all ones", OpKind::kSqueeze, {}, {f32({1, 3, 1, 2})}},
      {"squeeze axes attribute", OpKind::kSqueeze, attrs({{"axes", ints({2})}}), {f32({1, 3, 1, 2})}},
      {"squeeze to scalar", OpKind::kSqueeze, {}, {f32({1, 1})}},
      {"unsqueeze axes input", OpKind::kUnsqueeze, {}, {f32({3, 2}), i64_vec({0, 3})}},
      {"unsqueeze unsorted negative", OpKind::kUnsqueeze, {}, {f32({3, 2}), i64_vec({-1, 0})}},
      {"unsqueeze axes attribute", OpKind::kUnsqueeze, attrs({{"axes", ints({1})}}), {f32({3, 2})}},
      {"unsqueeze scalar", OpKind::kUnsqueeze, {}, {f32({}), i64_vec({0})}},
  });
  for (DType d : kAllDTypes)
    check_all({{std::string("reshape ") + std::string(dtype_name(d)), OpKind::kReshape, {},
                {typed(d, {2, 3, 5}), i64_vec({5, -1})}}});
}

TEST(Movement, ReshapeReference) {
  auto out = run_reference({"", OpKind::kReshape, {}, {iota({2, 3}), i64_vec({3, -1})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  out = run_reference({"", OpKind::kSqueeze, {}, {iota({1, 3, 1})}});
  EXPECT_EQ(out[0].shape(), (Shape{3}));
  out = run_reference({"", OpKind::kUnsqueeze, {}, {iota({3}), i64_vec({-1, 0})}});
  EXPECT_EQ(out[0].shape(), (Shape{1, 3, 1}));
  out = run_reference({"", OpKind::kFlatten, attrs({{"axis", int64_t(2)}}), {iota({2, 3, 4, 5})}});
  EXPECT_EQ(out[0].shape(), (Shape{6, 20}));
}

// The executor may alias a view op's output to its input: the kernel must
// then leave the bytes alone, and copy them when it does not.
TEST(Movement, ViewKernelsHonourAliasing) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{2, 3});
  Value* s = g.add_input("s", DType::kI64, SymShape{1});
  Node* n = g.add_node(OpKind::kReshape, "r", {x, s}, {g.add_value("y")});
  Tensor in = f32_tensor({2, 3}), shape = i64_tensor({6});
  for (KernelFn fn : {cpu_kernel(OpKind::kReshape), ref_kernel(OpKind::kReshape)}) {
    TensorView aliased{DType::kF32, {6}, in.raw()};
    KernelContext kc;
    kc.node = n;
    kc.inputs = {&in.view(), &shape.view()};
    kc.outputs = {&aliased};
    ASSERT_TRUE(fn(kc).ok());
    EXPECT_EQ(values_of(in), (std::vector<double>{0, 1, 2, 3, 4, 5}));
    Tensor copy = Tensor::empty(DType::kF32, {6}).value();
    kc.outputs = {&copy.mutable_view()};
    ASSERT_TRUE(fn(kc).ok());
    EXPECT_EQ(values_of(copy), values_of(in));
  }
}

TEST(Movement, Transpose) {
  check_all({
      {"default reverses", OpKind::kTranspose, {}, {f32({2, 3, 4})}},
      {"2-D", OpKind::kTranspose, attrs({{"perm", ints({1, 0})}}), {f32({37, 19})}},
      {"inner dim kept", OpKind::kTranspose, attrs({{"perm", ints({1, 0, 2})}}), {f32({3, 4, 5})}},
      {"rotate", OpKind::kTranspose, attrs({{"perm", ints({2, 0, 1})}}), {f32({3, 4, 5})}},
      {"unit dims", OpKind::kTranspose, attrs({{"perm", ints({3, 1, 2, 0})}}), {f32({1, 5, 1, 7})}},
      {"scalar", OpKind::kTranspose, {}, {f32({})}},
      {"zero-size", OpKind::kTranspose, attrs({{"perm", ints({1, 0})}}), {f32({0, 3})}},
      // Attention layouts, large enough for the threaded tiled path.
      {"BNHD->BHND", OpKind::kTranspose, attrs({{"perm", ints({0, 2, 1, 3})}}), {f32({2, 77, 8, 40})}},
      {"BHND->BHDN", OpKind::kTranspose, attrs({{"perm", ints({0, 1, 3, 2})}}), {f32({2, 8, 257, 40})}},
      {"BNHD->BHDN", OpKind::kTranspose, attrs({{"perm", ints({0, 2, 3, 1})}}), {f32({1, 300, 4, 33})}},
  });
  for (DType d : kAllDTypes) {
    std::string name(dtype_name(d));
    check_all({{"tiled " + name, OpKind::kTranspose, attrs({{"perm", ints({0, 2, 1})}}),
                {typed(d, {3, 70, 45}, -100, 100)}},
               {"rows " + name, OpKind::kTranspose, attrs({{"perm", ints({1, 0, 2})}}),
                {typed(d, {5, 6, 7}, -100, 100)}}});
  }
}

TEST(Movement, TransposeReference) {
  auto out = run_reference({"", OpKind::kTranspose, attrs({{"perm", ints({1, 0})}}), {iota({2, 3})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Movement, Concat) {
  check_all({
      {"axis 0", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {f32({2, 3}), f32({4, 3})}},
      {"axis 1 three inputs", OpKind::kConcat, attrs({{"axis", int64_t(1)}}),
       {f32({2, 3}), f32({2, 1}), f32({2, 5})}},
      {"negative axis", OpKind::kConcat, attrs({{"axis", int64_t(-1)}}), {f32({2, 3, 4}), f32({2, 3, 2})}},
      {"zero-size input", OpKind::kConcat, attrs({{"axis", int64_t(1)}}), {f32({2, 0}), f32({2, 3})}},
      {"all empty", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {f32({0, 3}), f32({0, 3})}},
      {"single", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {f32({4})}},
      {"large", OpKind::kConcat, attrs({{"axis", int64_t(1)}}), {f32({2, 64, 32, 32}), f32({2, 96, 32, 32})}},
      {"shape values", OpKind::kConcat, attrs({{"axis", int64_t(0)}}),
       {i64_vec({1}), i64_vec({-1}), i64_vec({8, 40})}},
  });
  for (DType d : kAllDTypes)
    check_all({{std::string("concat ") + std::string(dtype_name(d)), OpKind::kConcat,
                attrs({{"axis", int64_t(1)}}), {typed(d, {3, 2, 2}), typed(d, {3, 1, 2})}}});
  auto out = run_reference({"", OpKind::kConcat, attrs({{"axis", int64_t(1)}}), {iota({2, 1}), iota({2, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 0, 1, 1, 2, 3}));
}

TEST(Movement, Split) {
  check_all({
      {"equal", OpKind::kSplit, attrs({{"axis", int64_t(1)}}), {f32({2, 6})}, 3},
      {"split input", OpKind::kSplit, attrs({{"axis", int64_t(-1)}}), {f32({2, 6}), i64_vec({1, 5})}, 2},
      {"split attribute", OpKind::kSplit, attrs({{"split", ints({2, 1})}}), {f32({3, 4})}, 2},
      {"num_outputs uneven", OpKind::kSplit, attrs({{"axis", int64_t(1)}, {"num_outputs", int64_t(3)}}),
       {f32({2, 8})}, 3},
      {"zero-size parts", OpKind::kSplit, {}, {f32({0}), i64_vec({0, 0, 0})}, 3},
      {"a zero part", OpKind::kSplit, {}, {f32({4, 2}), i64_vec({4, 0})}, 2},
      {"large", OpKind::kSplit, attrs({{"axis", int64_t(1)}}), {f32({2, 128, 32, 32})}, 2},
  });
  for (DType d : kAllDTypes)
    check_all({{std::string("split ") + std::string(dtype_name(d)), OpKind::kSplit,
                attrs({{"axis", int64_t(2)}}), {typed(d, {2, 3, 4}), i64_vec({1, 3})}, 2}});
  auto out = run_reference({"", OpKind::kSplit, attrs({{"num_outputs", int64_t(3)}}), {iota({8})}, 3});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(values_of(out[2]), (std::vector<double>{6, 7}));
}

TEST(Movement, Slice) {
  check_all({
      {"basic", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({0, 0}), i64_vec({3, 10}), i64_vec({0, 1}), i64_vec({1, 1})}},
      {"default axes", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({0, 0, 3}), i64_vec({20, 10, 4})}},
      {"default steps", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({0, 0, 3}), i64_vec({20, 10, 4}), i64_vec({0, 1, 2})}},
      {"negative axes", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({0, 0, 3}), i64_vec({20, 10, 4}), i64_vec({0, -2, -1})}},
      {"negative starts ends", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({0}), i64_vec({-1}), i64_vec({1}), i64_vec({1})}},
      {"negative steps", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({20, 10, 4}), i64_vec({0, 0, 1}), i64_vec({0, 1, 2}), i64_vec({-1, -3, -2})}},
      {"reverse all", OpKind::kSlice, {}, {f32({7}), i64_vec({-1}), i64_vec({-1e18}), i64_vec({0}), i64_vec({-1})}},
      {"end out of bounds", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({1}), i64_vec({1000}), i64_vec({1}), i64_vec({1})}},
      {"start out of bounds", OpKind::kSlice, {}, {f32({20, 10, 5}), i64_vec({1000}), i64_vec({1000}), i64_vec({1}), i64_vec({1})}},
      {"huge bounds", OpKind::kSlice, {}, {f32({4, 6}), i64_vec({-1e18, 1}), i64_vec({1e18, 1e18}), i64_vec({0, 1}), i64_vec({1, 2})}},
      {"step past the end", OpKind::kSlice, {}, {f32({4, 6}), i64_vec({1}), i64_vec({6}), i64_vec({1}), i64_vec({1e18})}},
      {"empty range", OpKind::kSlice, {}, {f32({4, 6}), i64_vec({3}), i64_vec({1}), i64_vec({1})}},
      {"zero-size input", OpKind::kSlice, {}, {f32({0, 6}), i64_vec({0}), i64_vec({2}), i64_vec({1})}},
      {"i32 indices", OpKind::kSlice, {}, {f32({5, 6}), i32_vec({1}), i32_vec({-1}), i32_vec({1}), i32_vec({2})}},
      {"shape values", OpKind::kSlice, {}, {i64_vec({2, 77, 768}), i64_vec({-1}), i64_vec({1e18}), i64_vec({0})}},
      {"large inner rows", OpKind::kSlice, {}, {f32({2, 128, 32, 32}), i64_vec({32}), i64_vec({128}), i64_vec({1})}},
  });
  for (DType d : kAllDTypes)
    check_all({{std::string("slice ") + std::string(dtype_name(d)), OpKind::kSlice, {},
                {typed(d, {6, 7}), i64_vec({5, 1}), i64_vec({0, 7}), i64_vec({0, 1}), i64_vec({-2, 3})}}});
  auto out = run_reference({"", OpKind::kSlice, {}, {iota({2, 4}), i64_vec({1, 3}), i64_vec({2, 0}), i64_vec({0, 1}), i64_vec({1, -2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{7, 5}));
}

TEST(Movement, SliceExtremeBounds) {
  const int64_t kMax = INT64_MAX, kMin = INT64_MIN;
  for (KernelSet set : {KernelSet::kReference, KernelSet::kCpu}) {
    auto out = run_node(OpKind::kSlice, {},
                        {f32_tensor({5}), i64_tensor({kMax}), i64_tensor({kMin}), i64_tensor({0}),
                         i64_tensor({kMin})}, 1, set);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(values_of((*out)[0]), (std::vector<double>{4}));
    out = run_node(OpKind::kSlice, {},
                   {f32_tensor({5}), i64_tensor({kMin}), i64_tensor({kMax}), i64_tensor({0}),
                    i64_tensor({kMax})}, 1, set);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(values_of((*out)[0]), (std::vector<double>{0}));
  }
}

TEST(Movement, Gather) {
  check_all({
      {"axis 0", OpKind::kGather, {}, {f32({5, 4, 3}), i64_values({2, 2}, {0, 4, 1, 1})}},
      {"axis 1", OpKind::kGather, attrs({{"axis", int64_t(1)}}), {f32({5, 4, 3}), i64_vec({3, 0, 2})}},
      {"last axis", OpKind::kGather, attrs({{"axis", int64_t(-1)}}), {f32({5, 4, 3}), i64_vec({2, -3})}},
      {"negative indices", OpKind::kGather, {}, {f32({5, 4}), i64_vec({-1, -5, 0})}},
      {"i32 indices", OpKind::kGather, {}, {f32({5, 4}), i32_vec({4, -2})}},
      {"scalar index", OpKind::kGather, attrs({{"axis", int64_t(1)}}), {f32({5, 4, 3}), i64_scalar(-1)}},
      {"shape element", OpKind::kGather, {}, {i64_vec({2, 77, 768}), i64_scalar(1)}},
      {"no indices", OpKind::kGather, {}, {f32({5, 4}), i64_vec({})}},
  });
  std::vector<double> ids;  // token ids into an embedding table
  for (int i = 0; i < 154; ++i) ids.push_back(double((i * 37) % 1000));
  check_all({{"embedding", OpKind::kGather, {}, {f32({1000, 768}), i64_values({2, 77}, ids)}}});
  for (DType d : kAllDTypes)
    check_all({{std::string("gather ") + std::string(dtype_name(d)), OpKind::kGather,
                attrs({{"axis", int64_t(1)}}), {typed(d, {3, 4, 2}), i64_vec({3, -4, 1})}}});
  auto out = run_reference({"", OpKind::kGather, attrs({{"axis", int64_t(1)}}), {iota({2, 3}), i64_values({2, 1}, {2, -3})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2, 1}));
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{2, 0, 5, 3}));
}

TEST(Movement, GatherElements) {
  check_all({
      {"axis 0", OpKind::kGatherElements, {}, {f32({3, 3}), i64_values({2, 3}, {1, 2, 0, 2, 0, -1})}},
      {"axis 1", OpKind::kGatherElements, attrs({{"axis", int64_t(1)}}), {f32({2, 2}), i64_values({2, 2}, {0, 0, 1, 0})}},
      {"negative axis smaller indices", OpKind::kGatherElements, attrs({{"axis", int64_t(-1)}}),
       {f32({4, 5, 6}), i64_values({2, 3, 7}, {5, 0, -6, 3, 1})}},
      {"i32 indices", OpKind::kGatherElements, attrs({{"axis", int64_t(1)}}), {f32({3, 4}), {DType::kI32, {3, 2}, std::vector<double>{3, -1}}}},
      {"zero-size", OpKind::kGatherElements, {}, {f32({3, 4}), i64_values({0, 4}, {0})}},
  });
  for (DType d : kAllDTypes)
    check_all({{std::string("gather_elements ") + std::string(dtype_name(d)), OpKind::kGatherElements,
                attrs({{"axis", int64_t(0)}}), {typed(d, {3, 4}), i64_values({2, 4}, {2, 1, -1, 0, 1})}}});
  auto out = run_reference({"", OpKind::kGatherElements, attrs({{"axis", int64_t(1)}}),
                            {iota({2, 2}), i64_values({2, 2}, {0, 0, 1, 0})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 0, 3, 2}));
}

TEST(Movement, IndexOutOfRangeIsAnError) {
  Tensor data = f32_tensor({3, 4});
  Status s = expect_fails(OpKind::kGather, {}, {data, i64_tensor({0, 3})});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node"), std::string::npos) << s.message();
  s = expect_fails(OpKind::kGather, attrs({{"axis", int64_t(1)}}), {data, i64_tensor({-5})});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = expect_fails(OpKind::kGather, {}, {f32_tensor({0, 4}), i64_tensor({0})});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = expect_fails(OpKind::kGatherElements, {},
                   {data, Tensor::from_vector<int64_t>({1, 2}, {0, 3}).value()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = expect_fails(OpKind::kGatherElements, attrs({{"axis", int64_t(1)}}),
                   {data, Tensor::from_vector<int64_t>({1, 1}, {-5}).value()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(Movement, ExpandAndTile) {
  check_all({
      {"expand dim changed", OpKind::kExpand, {}, {f32({3, 1}), i64_vec({2, 1, 6})}},
      {"expand dim unchanged", OpKind::kExpand, {}, {f32({3, 1}), i64_vec({3, 4})}},
      {"expand shorter shape", OpKind::kExpand, {}, {f32({2, 1, 4}), i64_vec({3, 1})}},
      {"expand scalar", OpKind::kExpand, {}, {f32({}), i64_vec({2, 3})}},
      {"expand inner broadcast", OpKind::kExpand, {}, {f32({4, 1}), i64_vec({4, 5})}},
      {"expand zero-size", OpKind::kExpand, {}, {f32({3, 1}), i64_vec({3, 0})}},
      {"expand from zero", OpKind::kExpand, {}, {f32({0, 1}), i64_vec({1, 5})}},
      {"expand large", OpKind::kExpand, {}, {f32({2, 1, 1024}), i64_vec({2, 77, 1024})}},
      {"tile", OpKind::kTile, {}, {f32({2, 3}), i64_vec({2, 2})}},
      {"tile ones", OpKind::kTile, {}, {f32({2, 3}), i64_vec({1, 1})}},
      {"tile inner", OpKind::kTile, {}, {f32({4, 1}), i64_vec({1, 7})}},
      {"tile zero", OpKind::kTile, {}, {f32({2, 3}), i64_vec({0, 2})}},
      {"tile scalar", OpKind::kTile, {}, {f32({}), i64_vec({})}},
      {"tile large", OpKind::kTile, {}, {f32({2, 64, 64}), i64_vec({4, 2, 3})}},
  });
  for (DType d : kAllDTypes) {
    std::string name(dtype_name(d));
    check_all({{"expand " + name, OpKind::kExpand, {}, {typed(d, {3, 1, 2}), i64_vec({2, 3, 4, 2})}},
               {"tile " + name, OpKind::kTile, {}, {typed(d, {3, 2}), i64_vec({2, 3})}}});
  }
  auto out = run_reference({"", OpKind::kExpand, {}, {iota({2, 1}), i64_vec({2, 3})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  out = run_reference({"", OpKind::kTile, {}, {iota({2}), i64_vec({3})}});
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 1, 0, 1, 0, 1}));
}

// Few long rows are cut into pieces across threads; an odd thread count
// makes the pieces uneven.
TEST(Movement, RowsSplitAcrossThreads) {
  int threads = omp_get_max_threads();
  omp_set_num_threads(7);
  check_all({
      {"concat axis 0", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {f32({3, 20001}), f32({5, 20001})}},
      {"concat channels", OpKind::kConcat, attrs({{"axis", int64_t(1)}}), {f32({2, 33, 1001}), f32({2, 7, 1001})}},
      {"split channels", OpKind::kSplit, attrs({{"axis", int64_t(1)}}), {f32({2, 40, 1001}), i64_vec({13, 27})}, 2},
      {"slice channels", OpKind::kSlice, {}, {f32({2, 64, 1001}), i64_vec({5}), i64_vec({60}), i64_vec({1})}},
      {"reversed slice", OpKind::kSlice, {}, {f32({1, 200001}), i64_vec({-2}), i64_vec({-1e18}), i64_vec({1}), i64_vec({-1})}},
      {"expand rows", OpKind::kExpand, {}, {f32({1, 1, 100003}), i64_vec({2, 1, 100003})}},
  });
  omp_set_num_threads(threads);
}

TEST(Movement, InvalidNodes) {
  Tensor x = f32_tensor({2, 3});
  struct Bad {
    const char* what;
    OpKind op;
    Attributes attrs;
    std::vector<Tensor> inputs;
    int outputs = 1;
  };
  const Bad cases[] = {
      {"reshape count mismatch", OpKind::kReshape, {}, {x, i64_tensor({4, 2})}},
      {"reshape two -1", OpKind::kReshape, {}, {x, i64_tensor({-1, -1})}},
      {"reshape -2", OpKind::kReshape, {}, {x, i64_tensor({-2, -3})}},
      {"reshape -1 does not fit", OpKind::kReshape, {}, {x, i64_tensor({4, -1})}},
      {"reshape 0 past the rank", OpKind::kReshape, {}, {x, i64_tensor({6, 1, 0})}},
      {"reshape allowzero with -1", OpKind::kReshape, attrs({{"allowzero", int64_t(1)}}),
       {f32_tensor({0, 3}), i64_tensor({0, -1})}},
      {"flatten axis", OpKind::kFlatten, attrs({{"axis", int64_t(3)}}), {x}},
      {"squeeze non-one", OpKind::kSqueeze, {}, {x, i64_tensor({0})}},
      {"squeeze duplicate", OpKind::kSqueeze, {}, {f32_tensor({1, 3}), i64_tensor({0, -2})}},
      {"unsqueeze no axes", OpKind::kUnsqueeze, {}, {x}},
      {"unsqueeze out of range", OpKind::kUnsqueeze, {}, {x, i64_tensor({3})}},
      {"transpose short perm", OpKind::kTranspose, attrs({{"perm", ints({0})}}), {x}},
      {"transpose repeated perm", OpKind::kTranspose, attrs({{"perm", ints({0, 0})}}), {x}},
      {"concat mismatch", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {x, f32_tensor({2, 4})}},
      {"concat ranks", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {x, f32_tensor({2})}},
      {"concat axis", OpKind::kConcat, attrs({{"axis", int64_t(2)}}), {x, x}},
      {"concat dtypes", OpKind::kConcat, attrs({{"axis", int64_t(0)}}), {x, i64_tensor({1, 2, 3})}},
      {"split sum", OpKind::kSplit, attrs({{"axis", int64_t(1)}}), {x, i64_tensor({1, 1})}, 2},
      {"split uneven", OpKind::kSplit, attrs({{"axis", int64_t(1)}}), {x}, 2},
      {"split count", OpKind::kSplit, attrs({{"num_outputs", int64_t(3)}}), {x}, 2},
      {"slice zero step", OpKind::kSlice, {}, {x, i64_tensor({0}), i64_tensor({1}), i64_tensor({0}), i64_tensor({0})}},
      {"slice lengths", OpKind::kSlice, {}, {x, i64_tensor({0, 0}), i64_tensor({1})}},
      {"slice axis", OpKind::kSlice, {}, {x, i64_tensor({0}), i64_tensor({1}), i64_tensor({2})}},
      {"gather float indices", OpKind::kGather, {}, {x, x}},
      {"gather axis", OpKind::kGather, attrs({{"axis", int64_t(2)}}), {x, i64_tensor({0})}},
      {"gather_elements rank", OpKind::kGatherElements, {}, {x, i64_tensor({0})}},
      {"expand incompatible", OpKind::kExpand, {}, {x, i64_tensor({2, 4})}},
      {"expand negative", OpKind::kExpand, {}, {x, i64_tensor({-1, 3})}},
      {"expand huge", OpKind::kExpand, {}, {x, i64_tensor({int64_t(1) << 40, int64_t(1) << 40, 3})}},
      {"tile negative", OpKind::kTile, {}, {x, i64_tensor({1, -1})}},
      {"tile length", OpKind::kTile, {}, {x, i64_tensor({2})}},
      {"tile overflow", OpKind::kTile, {}, {x, i64_tensor({INT64_MAX, 2})}},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    Status s = expect_fails(b.op, b.attrs, b.inputs, b.outputs);
    EXPECT_NE(s.code(), StatusCode::kInternal) << s.message();
  }
}

// Import time: values computed by Shape->Gather->Concat chains are unknown.
TEST(Movement, ImportTimeInference) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), 77, 768});
  Value* dyn4 = g.add_input("dyn4", DType::kI64, SymShape{4});
  Value* dyn = g.add_input("dyn", DType::kI64, SymShape{Dim::named("n")});
  Value* heads = g.add_constant("heads", i64_tensor({0, -1, 12, 64}));
  Value* axes = g.add_constant("axes", i64_tensor({1}));
  auto node = [&](OpKind op, std::vector<Value*> ins, Attributes a = {}) {
    Value* out = g.add_value(fmt::format("v{}", g.nodes().size()));
    g.add_node(op, out->name, std::move(ins), {out}, std::move(a));
    return out;
  };
  Value* known = node(OpKind::kReshape, {x, heads});
  Value* rank4 = node(OpKind::kReshape, {x, dyn4});
  Value* unranked = node(OpKind::kReshape, {x, dyn});
  Value* transposed = node(OpKind::kTranspose, {known}, attrs({{"perm", ints({0, 2, 1, 3})}}));
  Value* flat = node(OpKind::kFlatten, {x}, attrs({{"axis", int64_t(1)}}));
  Value* unsq = node(OpKind::kUnsqueeze, {x, axes});
  Value* expanded = node(OpKind::kExpand, {x, dyn4});
  Value* sliced = node(OpKind::kSlice, {x, dyn, dyn, axes});
  Value* whole = node(OpKind::kSlice, {x, g.add_constant("s0", i64_tensor({0})),
                                       g.add_constant("s1", i64_tensor({INT64_MAX})),
                                       g.add_constant("s2", i64_tensor({0}))});
  Value* tiled = node(OpKind::kTile, {x, dyn});
  Value* cat = node(OpKind::kConcat, {x, x}, attrs({{"axis", int64_t(0)}}));
  ASSERT_TRUE(graph_infer_shapes(g).ok());
  auto shape_of = [](const Value* v) { return v->shape ? sym_shape_to_string(*v->shape) : "?"; };
  EXPECT_EQ(shape_of(known), sym_shape_to_string({Dim::named("batch"), 77, 12, 64}));
  EXPECT_EQ(shape_of(transposed), sym_shape_to_string({Dim::named("batch"), 12, 77, 64}));
  EXPECT_EQ(shape_of(rank4), sym_shape_to_string(SymShape(4)));
  EXPECT_EQ(shape_of(unranked), "?");
  EXPECT_EQ(shape_of(flat), sym_shape_to_string({Dim::named("batch"), 77 * 768}));
  EXPECT_EQ(shape_of(unsq), sym_shape_to_string({Dim::named("batch"), 1, 77, 768}));
  EXPECT_EQ(shape_of(expanded), sym_shape_to_string({Dim(), Dim(), 77, 768}));
  EXPECT_EQ(shape_of(sliced), sym_shape_to_string({Dim::named("batch"), Dim(), 768}));
  EXPECT_EQ(shape_of(whole), sym_shape_to_string({Dim::named("batch"), 77, 768}));
  EXPECT_EQ(shape_of(tiled), sym_shape_to_string(SymShape(3)));
  EXPECT_EQ(shape_of(cat), sym_shape_to_string({Dim(), 77, 768}));
}

}  // namespace
}  // namespace kiln::testing
