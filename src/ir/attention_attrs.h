// kiln.Attention's attributes, named once for the passes that set them
// (fuse_attention, fuse_qkv), shape inference, which checks them, and the
// kernels that read them (kernels/ref and kernels/cpu):
//
//   scale             the scores' factor (default 1)
//   q_perm ... v_perm  Q, K and V are Transpose(x, perm) of inputs 0-2
//                     (identity when absent), read as
//                     [batch..., Sq, D], [batch..., D, Sk], [batch..., Sk, Dv]
//   q_slice ... v_slice  [axis, start, length]: x's dim `axis` cut to
//                     [start, start + length) before the perm (operands that
//                     share one projection, fuse_qkv)
//   out_perm          y = Transpose([batch..., Sq, Dv], out_perm)
//   upcast            1: the model needs its scores in f32 (SD 2.1's overflow
//                     in half precision): bf16 only where a precision
//                     policy names the node itself (passes/assign_precision)
#pragma once

#include <array>

namespace kiln::attention_attrs {

struct Operand {
  const char* name;   // as errors name it
  const char* perm;   // its perm attribute
  const char* slice;  // its slice attribute
};
inline constexpr std::array<Operand, 3> kOperands = {
    {{"Q", "q_perm", "q_slice"}, {"K", "k_perm", "k_slice"}, {"V", "v_perm", "v_slice"}}};
inline constexpr const char* kOutPerm = "out_perm";
inline constexpr const char* kScale = "scale";
inline constexpr const char* kUpcast = "upcast";

}  // namespace kiln::attention_attrs
