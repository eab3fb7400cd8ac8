// f32 matrix multiplication that allocates nothing: C = epilogue(A x B),
// with B packed ahead into column panels. Compiled for each x86 SIMD target
// Highway knows; the best one is picked at run time.
//
// Why kiln's own and not oneDNN's: every oneDNN 2.x primitive execution
// allocates (its argument map, its threading closures), and a compiled plan
// promises replays that never touch the heap. oneDNN still runs what this
// does not cover (grouped and 3-D convolutions, ConvTranspose, Einsum).
//
// B is packed into panels of panel_width() columns (two SIMD vectors), each
// panel k rows of panel_width() floats, the last one zero-padded:
//
//   std::vector<float> packed(gemm::packed_floats(k, n));
//   gemm::pack(b, n, 1, k, n, packed.data());            // B row-major [k, n]
//   gemm::multiply({m, n, k, a, k, packed.data(), c, n}, {}, parallel);
//
// A constant weight is packed once (a plan step keeps it); anything else is
// packed into kernel scratch on each call, as a convolution's im2col is.
//
// On CPUs with AVX512-BF16 the same product runs on bf16 operands with f32
// sums (vdpbf16ps: two products a lane per instruction, twice f32's rate):
// A bf16 row-major, B packed by pack_bf16() in pairs of K's rows, C and the
// epilogue f32. K must be even there: an odd K is padded with a zero column
// of A (pack_bf16 pads B's zero row itself).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/elementwise_simd.h"

namespace kiln::gemm {

// Columns per packed panel on this CPU.
int64_t panel_width();
// Floats that pack() writes for a k x n operand.
int64_t packed_floats(int64_t k, int64_t n);

// Packs B, element (t, j) at b[t * row_stride + j * col_stride] (any
// strides: a transposed B packs as fast as a plain one), times `scale`.
void pack(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* packed,
          float scale = 1.0f);

// Whether this CPU runs bf16 products (AVX512-BF16; checked once), and
// oneDNN is not capped below them (ONEDNN_MAX_CPU_ISA): that one variable
// then stands in for a CPU without them, kiln's kernels included, as
// ctest's without_avx512 does.
bool has_bf16_products();
// Whether bf16 products run on AMX tiles here (AMX-BF16, the kernel's
// permission for the tile state, oneDNN not capped below AMX; checked once):
// several times vdpbf16ps' rate, on the same packed operands.
bool has_amx_products();
// K rounded up to even: the depth of a bf16 product and of its A's rows.
inline int64_t bf16_depth(int64_t k) { return (k + 1) / 2 * 2; }
// The row stride (in bf16 values) that multiply() with F32Rows rounds A's
// rows to: at least bf16_depth(k), padded where rows are long so that the
// rows of a tile do not share L1 sets. A bf16 A given with it runs fastest.
int64_t bf16_row_stride(int64_t k);
// bf16 values that pack_bf16() writes for a k x n operand.
int64_t packed_bf16_count(int64_t k, int64_t n);
// pack() for bf16 products: B times `scale`, rounded to bf16 (to nearest
// even), each panel's rows in pairs (t, t + 1) interleaved column by column,
// an odd K's last row paired with zeros.
void pack_bf16(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, bf16* packed,
               float scale = 1.0f);

// What happens to each output after the products are summed, in this order:
// C's prior contents added, the bias added, the activation, times the scale,
// the residual (shaped and strided like C) added.
struct Epilogue {
  bool accumulate = false;
  const float* bias = nullptr;
  bool bias_per_row = false;  // bias[i] (a convolution's channels), else bias[j]
  bool activate = false;
  simd::UnaryF32 activation = simd::UnaryF32::kRelu;
  simd::UnaryF32Params params;
  // C[i, j] times scale[(first_row + i) / scale_rows * scale_stride + j]
  // (scale[j] when scale_rows is 0): a DiT block's adaLN-Zero gate, one row
  // for each batch entry's tokens.
  const float* scale = nullptr;
  int64_t scale_rows = 0, scale_stride = 0, first_row = 0;
  const float* residual = nullptr;
};

// C[i, j] = sum over t < k of A[i, t] * B[t, j], for i < m and j < n. A is
// row-major with row stride lda; B is packed (pack()); C has row stride ldc.
//
// With b_rows, B is read where it lies instead: row t starts at packed_b +
// b_rows[t] and holds n floats in segments of b_segment contiguous columns
// (b_segment_stride apart; one segment of n columns when b_segment is 0);
// segments are whole panels (n and b_segment multiples of panel_width()).
// A convolution's input patches are such rows of its (padded) input, one
// segment per output row, so they need no im2col copy.
//
// Bf16Problem: the same with bf16 A and B (pack_bf16), k even, and no
// gathered B.
template <typename T>
struct Product {
  int64_t m, n, k;
  const T* a;
  int64_t lda;
  const T* packed_b;
  float* c;
  int64_t ldc;
  const int64_t* b_rows = nullptr;
  int64_t b_segment = 0, b_segment_stride = 0;
};
using Problem = Product<float>;
using Bf16Problem = Product<bf16>;

// Where column j of a gathered B lies in its rows, from packed_b + b_rows[t].
inline int64_t gathered_column(const Problem& p, int64_t j) {
  return p.b_segment ? j / p.b_segment * p.b_segment_stride + j % p.b_segment : j;
}

// One thread's share: every row of A against columns [0, n) of packed B.
void block(const Problem& p, const Epilogue& e);
void block(const Bf16Problem& p, const Epilogue& e);  // only where has_bf16_products()
// The whole product, in tiles split across threads when `parallel`. A
// gathered B in segments goes to block() instead (multiply's tiles may
// start inside a segment).
void multiply(const Problem& p, const Epilogue& e, bool parallel);
void multiply(const Bf16Problem& p, const Epilogue& e, bool parallel);  // only where has_bf16_products()

// Rows [0, rows) of A (f32, k columns, row stride lda) rounded to bf16 as a
// bf16 product's A: rows of bf16_depth(k), an odd K's pad column zero. To
// nearest even; where bf16 products run, by vcvtneps2bf16, which turns
// denormals to 0 (a product's difference below 2^-126).
void round_rows(const float* a, int64_t lda, int64_t rows, int64_t k, bf16* out, bool parallel);

// A bf16 product's A given in f32, for multiply() to round: row-major, row
// stride lda, k columns (the problem's k is bf16_depth(k); its a is not
// read). The threads round it as their tiles reach it, where B is small
// enough (see gemm.cc), else in a pass over the whole of A first; scratch
// (f32_rows_scratch() bytes, for omp_get_max_threads() threads, 64-byte
// aligned) holds the rounded rows. Not to be called from several threads
// at once with one scratch.
struct F32Rows {
  const float* a;
  int64_t lda, k;
  void* scratch;
};
size_t f32_rows_scratch(int64_t m, int64_t n, int64_t k, int threads);  // C m x n
void multiply(const Bf16Problem& p, const F32Rows& a, const Epilogue& e, bool parallel);  // only where has_bf16_products()

}  // namespace kiln::gemm
