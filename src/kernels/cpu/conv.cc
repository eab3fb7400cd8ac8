// CPU kernels for Conv, ConvTranspose and kiln.Conv (see kernels/kernel.h),
// f32.
//
// Ungrouped convolutions (1-D to 3-D) run on kiln's own GEMM (gemm.h), which
// allocates nothing: by Winograd's transforms where the winograd_conv pass
// marked them and they pay (winograd.h); else the input patches packed
// (im2col) chunk by chunk into scratch (with stride 1 and output rows of
// whole GEMM panels, the GEMM reads them in place from a zero-padded copy of
// the input instead; with fewer output pixels an image than a GEMM panel is
// wide, every image's patches are gathered as the rows of one product
// against its weight packed once). Grouped convolutions and ConvTranspose
// run through oneDNN (dnnl_replay.h).
//
// In bf16 (passes' assign_precision), the GEMM's convolutions run on its
// bf16 products where bf16_gemm() picks kiln (the weight rounded once, each
// call's patches packed into bf16 panels), on its f32 products with the
// input and weight rounded through bf16 on a CPU without AVX512-BF16, and on
// oneDNN's bf16 convolution otherwise (see BlockedBf16Conv). Convs with
// fewer than 32 output channels compute in f32.
#include <oneapi/dnnl/dnnl.hpp>

#include <omp.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ir/infer/linalg.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/dnnl_replay.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/products.h"
#include "kernels/cpu/winograd.h"
#include "kernels/kernel.h"
#include "passes/pass.h"

namespace kiln {

namespace {

using namespace linalg;

// y[n, c, ...] = bias[c], or 0 without a bias.
void fill_bias(TensorView& y, const TensorView* bias) {
  if (!bias) return fill_zero(y);
  const int64_t channels = y.shape[1], plane = y.numel() / (y.shape[0] * channels);
  float* py = y.as<float>();
  parallel_for(y.numel() / plane, y.numel() > kParallelWork, [&](int64_t row) {
    std::fill_n(py + row * plane, plane, bias->as<float>()[row % channels]);
  });
}

// An ungrouped convolution's sizes (1-D as height 1, 1-D and 2-D as depth
// 1), worked out once: a plan step keeps them as its state, so replays read
// no attributes.
struct ConvGeometry final : KernelState {
  int64_t batch = 0, in_channels = 0, depth = 1, height = 0, width = 0;
  int64_t out_channels = 0, out_depth = 1, out_height = 0, out_width = 0;
  int64_t kernel_d = 1, kernel_h = 1, kernel_w = 1, stride_d = 1, stride_h = 1, stride_w = 1;
  int64_t pad_d = 0, pad_h = 0, pad_w = 0, dilation_d = 1, dilation_h = 1, dilation_w = 1;
  // Fewer output pixels an image than a GEMM panel is wide (an SD UNet's
  // 4x4 level): every image's pixels together are the GEMM's rows, against
  // the weight packed as B, instead of a product per image that leaves most
  // of each panel empty and reads the whole weight once per image.
  bool pixels_as_rows = false;
  // Stride 1 and whole GEMM panels in an output row (VAE and UNet convs at
  // 32 pixels wide and up): the GEMM reads each patch row where it lies in
  // one zero-padded copy of the input (gemm::Problem::b_rows), not from an
  // im2col copy, which writes and reads back 9 times the input for a 3x3
  // kernel (faster on SD's VAE and UNet convs: docs/performance.md#convolutions).
  bool rows_in_place = false;
  // 3x3, stride 1, enough channels and tiles: Winograd's F(m x m, 3x3)
  // (winograd.h), its m here (2 or 4; 0: not Winograd).
  int64_t winograd_tile = 0;
  // Its products in bf16, on kiln's GEMM (where bf16_gemm() says so;
  // elsewhere bf16 convolutions run on oneDNN).
  bool bf16_products = false;
  // Its products in f32 on the input and weight rounded through bf16
  // (Bf16Gemm::kKilnF32).
  bool rounds_operands = false;
  // The weight as the conv reads it, made once in a plan (own_conv_weight):
  // packed as B (pixels_as_rows), Winograd's transformed filters, or rows
  // rounded to bf16 (or through bf16: rounds_operands).
  PackedOperand<float> weight;
  PackedOperand<bf16> bf16_weight;
  int64_t patch() const { return in_channels * kernel_d * kernel_h * kernel_w; }  // GEMM's K
  int64_t pixels() const { return out_depth * out_height * out_width; }
  int64_t image_floats() const { return in_channels * depth * height * width; }  // one image of the input
  size_t owned_bytes() const override { return weight.owned_bytes() + bf16_weight.owned_bytes(); }
  bool copies_input(size_t index) const override {
    return (weight.data && weight.copies_input(index)) || (bf16_weight.data && bf16_weight.copies_input(index));
  }
};

const ConvGeometry* geometry_of(const KernelContext& ctx) {
  return ctx.state ? dynamic_cast<const ConvGeometry*>(ctx.state->get()) : nullptr;
}

// A convolution's input and weight as its f32 products read them: x and w
// themselves, or, where g.rounds_operands, rounded through bf16: x into
// scratch on every call, w as the plan's copy holds it (own_conv_weight;
// Winograd's and pixels_as_rows' read that copy, not w) or into scratch.
struct ConvOperands {
  const float *x, *w;
};
Result<ConvOperands> conv_operands(KernelContext& ctx, const ConvGeometry& g) {
  ConvOperands in{ctx.input(0)->as<float>(), ctx.input(1)->as<float>()};
  if (!g.rounds_operands) return in;
  KILN_ASSIGN_OR_RETURN(in.x, rounded_f32_copy(ctx, in.x, ctx.input(0)->numel()));
  if (!g.weight.data) {
    KILN_ASSIGN_OR_RETURN(in.w, rounded_f32_copy(ctx, in.w, ctx.input(1)->numel()));
  } else if (!g.winograd_tile && !g.pixels_as_rows) {
    in.w = g.weight.data;
  }
  return in;
}

// Packs the input patches of output pixels [p0, p0 + count) of one image
// (im2col) straight into GEMM panels: row t = (channel, kernel frame, kernel
// row, kernel column) of B holds, for each pixel, the input value under that
// tap, 0 in the padding. Only channels [c_begin, c_end): the rows of the
// others are left to another thread. Pixels of one output row read
// consecutive inputs (with stride 1, a plain copy).
void pack_patches(const ConvGeometry& g, const float* x, int64_t p0, int64_t count, int64_t c_begin,
                  int64_t c_end, float* panels) {
  const int64_t w = gemm::panel_width(), taps = g.kernel_d * g.kernel_h * g.kernel_w;
  const int64_t plane_floats = g.height * g.width;
  for (int64_t q0 = p0; q0 < p0 + count; q0 += w, panels += g.patch() * w) {
    const int64_t cols = std::min(w, p0 + count - q0);
    const int64_t first_row = q0 / g.out_width, first_ow = q0 % g.out_width;  // row: (output frame, output row)
    float* packed = panels + c_begin * taps * w;
    for (int64_t c = c_begin; c < c_end; ++c)
      for (int64_t f = 0; f < g.kernel_d; ++f)
        for (int64_t r = 0; r < g.kernel_h; ++r)
          for (int64_t s = 0; s < g.kernel_w; ++s, packed += w) {
            // Runs of pixels along one output row (no division in this loop
            // with stride 1 and one frame: it runs for every tap of every panel).
            int64_t row = first_row, ow = first_ow;
            for (int64_t j = 0; j < cols; ow = 0, ++row) {
              const int64_t run = std::min(cols - j, g.out_width - ow);
              const int64_t od = g.out_depth == 1 ? 0 : row / g.out_height, oh = row - od * g.out_height;
              const int64_t id = od * g.stride_d - g.pad_d + f * g.dilation_d;
              const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dilation_h;
              const int64_t iw = ow * g.stride_w - g.pad_w + s * g.dilation_w;
              float* out = packed + j;
              if (ih < 0 || ih >= g.height || id < 0 || id >= g.depth) {
                std::fill_n(out, run, 0.0f);
              } else {
                // Pixels [lo, hi) of the run read inside the row; the rest is padding.
                int64_t lo, hi;
                if (g.stride_w == 1) {
                  lo = std::clamp<int64_t>(-iw, 0, run);
                  hi = std::clamp<int64_t>(g.width - iw, lo, run);
                } else {
                  lo = std::clamp<int64_t>((-iw + g.stride_w - 1) / g.stride_w, 0, run);
                  hi = std::clamp<int64_t>((g.width - iw + g.stride_w - 1) / g.stride_w, lo, run);
                }
                const float* in = x + (c * g.depth + id) * plane_floats + ih * g.width + iw;
                std::fill(out, out + lo, 0.0f);
                if (g.stride_w == 1) std::copy(in + lo, in + hi, out + lo);
                else
                  for (int64_t i = lo; i < hi; ++i) out[i] = in[i * g.stride_w];
                std::fill(out + hi, out + run, 0.0f);
              }
              j += run;
            }
            std::fill(packed + cols, packed + w, 0.0f);
          }
  }
}

// A convolution's output channels in groups, one task per group and chunk of
// pixels: one group while the pixel tasks keep every thread busy, else up to
// one per thread (of 16 channels or more).
struct ChannelGroups {
  int64_t count = 1, size = 0;
  ChannelGroups(int64_t pixel_tasks, int64_t channels) {
    const int64_t threads = thread_slots();
    if (pixel_tasks < threads) count = std::min(threads, (channels + 15) / 16);
    size = (channels + count - 1) / count;
  }
};

// The epilogue of the task writing output channels from c0 on at y + y_offset.
gemm::Epilogue epilogue_at(gemm::Epilogue e, int64_t c0, int64_t y_offset) {
  if (e.bias) e.bias += c0;
  if (e.residual) e.residual += y_offset;
  return e;
}

// The f32 panels pack_patches wrote for `count` pixels (K x count) packed
// again for bf16 products (gemm::pack_bf16): panel by panel.
void panels_to_bf16(const float* panels, int64_t k, int64_t count, bf16* packed) {
  const int64_t w = gemm::panel_width();
  for (int64_t q = 0; q < count; q += w, panels += k * w, packed += gemm::packed_bf16_count(k, w))
    gemm::pack_bf16(panels, w, 1, k, std::min(w, count - q), packed);
}

// Y[image] = W [OC, K] x patches [K, pixels], in tasks of one image, one
// chunk of pixels (packed into the thread's scratch) and one group of output
// channels; the bias (per channel), activation and residual ride along.
// With bf16 products (g.bf16_products), W is rows of gemm::bf16_depth(K)
// rounded to bf16 (g.bf16_weight in a plan, else rounded on this call) and
// the patches are packed again from f32 into bf16 panels.
Status conv_gemm(KernelContext& ctx, const ConvGeometry& g) {
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const float *x = in.x, *w = in.w;
  float* y = ctx.output(0)->as<float>();
  const int64_t k = g.patch(), pixels = g.pixels(), oc = g.out_channels, depth = gemm::bf16_depth(k);
  const int64_t chunk = 4 * gemm::panel_width();
  const int64_t chunks = (pixels + chunk - 1) / chunk, pixel_tasks = g.batch * chunks;
  const int64_t threads = thread_slots();
  const ChannelGroups groups(pixel_tasks, oc);  // fewer chunks than threads: the channels split too
  const int64_t channel_groups = groups.count, group_size = groups.size;
  // Channel groups share their chunk's patches, packed first, split by input
  // channel (there are fewer chunks than threads); otherwise each task packs
  // its own, in its thread's slot.
  const bool shared = channel_groups > 1;
  const int64_t buffers = shared ? pixel_tasks : threads;
  // A buffer's floats, and its bf16 values, from one to the next.
  const int64_t patch_floats = gemm::packed_floats(k, chunk), patch_bf16 = gemm::packed_bf16_count(k, chunk);
  const int64_t chunk_floats = shared ? patch_floats : thread_slot<float>(patch_floats);
  const int64_t chunk_bf16 = shared ? patch_bf16 : thread_slot<bf16>(patch_bf16);
  KILN_ASSIGN_OR_RETURN(float* scratch, scratch_floats(ctx, buffers * chunk_floats, "input patches"));
  const bf16* w_bf16 = g.bf16_weight.data;
  bf16* patches_bf16 = nullptr;
  if (g.bf16_products) {
    KILN_ASSIGN_OR_RETURN(void* p, scratch_bytes(ctx, size_t(buffers * chunk_bf16) * sizeof(bf16), "bf16 patches"));
    patches_bf16 = static_cast<bf16*>(p);
    if (!w_bf16) {
      KILN_ASSIGN_OR_RETURN(void* rows, scratch_bytes(ctx, size_t(oc * depth) * sizeof(bf16), "the bf16 weight"));
      gemm::round_rows(w, k, oc, k, static_cast<bf16*>(rows), true);
      w_bf16 = static_cast<const bf16*>(rows);
    }
  }
  const gemm::Epilogue epilogue = fused_epilogue(ctx, true);
  auto patches_of = [&](int64_t pixel_task, int64_t c_begin, int64_t c_end, float* packed) {
    const int64_t image = pixel_task / chunks, p0 = pixel_task % chunks * chunk;
    pack_patches(g, x + image * g.image_floats(), p0, std::min(chunk, pixels - p0), c_begin, c_end, packed);
  };
  auto count_of = [&](int64_t pixel_task) { return std::min(chunk, pixels - pixel_task % chunks * chunk); };
  if (shared) {
    for (int64_t t = 0; t < pixel_tasks; ++t)
      parallel_ranges(g.in_channels, true, [&](int64_t c_begin, int64_t c_end) {
        patches_of(t, c_begin, c_end, scratch + t * chunk_floats);
      });
    if (g.bf16_products)
      parallel_for(pixel_tasks, true, [&](int64_t t) {
        panels_to_bf16(scratch + t * chunk_floats, k, count_of(t), patches_bf16 + t * chunk_bf16);
      });
  }
  const int64_t work = g.batch * oc * pixels * k;
  parallel_for(pixel_tasks * channel_groups, work > kParallelWork, [&](int64_t task) {
    const int64_t pixel_task = task / channel_groups;
    const int64_t image = pixel_task / chunks, p0 = pixel_task % chunks * chunk, count = count_of(pixel_task);
    const int64_t c0 = task % channel_groups * group_size, channels = std::min(group_size, oc - c0);
    if (channels <= 0) return;
    const int64_t buffer = shared ? pixel_task : omp_get_thread_num();
    float* packed = scratch + buffer * chunk_floats;
    const int64_t y_offset = (image * oc + c0) * pixels + p0;
    const gemm::Epilogue e = epilogue_at(epilogue, c0, y_offset);
    if (!shared) patches_of(pixel_task, 0, g.in_channels, packed);
    if (!g.bf16_products) return gemm::block({channels, count, k, w + c0 * k, k, packed, y + y_offset, pixels}, e);
    bf16* packed_bf16 = patches_bf16 + buffer * chunk_bf16;
    if (!shared) panels_to_bf16(packed, k, count, packed_bf16);
    gemm::block(gemm::Bf16Problem{channels, count, depth, w_bf16 + c0 * depth, depth, packed_bf16, y + y_offset,
                                  pixels},
                e);
  });
  return ok_status();
}

// Input patches of output pixel `row` (of every image's, in order) as one
// row of K: (channel, kernel frame, kernel row, kernel column), 0 in the
// padding.
void gather_patch_row(const ConvGeometry& g, const float* x, int64_t row, float* out) {
  const int64_t image = row / g.pixels(), pixel = row % g.pixels();
  const int64_t od = pixel / (g.out_height * g.out_width), oh = pixel / g.out_width % g.out_height;
  const int64_t ow = pixel % g.out_width;
  for (int64_t c = 0; c < g.in_channels; ++c)
    for (int64_t f = 0; f < g.kernel_d; ++f) {
      const int64_t id = od * g.stride_d - g.pad_d + f * g.dilation_d;
      const int64_t frame = (image * g.in_channels + c) * g.depth + id;
      for (int64_t r = 0; r < g.kernel_h; ++r) {
        const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dilation_h;
        for (int64_t s = 0; s < g.kernel_w; ++s) {
          const int64_t iw = ow * g.stride_w - g.pad_w + s * g.dilation_w;
          const bool inside = id >= 0 && id < g.depth && ih >= 0 && ih < g.height && iw >= 0 && iw < g.width;
          *out++ = inside ? x[(frame * g.height + ih) * g.width + iw] : 0.0f;
        }
      }
    }
}

// pixels_as_rows: patches [images x pixels, K] gathered into scratch, times
// the weight packed as B ([K, OC]: the step's copy, or packed into scratch)
// with the bias and activation, then transposed into Y [image, OC, pixels]
// with the residual added on the way.
Status conv_pixel_rows(KernelContext& ctx, const ConvGeometry& g) {
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const float *x = in.x, *w = in.w;
  float* y = ctx.output(0)->as<float>();
  const int64_t k = g.patch(), pixels = g.pixels(), rows = g.batch * pixels, oc = g.out_channels;
  KILN_ASSIGN_OR_RETURN(float* patches, scratch_floats(ctx, rows * k, "input patches"));
  KILN_ASSIGN_OR_RETURN(float* product, scratch_floats(ctx, rows * oc, "the product"));
  parallel_for(rows, rows * k > kParallelWork, [&](int64_t row) { gather_patch_row(g, x, row, patches + row * k); });
  gemm::Epilogue e = fused_epilogue(ctx, false);
  const float* residual = std::exchange(e.residual, nullptr);  // shaped like Y, not like the product
  // B[t, o] = W[o, t], packed: by the plan, else here.
  if (g.bf16_products) {
    const bf16* packed = g.bf16_weight.data;
    if (!packed) {
      KILN_ASSIGN_OR_RETURN(void* p, scratch_bytes(ctx, size_t(gemm::packed_bf16_count(k, oc)) * sizeof(bf16),
                                                   "the packed weight"));
      gemm::pack_bf16(w, 1, k, k, oc, static_cast<bf16*>(p));
      packed = static_cast<const bf16*>(p);
    }
    const int64_t depth = gemm::bf16_depth(k);
    KILN_ASSIGN_OR_RETURN(void* a, scratch_bytes(ctx, size_t(rows * depth) * sizeof(bf16), "bf16 patches"));
    gemm::round_rows(patches, k, rows, k, static_cast<bf16*>(a), true);
    gemm::multiply(gemm::Bf16Problem{rows, oc, depth, static_cast<const bf16*>(a), depth, packed, product, oc}, e,
                   true);
  } else {
    const float* packed = g.weight.data;
    if (!packed) {
      KILN_ASSIGN_OR_RETURN(float* p, scratch_floats(ctx, gemm::packed_floats(k, oc), "the packed weight"));
      gemm::pack(w, 1, k, k, oc, p);
      packed = p;
    }
    gemm::multiply({rows, oc, k, patches, k, packed, product, oc}, e, true);
  }
  parallel_for(g.batch * oc, rows * oc > kParallelWork, [&](int64_t plane) {
    const int64_t image = plane / oc, channel = plane % oc;
    const float* from = product + image * pixels * oc + channel;
    float* to = y + plane * pixels;
    const float* add = residual ? residual + plane * pixels : nullptr;
    for (int64_t q = 0; q < pixels; ++q) to[q] = from[q * oc] + (add ? add[q] : 0.0f);
  });
  return ok_status();
}

// rows_in_place, in tasks of one image, a band of output rows and a group
// of output channels: the band's input rows (and the kernel's reach below
// them) are copied with their zero padding into the thread's scratch, then
// each output row is Y[image, :, row] = W [OC, K] x B, where B's row
// (channel, kernel row r, kernel column s) is the output row's width of
// padded inputs from padded row `row + r * dilation`, column s * dilation.
Status conv_rows_in_place(KernelContext& ctx, const ConvGeometry& g) {
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const float *x = in.x, *w = in.w;
  float* y = ctx.output(0)->as<float>();
  const int64_t k = g.patch(), pixels = g.pixels(), oc = g.out_channels, threads = thread_slots();
  const int64_t reach = (g.kernel_h - 1) * g.dilation_h, padded_w = g.out_width + (g.kernel_w - 1) * g.dilation_w;
  // Padded rows laid out [row, channel, column]: one output row's patches
  // lie in kernel_h runs of contiguous memory. (Laid out [channel, row,
  // column], the reads hop a whole plane per channel and the convs ran
  // slower than with im2col: docs/performance.md#convolutions.)
  const int64_t row_stride = g.in_channels * padded_w;
  // Bands of up to 8 rows (a few tasks per thread): the copy is the band's
  // rows and `reach` more, and the scratch a band per thread, not the image.
  const int64_t band = std::clamp<int64_t>(g.batch * g.out_height / (4 * threads), 1, 8);
  const int64_t bands = (g.out_height + band - 1) / band, band_floats = thread_slot<float>((band + reach) * row_stride);
  KILN_ASSIGN_OR_RETURN(float* scratch, scratch_floats(ctx, threads * band_floats, "the padded input rows"));
  KILN_ASSIGN_OR_RETURN(void* offsets, scratch_bytes(ctx, size_t(k) * sizeof(int64_t), "the patch row offsets"));
  auto* b_rows = static_cast<int64_t*>(offsets);
  for (int64_t c = 0, t = 0; c < g.in_channels; ++c)
    for (int64_t r = 0; r < g.kernel_h; ++r)
      for (int64_t s = 0; s < g.kernel_w; ++s)
        b_rows[t++] = r * g.dilation_h * row_stride + c * padded_w + s * g.dilation_w;
  const int64_t band_tasks = g.batch * bands;
  const ChannelGroups groups(band_tasks, oc);
  const int64_t channel_groups = groups.count, group_size = groups.size;
  const gemm::Epilogue epilogue = fused_epilogue(ctx, true);
  parallel_for(band_tasks * channel_groups, g.batch * oc * pixels * k > kParallelWork, [&](int64_t task) {
    const int64_t image = task / channel_groups / bands, row0 = task / channel_groups % bands * band;
    const int64_t rows = std::min(band, g.out_height - row0);
    const int64_t c0 = task % channel_groups * group_size, channels = std::min(group_size, oc - c0);
    if (channels <= 0) return;
    float* padded = scratch + omp_get_thread_num() * band_floats;
    for (int64_t p = 0; p < rows + reach; ++p) {  // padded row row0 + p is input row row0 + p - pad_h
      float* to = padded + p * row_stride;
      const int64_t i = row0 + p - g.pad_h;
      if (i < 0 || i >= g.height) {
        std::fill_n(to, row_stride, 0.0f);
        continue;
      }
      for (int64_t c = 0; c < g.in_channels; ++c, to += padded_w) {
        const float* from = x + ((image * g.in_channels + c) * g.height + i) * g.width;
        std::fill_n(to, g.pad_w, 0.0f);
        std::copy_n(from, g.width, to + g.pad_w);
        std::fill(to + g.pad_w + g.width, to + padded_w, 0.0f);
      }
    }
    // The band's output rows are one product: B's columns are the rows'
    // pixels (a segment per row, row_stride apart in the padded copy), so
    // each slice of the weight is read once for the whole band.
    const int64_t y_offset = (image * oc + c0) * pixels + row0 * g.out_width;
    gemm::block({channels, rows * g.out_width, k, w + c0 * k, k, padded, y + y_offset, pixels, b_rows,
                 g.out_width, row_stride},
                epilogue_at(epilogue, c0, y_offset));
  });
  return ok_status();
}

winograd::Conv winograd_conv(const ConvGeometry& g) {
  return {g.batch, g.in_channels, g.height, g.width, g.out_channels, g.out_height, g.out_width, g.pad_h, g.pad_w,
          g.winograd_tile};
}

// Winograd's filters from w, into `owner`: a plan step's copy of input 1.
template <typename T>
Status own_winograd_filters(const KernelContext& ctx, const ConvGeometry& g, const float* w,
                            PackedOperand<T>& owner) {
  const winograd::Conv c = winograd_conv(g);
  KILN_RETURN_IF_ERROR(allocate_owned(ctx, owner, 1, winograd::filter_count(c, std::is_same_v<T, bf16>)));
  winograd::transform_filters(c, w, owner.data, omp_get_max_threads());
  return ok_status();
}

// Winograd with filters of T: those the plan kept (`kept`), else transformed
// into scratch on this call.
template <typename T>
Status conv_winograd_as(KernelContext& ctx, const ConvGeometry& g, const T* kept) {
  const winograd::Conv c = winograd_conv(g);
  const int threads = omp_get_max_threads();
  constexpr bool bf16 = std::is_same_v<T, kiln::bf16>;
  KILN_ASSIGN_OR_RETURN(const ConvOperands in, conv_operands(ctx, g));
  const T* filters = kept;
  if (!filters) {
    KILN_ASSIGN_OR_RETURN(void* u,
                          scratch_bytes(ctx, winograd::filter_count(c, bf16) * sizeof(T), "Winograd's filters"));
    winograd::transform_filters(c, in.w, static_cast<T*>(u), threads);
    filters = static_cast<const T*>(u);
  }
  KILN_ASSIGN_OR_RETURN(void* scratch,
                        scratch_bytes(ctx, winograd::scratch_bytes(c, threads, bf16), "Winograd's tiles"));
  const TensorView *bias = ctx.input(2), *residual = ctx.node->op == OpKind::kFusedConv ? ctx.input(3) : nullptr;
  winograd::convolve(c, in.x, filters, bias ? bias->as<float>() : nullptr,
                     residual ? residual->as<float>() : nullptr, ctx.output(0)->as<float>(), scratch, threads);
  return ok_status();
}

Status conv_winograd(KernelContext& ctx, const ConvGeometry& g) {
  return g.bf16_products ? conv_winograd_as<bf16>(ctx, g, g.bf16_weight.data)
                         : conv_winograd_as<float>(ctx, g, g.weight.data);
}

// The tile a convolution marked by the winograd_conv pass computes with (0:
// direct): winograd::best_tile's, or the attribute's when it names one
// (winograd = 2 or 4: benchmarks and tests comparing the two).
int64_t winograd_tile(const KernelContext& ctx, const winograd::Conv& c, bool bf16) {
  const int64_t marked = ctx.attrs().get_int("winograd", 0);
  if (marked == 2 || marked == 4) return marked;
  return winograd::best_tile(c, packs_weight(ctx, 1), bf16);
}

// A plan step's copy of its constant weight w as its path reads it:
// Winograd's transformed filters; packed as B (pixels_as_rows); else, for
// bf16 products, its rows rounded to bf16 (f32 products read w itself, or
// its rows rounded through bf16 where g.rounds_operands). Where
// g.rounds_operands, the filters and the packed B are made from w rounded.
Status own_conv_weight(const KernelContext& ctx, ConvGeometry& g, const float* w) {
  const int64_t k = g.patch();
  std::vector<float> rounded;  // a plan's recording call only
  if (g.rounds_operands) {
    const bool rows = !g.winograd_tile && !g.pixels_as_rows;
    if (rows) KILN_RETURN_IF_ERROR(allocate_owned(ctx, g.weight, 1, size_t(g.out_channels * k)));
    else rounded.resize(size_t(g.out_channels * k));
    float* to = rows ? g.weight.data : rounded.data();
    round_through_bf16(w, to, g.out_channels * k, true);
    if (rows) return ok_status();
    w = to;
  }
  if (g.winograd_tile)
    return g.bf16_products ? own_winograd_filters(ctx, g, w, g.bf16_weight) : own_winograd_filters(ctx, g, w, g.weight);
  if (g.pixels_as_rows)
    return g.bf16_products ? pack_owned(ctx, g.bf16_weight, 1, w, 1, k, k, g.out_channels)
                           : pack_owned(ctx, g.weight, 1, w, 1, k, k, g.out_channels);
  if (!g.bf16_products) return ok_status();
  KILN_RETURN_IF_ERROR(allocate_owned(ctx, g.bf16_weight, 1, size_t(g.out_channels * gemm::bf16_depth(k))));
  gemm::round_rows(w, k, g.out_channels, k, g.bf16_weight.data, true);
  return ok_status();
}

Status conv_gemm_or_rows(KernelContext& ctx, const ConvGeometry& g) {
  if (g.winograd_tile) return conv_winograd(ctx, g);
  if (g.pixels_as_rows) return conv_pixel_rows(ctx, g);
  return g.rows_in_place ? conv_rows_in_place(ctx, g) : conv_gemm(ctx, g);
}

// Below this many output channels (per group), a convolution marked bf16
// computes in f32: oneDNN's bf16 kernels leave most of their tiles empty and
// kiln's f32 GEMM is faster (measurements: docs/performance.md#convolutions).
// Every CPU computes these nodes in f32, so results do not depend on the
// machine.
constexpr int64_t kBf16MinOutChannels = 32;

// A convolution computing in bf16 that kiln's GEMM does not take (grouped
// ones, and every one where bf16_gemm() picks oneDNN) runs on
// oneDNN, on the layouts it picks: over plain NCHW tensors it falls back to
// im2col and a GEMM (x64:gemm:jit), in its blocked layouts it runs its
// faster direct kernels (brgconv; docs/performance.md#convolutions). Each
// call reorders (and rounds) the input into the conv's layout and the output back into Y;
// a plan step reorders a constant weight once and keeps it. The activation
// is a post-op of the conv; the residual is added by the output reorder (a
// sum onto Y, which first holds the residual).
struct BlockedBf16Conv final : KernelState {
  dnnl::reorder to_blocked, weight_to_blocked, to_plain;
  dnnl::convolution_forward conv;
  memory x, x_blocked, weight, weight_blocked, bias, y_blocked, y, scratchpad;
  bool owns_weight = false;  // weight_blocked is the step's own copy of input 1
  size_t owned_bytes() const override { return owns_weight ? weight_blocked.get_desc().get_size() : 0; }
  bool copies_input(size_t index) const override { return owns_weight && index == 1; }
};

// Scratch for a oneDNN memory object's data (null when it has none).
Result<void*> scratch_for(KernelContext& ctx, const memory& mem, std::string_view what) {
  const size_t bytes = mem.get_desc().get_size();
  if (!bytes) return nullptr;
  return scratch_bytes(ctx, bytes, what);
}

// One call: every buffer re-pointed at this call's tensors and scratch.
Status run_blocked_bf16_conv(KernelContext& ctx, const BlockedBf16Conv& c) {
  const TensorView* residual = ctx.input(3);
  TensorView& y = *ctx.output(0);
  KILN_RETURN_IF_ERROR(point(ctx, c.x, ctx.input(0)->data));
  KILN_RETURN_IF_ERROR(point(ctx, c.y, y.data));
  if (ctx.input(2)) KILN_RETURN_IF_ERROR(point(ctx, c.bias, ctx.input(2)->data));
  KILN_ASSIGN_OR_RETURN(void* x_blocked, scratch_for(ctx, c.x_blocked, "the blocked input"));
  KILN_ASSIGN_OR_RETURN(void* y_blocked, scratch_for(ctx, c.y_blocked, "the blocked output"));
  KILN_ASSIGN_OR_RETURN(void* pad, scratch_for(ctx, c.scratchpad, "oneDNN's scratchpad"));
  KILN_RETURN_IF_ERROR(point(ctx, c.x_blocked, x_blocked));
  KILN_RETURN_IF_ERROR(point(ctx, c.y_blocked, y_blocked));
  KILN_RETURN_IF_ERROR(point(ctx, c.scratchpad, pad));
  dnnl::stream& stream = ctx.cpu->stream;
  c.to_blocked.execute(stream, {{DNNL_ARG_FROM, c.x}, {DNNL_ARG_TO, c.x_blocked}});
  if (!c.owns_weight) {
    KILN_ASSIGN_OR_RETURN(void* w, scratch_for(ctx, c.weight_blocked, "the blocked weight"));
    KILN_RETURN_IF_ERROR(point(ctx, c.weight, ctx.input(1)->data));
    KILN_RETURN_IF_ERROR(point(ctx, c.weight_blocked, w));
    c.weight_to_blocked.execute(stream, {{DNNL_ARG_FROM, c.weight}, {DNNL_ARG_TO, c.weight_blocked}});
  }
  Args args{{DNNL_ARG_SRC, c.x_blocked}, {DNNL_ARG_WEIGHTS, c.weight_blocked}, {DNNL_ARG_DST, c.y_blocked},
            {DNNL_ARG_SCRATCHPAD, c.scratchpad}};
  if (ctx.input(2)) args.emplace(DNNL_ARG_BIAS, c.bias);
  c.conv.execute(stream, args);
  if (residual && residual->data != y.data) {
    stream.wait();
    std::memcpy(y.data, residual->data, y.nbytes());
  }
  c.to_plain.execute(stream, {{DNNL_ARG_FROM, c.y_blocked}, {DNNL_ARG_TO, c.y}});
  stream.wait();
  return ok_status();
}

// Builds the conv (and its reorders) over oneDNN's chosen layouts; a plan
// step keeps it, with a constant weight reordered once.
Status blocked_bf16_conv(KernelContext& ctx, const memory::desc& wd, const memory::dims& strides,
                         const memory::dims& dilates, const memory::dims& pad_l, const memory::dims& pad_r) {
  const TensorView &x = *ctx.input(0), &y = *ctx.output(0);
  const TensorView* bias = ctx.input(2);
  using dt = memory::data_type;
  const dnnl::engine& engine = ctx.cpu->engine;
  const memory::desc xd = plain_desc(x.shape), yd = plain_desc(y.shape);
  auto any = [](const memory::desc& d, dt type) { return memory::desc(d.dims(), type, memory::format_tag::any); };
  const memory::desc bd = bias ? plain_desc(bias->shape) : memory::desc();
  const bool fused = ctx.node->op == OpKind::kFusedConv;  // its activation a post-op, its residual the sum below
  const dnnl::primitive_attr attr = fused ? epilogue_attr(ctx, yd, false) : user_scratchpad_attr();
  const dnnl::convolution_forward::primitive_desc pd(
      {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, any(xd, dt::bf16), any(wd, dt::bf16),
       bd, any(yd, dt::f32), strides, dilates, pad_l, pad_r},
      attr, engine);
  auto c = std::make_unique<BlockedBf16Conv>();
  c->conv = dnnl::convolution_forward(pd);
  c->x = memory(xd, engine, DNNL_MEMORY_NONE);
  c->x_blocked = memory(pd.src_desc(), engine, DNNL_MEMORY_NONE);
  c->y_blocked = memory(pd.dst_desc(), engine, DNNL_MEMORY_NONE);
  c->y = memory(yd, engine, DNNL_MEMORY_NONE);
  c->weight = memory(wd, engine, DNNL_MEMORY_NONE);
  c->scratchpad = memory(pd.scratchpad_desc(), engine, DNNL_MEMORY_NONE);
  if (bias) c->bias = memory(bd, engine, DNNL_MEMORY_NONE);
  c->to_blocked = dnnl::reorder(c->x, c->x_blocked);
  c->weight_to_blocked = dnnl::reorder(c->weight, memory(pd.weights_desc(), engine, DNNL_MEMORY_NONE));
  dnnl::primitive_attr sum;
  if (ctx.input(3)) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    sum.set_post_ops(ops);
  }
  c->to_plain = dnnl::reorder(c->y_blocked, c->y, sum);
  if (packs_weight(ctx, 1)) {  // a plan's constant weight: reordered once, into memory the step owns
    c->weight_blocked = memory(pd.weights_desc(), engine);
    KILN_RETURN_IF_ERROR(point(ctx, c->weight, ctx.input(1)->data));
    c->weight_to_blocked.execute(ctx.cpu->stream, c->weight, c->weight_blocked);
    c->owns_weight = true;
  } else {
    c->weight_blocked = memory(pd.weights_desc(), engine, DNNL_MEMORY_NONE);
  }
  KILN_RETURN_IF_ERROR(run_blocked_bf16_conv(ctx, *c));
  if (recording(ctx)) *ctx.state = std::move(c);
  return ok_status();
}

// Conv and ConvTranspose share everything but the weight layout and the
// primitive. ONNX weights: Conv [OC, IC/g, k...], ConvTranspose [IC, OC/g, k...];
// oneDNN wants both as [OC, IC, k...] (or [g, OC/g, IC/g, k...] with groups),
// which for ConvTranspose is a transposed, strided view.
Status conv_cpu(KernelContext& ctx, bool transpose) {
  KILN_RETURN_IF_ERROR(require_f32(ctx));
  if (const ConvGeometry* g = geometry_of(ctx)) return conv_gemm_or_rows(ctx, *g);
  if (const DnnlReplay* r = replay_of(ctx)) return replay(ctx, *r);
  if (const auto* c = ctx.state ? dynamic_cast<const BlockedBf16Conv*>(ctx.state->get()) : nullptr)
    return guard_dnnl(ctx, [&] { return run_blocked_bf16_conv(ctx, *c); });
  const TensorView &x = *ctx.input(0), &w = *ctx.input(1);
  const TensorView* bias = ctx.input(2);
  TensorView& y = *ctx.output(0);
  const size_t spatial = size_t(x.rank()) - 2;
  if (spatial < 1 || spatial > 3)
    return ctx.unsupported_error("{} spatial dims (1 to 3 are implemented)", spatial);
  if (y.numel() == 0) return ok_status();
  const Shape kernel_dims(w.shape.begin() + 2, w.shape.end());
  KILN_ASSIGN_OR_RETURN(ConvAttrs a, conv_attrs(*ctx.node, spatial, sym_shape_from(kernel_dims)));
  const int64_t in_channels = x.shape[1], out_channels = y.shape[1], g = a.group;
  if (x.numel() == 0) {  // no input channels: the output is the bias alone
    fill_bias(y, bias);
    return ok_status();
  }

  memory::dims strides = a.strides, dilates(spatial), pad_l(spatial), pad_r(spatial);
  // ConvTranspose outputs that no input reaches (an output_shape larger than
  // the full result) hold the bias only. oneDNN takes a pad_begin >= 0 and a
  // pad_end > -stride, so it computes the window of Y inside those limits,
  // in scratch (it treats a destination as dense from its first element).
  Shape window = y.shape;
  int64_t window_offset = 0;
  const Shape y_strides = shape_strides(y.shape);
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t in = x.shape[2 + d], out = y.shape[2 + d];
    dilates[d] = a.dilations[d] - 1;  // oneDNN counts the gaps
    if (transpose) {
      pad_l[d] = conv_transpose_pad_begin(a, d, in, out);
      if (pad_l[d] < 0) {
        window[2 + d] += pad_l[d];
        window_offset -= pad_l[d] * y_strides[2 + d];
        pad_l[d] = 0;
      }
      pad_r[d] = (in - 1) * a.strides[d] + a.extent(d) - pad_l[d] - window[2 + d];
      if (pad_r[d] <= -a.strides[d]) {
        window[2 + d] += pad_r[d];
        pad_r[d] = 0;
      }
    } else {
      std::tie(pad_l[d], pad_r[d]) = conv_pads(a, d, in, out);
    }
  }
  // In bf16 (never a ConvTranspose: assign_precision marks none), oneDNN's
  // convolution with the input and weights rounded to bf16; with few output
  // channels, f32 (see kBf16MinOutChannels).
  const bool bf16 =
      !transpose && computes_in_bf16(*ctx.node) && out_channels / g >= kBf16MinOutChannels;
  // kiln's GEMM: f32, or bf16 where bf16_gemm() picks it (bf16 products, or
  // f32 ones on rounded operands).
  const bool winograd_marked = ctx.attrs().get_int("winograd", 0) > 0;
  if (!transpose && g == 1 && (!bf16 || bf16_gemm() != Bf16Gemm::kOnednn)) {
    auto geometry = std::make_unique<ConvGeometry>();
    ConvGeometry& cg = *geometry;
    const size_t wd = spatial - 1;  // the last spatial dim is the width, the one before the height
    cg.batch = x.shape[0], cg.in_channels = in_channels, cg.out_channels = out_channels;
    cg.width = x.shape[2 + wd], cg.out_width = y.shape[2 + wd], cg.kernel_w = kernel_dims[wd];
    cg.stride_w = a.strides[wd], cg.pad_w = pad_l[wd], cg.dilation_w = a.dilations[wd];
    cg.height = cg.out_height = 1;
    if (spatial >= 2) {
      const size_t hd = spatial - 2;
      cg.height = x.shape[2 + hd], cg.out_height = y.shape[2 + hd], cg.kernel_h = kernel_dims[hd];
      cg.stride_h = a.strides[hd], cg.pad_h = pad_l[hd], cg.dilation_h = a.dilations[hd];
    }
    if (spatial == 3) {
      cg.depth = x.shape[2], cg.out_depth = y.shape[2], cg.kernel_d = kernel_dims[0];
      cg.stride_d = a.strides[0], cg.pad_d = pad_l[0], cg.dilation_d = a.dilations[0];
    }
    cg.pixels_as_rows = cg.pixels() < gemm::panel_width();
    cg.bf16_products = bf16 && bf16_gemm() == Bf16Gemm::kKiln;
    cg.rounds_operands = bf16 && bf16_gemm() == Bf16Gemm::kKilnF32;
    cg.rows_in_place = !cg.bf16_products && !cg.pixels_as_rows && spatial <= 2 && cg.stride_h == 1 &&
                       cg.stride_w == 1 && cg.out_width % gemm::panel_width() == 0;  // its B rows in place are f32
    if (winograd_marked && spatial == 2 && cg.kernel_h == 3 && cg.kernel_w == 3 && cg.stride_h == 1 &&
        cg.stride_w == 1 && cg.dilation_h == 1 && cg.dilation_w == 1 && !fused_epilogue(ctx, true).activate)
      cg.winograd_tile = winograd_tile(ctx, winograd_conv(cg), cg.bf16_products);
    if (packs_weight(ctx, 1))  // a plan's constant weight, as the path below reads it (conv_gemm_or_rows)
      KILN_RETURN_IF_ERROR(own_conv_weight(ctx, cg, w.as<float>()));
    if (!recording(ctx)) return conv_gemm_or_rows(ctx, cg);
    *ctx.state = std::move(geometry);
    return conv_gemm_or_rows(ctx, *geometry_of(ctx));
  }
  const bool windowed = window != y.shape;
  float* dst = y.as<float>();
  if (windowed) {
    fill_bias(y, bias);
    if (*std::min_element(window.begin(), window.end()) <= 0) return ok_status();
    KILN_ASSIGN_OR_RETURN(dst, scratch_floats(ctx, shape_numel(window), "the output window"));
  }
  const int64_t taps = shape_numel(kernel_dims);
  Shape wd{out_channels / g, in_channels / g}, ws;
  if (transpose) ws = {taps, out_channels / g * taps};  // ONNX [IC/g][OC/g] transposed
  else ws = {in_channels / g * taps, taps};
  if (g > 1) {
    wd.insert(wd.begin(), g);
    ws.insert(ws.begin(), in_channels / g * out_channels / g * taps);
  }
  const Shape kernel_strides = shape_strides(kernel_dims);
  wd.insert(wd.end(), kernel_dims.begin(), kernel_dims.end());
  ws.insert(ws.end(), kernel_strides.begin(), kernel_strides.end());

  if (bf16 && onednn_has_bf16())
    return guard_dnnl(ctx, [&] {
      return blocked_bf16_conv(ctx, strided_desc(wd, ws), strides, dilates, pad_l, pad_r);
    });
  return guard_dnnl(ctx, [&] {
    memory::desc xd = plain_desc(x.shape), yd = plain_desc(window), wmd = strided_desc(wd, ws);
    memory::desc packed_wmd = weights_desc(ctx, 1, wmd);
    const memory::desc bd = bias ? plain_desc(bias->shape) : memory::desc();
    Args args{{DNNL_ARG_SRC, bind(ctx, xd, x.data)},
              {DNNL_ARG_WEIGHTS, bind(ctx, wmd, w.data)},
              {DNNL_ARG_DST, bind(ctx, yd, dst)}};
    Bf16Inputs rounded;
    if (bf16) {
      KILN_ASSIGN_OR_RETURN(args[DNNL_ARG_SRC], bf16_input(ctx, 0, x.shape, shape_strides(x.shape)));
      rounded.push_back({DNNL_ARG_SRC, 0});
      xd = args[DNNL_ARG_SRC].get_desc();
      if (packs_bf16_weight(ctx, 1)) {  // f32 here; execute() rounds and packs it once
        packed_wmd = memory::desc(wd, memory::data_type::bf16, memory::format_tag::any);
      } else {
        KILN_ASSIGN_OR_RETURN(args[DNNL_ARG_WEIGHTS], bf16_input(ctx, 1, wd, ws));
        rounded.push_back({DNNL_ARG_WEIGHTS, 1});
        packed_wmd = args[DNNL_ARG_WEIGHTS].get_desc();
      }
    }
    if (bias) args.emplace(DNNL_ARG_BIAS, bind(ctx, bd, bias->data));
    using Conv = dnnl::convolution_forward;
    using Deconv = dnnl::deconvolution_forward;
    const auto inference = dnnl::prop_kind::forward_inference;
    const bool fused = ctx.node->op == OpKind::kFusedConv;  // kiln.Conv: the epilogue rides along
    const dnnl::primitive_attr attr = fused ? epilogue_attr(ctx, yd) : user_scratchpad_attr();
    if (fused) add_residual_arg(ctx, yd, args);
    if (transpose) {
      Deconv::desc desc(inference, dnnl::algorithm::deconvolution_direct, xd, packed_wmd, bd, yd, strides,
                        dilates, pad_l, pad_r);
      KILN_RETURN_IF_ERROR(execute<Deconv>(ctx, {desc, attr, ctx.cpu->engine}, std::move(args)));
    } else {
      Conv::desc desc(inference, dnnl::algorithm::convolution_direct, xd, packed_wmd, bd, yd, strides,
                      dilates, pad_l, pad_r);
      KILN_RETURN_IF_ERROR(execute<Conv>(ctx, {desc, attr, ctx.cpu->engine}, std::move(args), rounded));
    }
    if (windowed) copy_strided(dst, shape_strides(window), y.as<float>() + window_offset, y_strides, window);
    return ok_status();
  });
}

}  // namespace

Status cpu_Conv(KernelContext& ctx) { return conv_cpu(ctx, false); }
Status cpu_ConvTranspose(KernelContext& ctx) { return conv_cpu(ctx, true); }
Status cpu_FusedConv(KernelContext& ctx) { return conv_cpu(ctx, false); }

}  // namespace kiln
