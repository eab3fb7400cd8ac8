// Shape inference for the elementwise ops (see ir/shape_inference.h).
//
// Binary, variadic and Where outputs take the numpy broadcast of their inputs;
// unary outputs keep their input's shape. Every op accepts 16-bit floats (the
// CPU kernels compute them in f32).
#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

constexpr std::initializer_list<DType> kFloats = {DType::kF32, DType::kF64, DType::kF16,
                                                  DType::kBF16};
constexpr std::initializer_list<DType> kSigned = {DType::kF32, DType::kF64, DType::kF16,
                                                  DType::kBF16, DType::kI64, DType::kI32,
                                                  DType::kI8};
constexpr std::initializer_list<DType> kNumeric = {DType::kF32, DType::kF64, DType::kF16,
                                                   DType::kBF16, DType::kI64, DType::kI32,
                                                   DType::kI8,  DType::kU8};
constexpr std::initializer_list<DType> kAny = {DType::kF32, DType::kF64, DType::kF16,
                                               DType::kBF16, DType::kI64, DType::kI32,
                                               DType::kI8,  DType::kU8,  DType::kBool};

// Every present input in [first, num_inputs) has input `first`'s dtype.
Status check_same_dtype(const InferContext& ctx, size_t first) {
  for (size_t i = first + 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype != ctx.input(first).dtype)
      return ctx.error("input {} has dtype {} but input {} has {}", i,
                       dtype_name(ctx.input(i).dtype), first, dtype_name(ctx.input(first).dtype));
  return ok_status();
}

Status infer_unary(InferContext& ctx, std::initializer_list<DType> allowed) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, allowed));
  set_output(ctx, 0, ctx.input(0).dtype, ctx.input(0).shape);
  return ok_status();
}

Status set_broadcast_output(InferContext& ctx, DType dtype) {
  KILN_ASSIGN_OR_RETURN(std::optional<SymShape> shape, broadcast_inputs(ctx));
  set_output(ctx, 0, dtype, std::move(shape));
  return ok_status();
}

// Same-dtype inputs broadcast together (Add..Max, comparisons); the op table
// bounds how many.
Status infer_broadcast(InferContext& ctx, std::initializer_list<DType> allowed,
                       std::optional<DType> out_dtype) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i)) return ctx.error("input {} is required", i);
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, allowed));
  KILN_RETURN_IF_ERROR(check_same_dtype(ctx, 0));
  return set_broadcast_output(ctx, out_dtype.value_or(ctx.input(0).dtype));
}

Status infer_arithmetic(InferContext& ctx) { return infer_broadcast(ctx, kNumeric, {}); }

// An optional scalar operand (Clip's min/max, Dropout's ratio): a known shape
// must hold exactly one element.
Status check_scalar_input(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i) || !ctx.input(i).shape) return ok_status();
  std::optional<int64_t> n = sym_numel(*ctx.input(i).shape);
  if (n && *n != 1) return ctx.error("input {} must be a scalar, got {} elements", i, *n);
  return ok_status();
}

// ONNX TensorProto.DataType values to kiln dtypes.
std::optional<DType> dtype_from_onnx_enum(int64_t t) {
  switch (t) {
    case 1: return DType::kF32;
    case 2: return DType::kU8;
    case 3: return DType::kI8;
    case 6: return DType::kI32;
    case 7: return DType::kI64;
    case 9: return DType::kBool;
    case 10: return DType::kF16;
    case 11: return DType::kF64;
    case 16: return DType::kBF16;
    default: return std::nullopt;
  }
}
constexpr int64_t kOnnxMaxDataType = 23;  // FLOAT4E2M1 in ONNX 1.17

}  // namespace

Status infer_Add(InferContext& ctx) { return infer_arithmetic(ctx); }
Status infer_Sub(InferContext& ctx) { return infer_arithmetic(ctx); }
Status infer_Mul(InferContext& ctx) { return infer_arithmetic(ctx); }
Status infer_Div(InferContext& ctx) { return infer_arithmetic(ctx); }
Status infer_Min(InferContext& ctx) { return infer_arithmetic(ctx); }
Status infer_Max(InferContext& ctx) { return infer_arithmetic(ctx); }

// The exponent may have another numeric dtype; the output has the base's.
Status infer_Pow(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kNumeric));
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 1, kNumeric));
  return set_broadcast_output(ctx, ctx.input(0).dtype);
}

Status infer_Equal(InferContext& ctx) { return infer_broadcast(ctx, kAny, DType::kBool); }
Status infer_Less(InferContext& ctx) { return infer_broadcast(ctx, kNumeric, DType::kBool); }
Status infer_Greater(InferContext& ctx) {
  return infer_broadcast(ctx, kNumeric, DType::kBool);
}

Status infer_Sqrt(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Reciprocal(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Neg(InferContext& ctx) { return infer_unary(ctx, kSigned); }
Status infer_Abs(InferContext& ctx) { return infer_unary(ctx, kNumeric); }
Status infer_Exp(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Log(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Erf(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Tanh(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Sigmoid(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Relu(InferContext& ctx) { return infer_unary(ctx, kSigned); }
Status infer_LeakyRelu(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Cos(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Sin(InferContext& ctx) { return infer_unary(ctx, kFloats); }
Status infer_Not(InferContext& ctx) { return infer_unary(ctx, {DType::kBool}); }
Status infer_Identity(InferContext& ctx) { return infer_unary(ctx, kAny); }

// Clip(x, min?, max?): the bounds are scalars of x's dtype (opset >= 11).
Status infer_Clip(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kNumeric));
  KILN_RETURN_IF_ERROR(check_same_dtype(ctx, 0));
  KILN_RETURN_IF_ERROR(check_scalar_input(ctx, 1));
  KILN_RETURN_IF_ERROR(check_scalar_input(ctx, 2));
  set_output(ctx, 0, ctx.input(0).dtype, ctx.input(0).shape);
  return ok_status();
}

Status infer_Where(InferContext& ctx) {
  if (ctx.input(0).dtype != DType::kBool)
    return ctx.error("condition must be bool, got {}", dtype_name(ctx.input(0).dtype));
  KILN_RETURN_IF_ERROR(check_same_dtype(ctx, 1));
  return set_broadcast_output(ctx, ctx.input(1).dtype);
}

Status infer_Cast(InferContext& ctx) {
  if (!ctx.attrs().has("to")) return ctx.error("attribute 'to' is required");
  int64_t to = ctx.attrs().get_int("to", 0);
  std::optional<DType> dtype = dtype_from_onnx_enum(to);
  if (!dtype) {
    if (to >= 1 && to <= kOnnxMaxDataType)
      return ctx.unsupported_error("casting to ONNX element type {} is not supported", to);
    return ctx.error("attribute 'to' = {} is not an ONNX element type", to);
  }
  set_output(ctx, 0, *dtype, ctx.input(0).shape);
  return ok_status();
}

// Inference only: the output is the input, the optional mask all true.
Status infer_Dropout(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloats));
  KILN_RETURN_IF_ERROR(check_scalar_input(ctx, 1));
  KILN_RETURN_IF_ERROR(check_scalar_input(ctx, 2));
  if (ctx.has_input(2)) {
    if (ctx.input(2).dtype != DType::kBool)
      return ctx.error("training_mode must be bool, got {}", dtype_name(ctx.input(2).dtype));
    const std::optional<Tensor>& mode = ctx.input(2).value;
    if (mode && mode->numel() == 1 && mode->element_as_int(0) != 0)
      return ctx.unsupported_error("training mode is not supported");
  }
  set_output(ctx, 0, ctx.input(0).dtype, ctx.input(0).shape);
  if (ctx.num_outputs() > 1) set_output(ctx, 1, DType::kBool, ctx.input(0).shape);
  return ok_status();
}

}  // namespace kiln
