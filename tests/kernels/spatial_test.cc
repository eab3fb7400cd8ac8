// Pad and Resize: CPU kernels against the reference, the reference against
// hand-computed values, and invalid nodes rejected by shape inference.
#include "ir/shape_inference.h"
#include "op_test_util.h"

namespace kiln::testing {
namespace {

InputSpec values(DType d, Shape s, std::vector<double> v) { return {d, std::move(s), std::move(v)}; }
InputSpec f32_vec(std::vector<double> v) {
  Shape s{int64_t(v.size())};
  return values(DType::kF32, s, std::move(v));
}
InputSpec empty_f32() { return values(DType::kF32, {0}, {}); }

Tensor i64s(std::vector<int64_t> v) {
  Shape s{int64_t(v.size())};
  return Tensor::from_vector<int64_t>(s, v).value();
}
Tensor f32s(std::vector<float> v) {
  Shape s{int64_t(v.size())};
  return Tensor::from_vector<float>(s, v).value();
}

Attributes pad_mode(const std::string& mode) { return attrs({{"mode", mode}}); }
Attributes resize_attrs(const std::string& mode, const std::string& coord,
                        const std::string& nearest = "round_prefer_floor") {
  return attrs({{"mode", mode}, {"coordinate_transformation_mode", coord}, {"nearest_mode", nearest}});
}
Attributes crop_attrs(const std::string& mode, float extrapolation) {
  return attrs({{"mode", mode},
                {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                {"extrapolation_value", extrapolation}});
}

// Runs the reference and expects output 0 to be `want` with shape `shape`.
void expect_reference(const OpCase& c, const Shape& shape, const std::vector<double>& want,
                      double tol = 1e-6) {
  SCOPED_TRACE(c.label);
  std::vector<Tensor> out = run_reference(c);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), shape);
  ASSERT_EQ(out[0].numel(), int64_t(want.size()));
  for (int64_t i = 0; i < out[0].numel(); ++i)
    EXPECT_NEAR(out[0].element_as_double(i), want[size_t(i)], tol) << "element " << i;
}

// Shape inference on a one-node graph whose inputs after X are constants.
Status infer_status(OpKind op, Attributes a, DType dtype, Shape x_shape,
                    std::vector<std::optional<Tensor>> rest) {
  Graph g;
  std::vector<Value*> ins{g.add_input("x", dtype, sym_shape_from(x_shape))};
  for (size_t i = 0; i < rest.size(); ++i)
    ins.push_back(rest[i] ? g.add_constant(fmt::format("c{}", i), *rest[i]) : nullptr);
  Value* y = g.add_value("y");
  g.add_node(op, "n", ins, {y}, std::move(a));
  g.mark_output(y);
  return graph_infer_shapes(g);
}

TEST(Spatial, PadModes) {
  const InputSpec x = f32({2, 3, 4, 5});
  for (std::string mode : {"constant", "edge", "reflect", "wrap"}) {
    const Attributes a = pad_mode(mode);
    check_op({"4d " + mode, OpKind::kPad, a, {x, i64_vec({0, 1, 2, 3, 0, 2, 1, 3})}});
    check_op({"crop " + mode, OpKind::kPad, a, {x, i64_vec({0, -1, 2, -2, 0, 1, -1, 2})}});
    check_op({"rank1 " + mode, OpKind::kPad, a, {f32({6}), i64_vec({3, 5})}});
    check_op({"axes " + mode, OpKind::kPad, a,
              {x, i64_vec({2, 1, 3, 2}), absent(), i64_vec({-1, 1})}});
    check_op({"big " + mode, OpKind::kPad, a,
              {f32({2, 16, 40, 40}), i64_vec({0, 0, 1, 3, 0, 0, 2, 1})}});
  }
  check_op({"constant value", OpKind::kPad, {},
            {x, i64_vec({0, 1, 2, 3, 0, 2, 1, 3}), values(DType::kF32, {}, {7.5})}});
  check_op({"rank 0", OpKind::kPad, pad_mode("edge"), {f32({}), i64_vec({})}});
  check_op({"empty axis padded", OpKind::kPad, {},
            {f32({0, 3}), i64_vec({1, 0, 2, 1}), values(DType::kF32, {1}, {-1})}});
  check_op({"empty output", OpKind::kPad, pad_mode("edge"), {f32({0, 3}), i64_vec({0, 1, 0, 1})}});
  check_op({"i32 pads", OpKind::kPad, pad_mode("reflect"),
            {x, values(DType::kI32, {8}, {0, 0, 1, 2, 0, 0, 2, 1})}});
}

TEST(Spatial, PadDtypes) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64, DType::kI32,
                  DType::kI8, DType::kU8, DType::kBool}) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    const InputSpec x = typed(d, {3, 4, 5}, 0, 100);
    check_op({"edge", OpKind::kPad, pad_mode("edge"), {x, i64_vec({1, 0, 2, 0, 3, 1})}});
    check_op({"reflect", OpKind::kPad, pad_mode("reflect"), {x, i64_vec({2, -1, 0, 1, 2, 4})}});
    check_op({"constant", OpKind::kPad, {}, {x, i64_vec({1, 2, 3, 1, 2, 3}), values(d, {}, {1})}});
  }
  // A constant_value of another dtype is converted to the data's.
  check_op({"converted value", OpKind::kPad, {},
            {typed(DType::kI32, {2, 3}), i64_vec({1, 1, 1, 1}), values(DType::kF32, {}, {-3.7})}});
}

TEST(Spatial, PadReferenceValues) {
  const InputSpec x = f32_vec({1, 2, 3});
  const InputSpec x22 = values(DType::kF32, {2, 2}, {1, 2, 3, 4});
  expect_reference({"constant", OpKind::kPad, {}, {x, i64_vec({2, 1}), f32_vec({9})}}, {6},
                   {9, 9, 1, 2, 3, 9});
  expect_reference({"edge", OpKind::kPad, pad_mode("edge"), {x, i64_vec({2, 1})}}, {6},
                   {1, 1, 1, 2, 3, 3});
  expect_reference({"reflect", OpKind::kPad, pad_mode("reflect"), {x, i64_vec({2, 1})}}, {6},
                   {3, 2, 1, 2, 3, 2});
  expect_reference({"wrap", OpKind::kPad, pad_mode("wrap"), {x, i64_vec({4, 1})}}, {8},
                   {3, 1, 2, 3, 1, 2, 3, 1});
  expect_reference({"crop", OpKind::kPad, pad_mode("edge"), {x, i64_vec({-1, 2})}}, {4},
                   {2, 3, 3, 3});
  expect_reference({"2d", OpKind::kPad, pad_mode("reflect"), {x22, i64_vec({1, 0, 0, 1})}}, {3, 3},
                   {3, 4, 3, 1, 2, 1, 3, 4, 3});
  expect_reference({"axes", OpKind::kPad, {}, {x22, i64_vec({1, 0}), absent(), i64_vec({-1})}},
                   {2, 3}, {0, 1, 2, 0, 3, 4});
}

TEST(Spatial, PadRejectsInvalidNodes) {
  auto pad = [](const std::string& mode, Shape x, std::vector<int64_t> pads) {
    return infer_status(OpKind::kPad, pad_mode(mode), DType::kF32, std::move(x), {i64s(pads)});
  };
  const int64_t huge = int64_t(1) << 45;
  EXPECT_TRUE(pad("constant", {2, 3}, {1, 1, 1, 1}).ok());
  EXPECT_EQ(pad("reflect", {2, 3}, {0, 3, 0, 0}).code(), StatusCode::kInvalidArgument);  // >= size
  EXPECT_EQ(pad("constant", {2, 3}, {0, -4, 0, 0}).code(), StatusCode::kInvalidArgument);  // crop
  EXPECT_EQ(pad("constant", {2, 3}, {1, 1, 1}).code(), StatusCode::kInvalidArgument);  // count
  EXPECT_EQ(pad("edge", {0, 3}, {1, 0, 0, 0}).code(), StatusCode::kInvalidArgument);  // no edge
  EXPECT_EQ(pad("circular", {2, 3}, {0, 0, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(pad("constant", {2, 3}, {0, huge, 0, 0}).ok());
  auto repeated_axes = infer_status(OpKind::kPad, {}, DType::kF32, {2, 3},
                                    {i64s({0, 0, 0, 0}), std::nullopt, i64s({0, 0})});
  EXPECT_FALSE(repeated_axes.ok());
}

TEST(Spatial, ResizeNearest) {
  const InputSpec x = f32({2, 3, 5, 7});
  for (std::string coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                            "tf_half_pixel_for_nn", "half_pixel_symmetric"})
    for (std::string nearest : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
      const std::string label = coord + " " + nearest;
      const Attributes a = resize_attrs("nearest", coord, nearest);
      check_op({label + " up", OpKind::kResize, a, {x, absent(), f32_vec({1, 1, 2.5, 1.5})}});
      check_op({label + " down", OpKind::kResize, a, {x, absent(), f32_vec({1, 1, 0.6, 0.4})}});
      check_op({label + " sizes", OpKind::kResize, a,
                {x, absent(), empty_f32(), i64_vec({2, 4, 3, 9})}});
    }
  // The SD decoder path: 2x on H and W, asymmetric + floor.
  check_op({"sd upsample", OpKind::kResize, resize_attrs("nearest", "asymmetric", "floor"),
            {f32({2, 64, 16, 16}), absent(), f32_vec({1, 1, 2, 2})}});
  check_op({"rank 1", OpKind::kResize, resize_attrs("nearest", "half_pixel"),
            {f32({5}), absent(), f32_vec({1.7})}});
  check_op({"rank 5", OpKind::kResize, resize_attrs("nearest", "asymmetric"),
            {f32({1, 2, 3, 4, 5}), absent(), f32_vec({1, 2, 2, 0.5, 2})}});
  check_op({"empty batch", OpKind::kResize, {},
            {f32({0, 2, 3, 3}), absent(), f32_vec({1, 1, 2, 2})}});
  check_op({"opset 11 empty roi", OpKind::kResize, {},
            {f32({1, 2, 3, 3}), empty_f32(), f32_vec({1, 1, 2, 3})}});
}

TEST(Spatial, ResizeNearestDtypes) {
  for (DType d : {DType::kF64, DType::kF16, DType::kBF16, DType::kI64, DType::kI32, DType::kI8,
                  DType::kU8, DType::kBool}) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    const InputSpec x = typed(d, {1, 2, 3, 4}, 0, 100);
    check_op({"up", OpKind::kResize, resize_attrs("nearest", "asymmetric", "floor"),
              {x, absent(), f32_vec({1, 1, 2, 2})}});
    check_op({"crop", OpKind::kResize, crop_attrs("nearest", 3),
              {x, f32_vec({0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3}), empty_f32(), i64_vec({1, 2, 5, 5})}});
  }
}

TEST(Spatial, ResizeLinear) {
  const InputSpec x = f32({2, 3, 5, 7});
  for (std::string coord :
       {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"}) {
    const Attributes a = resize_attrs("linear", coord);
    check_op({coord + " up", OpKind::kResize, a, {x, absent(), f32_vec({1, 1, 2.5, 1.5})}});
    check_op({coord + " down", OpKind::kResize, a, {x, absent(), f32_vec({1, 1, 0.6, 0.4})}});
    check_op({coord + " sizes", OpKind::kResize, a,
              {x, absent(), empty_f32(), i64_vec({2, 3, 1, 11})}});
    check_op({coord + " all axes", OpKind::kResize, a, {x, absent(), f32_vec({1.5, 2, 0.5, 1})}});
  }
  const Attributes half_pixel = resize_attrs("linear", "half_pixel");
  check_op({"trilinear", OpKind::kResize, half_pixel,
            {f32({1, 2, 4, 5, 6}), absent(), f32_vec({1, 1, 2, 1.5, 0.7})}});
  check_op({"big", OpKind::kResize, half_pixel,
            {f32({2, 32, 20, 20}), absent(), f32_vec({1, 1, 2, 2})}});
  check_op({"rank 1", OpKind::kResize, resize_attrs("linear", "align_corners"),
            {f32({6}), absent(), empty_f32(), i64_vec({11})}});
  check_op({"crop and resize", OpKind::kResize, crop_attrs("linear", 10),
            {x, f32_vec({0, 0, -0.3, 0.2, 1, 1, 0.8, 1.4}), empty_f32(), i64_vec({2, 3, 6, 8})}});
}

TEST(Spatial, ResizeAxesAndAspectRatio) {
  const InputSpec x = f32({2, 3, 5, 7});
  for (std::string mode : {"nearest", "linear"}) {
    Attributes a = resize_attrs(mode, "half_pixel");
    a.set("axes", std::vector<int64_t>{-1, 2});
    check_op({mode + " axes", OpKind::kResize, a, {x, absent(), f32_vec({2, 0.5})}});
    for (std::string policy : {"stretch", "not_larger", "not_smaller"}) {
      Attributes b = a;
      b.set("keep_aspect_ratio_policy", policy);
      check_op({mode + " " + policy, OpKind::kResize, b,
                {x, absent(), empty_f32(), i64_vec({10, 4})}});
    }
  }
}

TEST(Spatial, ResizeReferenceValues) {
  const InputSpec x22 = values(DType::kF32, {1, 1, 2, 2}, {1, 2, 3, 4});
  const InputSpec x24 = values(DType::kF32, {1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  expect_reference({"nearest 2x", OpKind::kResize, resize_attrs("nearest", "asymmetric", "floor"),
                    {x22, absent(), f32_vec({1, 1, 2, 2})}},
                   {1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  expect_reference({"linear 2x", OpKind::kResize, resize_attrs("linear", "half_pixel"),
                    {x22, absent(), f32_vec({1, 1, 2, 2})}},
                   {1, 1, 4, 4},
                   {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  // ONNX's downsample_scales_linear_align_corners: the spec's length_resized
  // is 4 * 0.6, not the floored 2.
  expect_reference({"align corners", OpKind::kResize, resize_attrs("linear", "align_corners"),
                    {x24, absent(), f32_vec({1, 1, 0.6, 0.6})}},
                   {1, 1, 1, 2}, {1, 3.142857}, 1e-5);
  expect_reference({"nearest down", OpKind::kResize, resize_attrs("nearest", "half_pixel"),
                    {x24, absent(), f32_vec({1, 1, 0.6, 0.6})}},
                   {1, 1, 1, 2}, {1, 3});
  expect_reference({"not_larger", OpKind::kResize,
                    attrs({{"keep_aspect_ratio_policy", std::string("not_larger")}}),
                    {x24, absent(), empty_f32(), i64_vec({1, 1, 4, 4})}},
                   {1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  expect_reference({"extrapolation", OpKind::kResize, crop_attrs("linear", 10),
                    {f32_vec({1, 2, 3}), f32_vec({0.5, 1.5}), empty_f32(), i64_vec({3})}},
                   {3}, {2, 3, 10});
}

TEST(Spatial, ResizeRejectsInvalidNodes) {
  const Shape x{1, 1, 4, 4};
  auto scaled = [&](Attributes a, std::vector<float> s) {
    return infer_status(OpKind::kResize, std::move(a), DType::kF32, x, {std::nullopt, f32s(s)});
  };
  EXPECT_TRUE(scaled({}, {1, 1, 2, 2}).ok());
  EXPECT_EQ(scaled({}, {1, 1, 0, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scaled({}, {1, 1, -2, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scaled({}, {1, 1, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(scaled({}, {1, 1, 1e30f, 1e30f}).ok());
  EXPECT_EQ(scaled(attrs({{"mode", std::string("cubic")}}), {1, 1, 2, 2}).code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(scaled(attrs({{"antialias", int64_t(1)}}), {1, 1, 2, 2}).code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(scaled(attrs({{"mode", std::string("bilinear")}}), {1, 1, 2, 2}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(scaled(crop_attrs("linear", 0), {1, 1, 2, 2}).code(),
            StatusCode::kInvalidArgument);  // no roi
  const int64_t big = int64_t(1) << 30;
  auto both = infer_status(OpKind::kResize, {}, DType::kF32, x,
                           {std::nullopt, f32s({1, 1, 2, 2}), i64s({1, 1, 8, 8})});
  EXPECT_EQ(both.code(), StatusCode::kInvalidArgument);
  auto neither = infer_status(OpKind::kResize, {}, DType::kF32, x, {std::nullopt, f32s({})});
  EXPECT_EQ(neither.code(), StatusCode::kInvalidArgument);
  auto huge = infer_status(OpKind::kResize, {}, DType::kF32, x,
                           {std::nullopt, std::nullopt, i64s({1, 1, big, big})});
  EXPECT_FALSE(huge.ok());
  auto linear_int = infer_status(OpKind::kResize, resize_attrs("linear", "half_pixel"),
                                 DType::kI32, x, {std::nullopt, f32s({1, 1, 2, 2})});
  EXPECT_EQ(linear_int.code(), StatusCode::kUnsupported);
}

TEST(Spatial, ResizeKeepsSymbolicDims) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), Dim(4), Dim(8), Dim()});
  Value* y = g.add_value("y");
  g.add_node(OpKind::kResize, "up", {x, nullptr, g.add_constant("s", f32s({1, 1, 2, 2}))}, {y});
  g.mark_output(y);
  ASSERT_TRUE(graph_infer_shapes(g).ok());
  ASSERT_TRUE(y->shape.has_value());
  const SymShape want{Dim::named("batch"), Dim(4), Dim(16), Dim()};
  EXPECT_EQ(sym_shape_to_string(*y->shape), sym_shape_to_string(want));
}

}  // namespace
}  // namespace kiln::testing
