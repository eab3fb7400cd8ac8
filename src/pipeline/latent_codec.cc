#include "pipeline/latent_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln {

namespace {

// diffusers' blend_v (vertical) and blend_h: b's first rows (columns) fade
// in over a's last ones, across at most `extent` of them.
void blend_edge(const Tensor& a, Tensor& b, int64_t extent, bool vertical) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int64_t e = std::min({vertical ? sa[2] : sa[3], vertical ? sb[2] : sb[3], extent});
  const float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t plane = 0; plane < sb[0] * sb[1]; ++plane)
    for (int64_t y = 0; y < sb[2]; ++y)
      for (int64_t x = 0; x < sb[3]; ++x) {
        const int64_t k = vertical ? y : x;
        if (k >= e) continue;
        const int64_t ay = vertical ? sa[2] - e + y : y, ax = vertical ? x : sa[3] - e + x;
        const double t = double(k) / double(e);
        float& out = pb[(plane * sb[2] + y) * sb[3] + x];
        out = pa[(plane * sa[2] + ay) * sa[3] + ax] * float(1 - t) + out * float(t);
      }
}

}  // namespace

Result<Tensor> LatentCodec::encode(const RgbImage& image, int64_t batch, NoiseStream& noise) {
  if (!encoder_) {
    if (!encoder_loader_) return not_found("{}: the model has no VAE encoder, which image to image needs", spec_.label);
    KILN_ASSIGN_OR_RETURN(encoder_, ModelRunner::create(encoder_loader_, runner_options_));
  }
  // Bytes to [-1, 1], as diffusers' image processor: p / 255 * 2 - 1.
  const size_t plane = size_t(image.width) * size_t(image.height);
  KILN_ASSIGN_OR_RETURN(Tensor sample, Tensor::empty(DType::kF32, {batch, 3, image.height, image.width}));
  for (int64_t b = 0; b < batch; ++b)
    for (size_t c = 0; c < 3; ++c)
      for (size_t p = 0; p < plane; ++p)
        sample.data<float>()[(size_t(b) * 3 + c) * plane + p] = float(image.rgb[p * 3 + c]) / 255.0f * 2.0f - 1.0f;
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, encoder_->run({{"sample", sample}}));
  // [B, 2C, h, w]: the latent distribution's mean and log-variance (optimum's
  // latent_parameters); [B, C, h, w]: a latent already drawn.
  const Tensor& params = out[0];
  const int64_t c = spec_.latent_channels, h = image.height / spec_.factor, w = image.width / spec_.factor;
  const bool distribution = params.rank() == 4 && params.shape()[1] == 2 * c;
  if (params.dtype() != DType::kF32 || params.shape() != Shape{batch, distribution ? 2 * c : c, h, w})
    return invalid_argument("{}: the encoder's output is {} {}, expected f32 [{}, {} or {}, {}, {}]", spec_.label,
                            dtype_name(params.dtype()), shape_to_string(params.shape()), batch, c, 2 * c, h, w);
  KILN_ASSIGN_OR_RETURN(Tensor x0, Tensor::empty(DType::kF32, {batch, c, h, w}));
  const size_t n = size_t(x0.numel()), per_sample = size_t(c * h * w);
  std::vector<float> eps(n);
  noise.fill(eps.data(), n);
  const float* p = params.data<float>();
  for (size_t i = 0; i < n; ++i) {
    float z = p[i];
    if (distribution) {  // mean + exp(logvar / 2) eps, logvar clamped as diffusers does
      const size_t b = i / per_sample, j = i % per_sample;
      const float mean = p[b * 2 * per_sample + j], logvar = p[b * 2 * per_sample + per_sample + j];
      z = mean + std::exp(0.5f * std::clamp(logvar, -30.0f, 20.0f)) * eps[i];
    }
    x0.data<float>()[i] = z * spec_.scaling_factor;
  }
  encoder_->release_arena_memory();  // its output read: idle until the next image
  return x0;
}

Result<Tensor> LatentCodec::decode_whole(const Tensor& z) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, decoder_->run({{"latent_sample", z}}));
  const Tensor& image = out[0];
  const Shape& s = z.shape();
  const Shape expected{s[0], 3, s[2] * spec_.factor, s[3] * spec_.factor};
  if (image.dtype() != DType::kF32 || image.shape() != expected)
    return invalid_argument("{}: the decoded image is {} {}, expected f32 {}", spec_.label, dtype_name(image.dtype()),
                            shape_to_string(image.shape()), shape_to_string(expected));
  return Tensor::copy_of(image.view());  // the runner's output view is overwritten by its next run
}

Result<Tensor> LatentCodec::decode_tiled(const Tensor& z) {
  if (spec_.tile < 4 * spec_.factor)
    return invalid_argument("{}: a tile of {} pixels is too small to decode in tiles", spec_.label, spec_.tile);
  const Shape& s = z.shape();
  const int64_t b = s[0], c = s[1], h = s[2], w = s[3], f = spec_.factor;
  // diffusers' tiled_decode: latent tiles of the VAE's sample size over the
  // factor, a quarter overlapping; each decoded tile blended into its upper
  // and left neighbours (already blended), then cropped to the stride.
  const int64_t tile = spec_.tile / f, stride = int64_t(double(tile) * 0.75);
  const int64_t blend = int64_t(double(spec_.tile) * 0.25), limit = spec_.tile - blend;
  std::vector<std::vector<Tensor>> rows;
  for (int64_t i = 0; i < h; i += stride) {
    rows.emplace_back();
    for (int64_t j = 0; j < w; j += stride) {
      const int64_t th = std::min(tile, h - i), tw = std::min(tile, w - j);
      KILN_ASSIGN_OR_RETURN(Tensor part, Tensor::empty(DType::kF32, {b, c, th, tw}));
      for (int64_t plane = 0; plane < b * c; ++plane)
        for (int64_t y = 0; y < th; ++y)
          std::memcpy(part.data<float>() + (plane * th + y) * tw, z.data<float>() + (plane * h + i + y) * w + j,
                      size_t(tw) * sizeof(float));
      KILN_ASSIGN_OR_RETURN(Tensor decoded, decode_whole(part));
      rows.back().push_back(std::move(decoded));
    }
  }
  const int64_t height = h * f, width = w * f;
  KILN_ASSIGN_OR_RETURN(Tensor image, Tensor::empty(DType::kF32, {b, 3, height, width}));
  for (size_t ri = 0; ri < rows.size(); ++ri)
    for (size_t cj = 0; cj < rows[ri].size(); ++cj) {
      Tensor& t = rows[ri][cj];
      if (ri > 0) blend_edge(rows[ri - 1][cj], t, blend, /*vertical=*/true);
      if (cj > 0) blend_edge(rows[ri][cj - 1], t, blend, /*vertical=*/false);
      const int64_t th = t.shape()[2], tw = t.shape()[3];
      const int64_t y0 = int64_t(ri) * limit, x0 = int64_t(cj) * limit;
      const int64_t rows_kept = std::min({th, limit, height - y0}), cols_kept = std::min({tw, limit, width - x0});
      for (int64_t plane = 0; plane < b * 3; ++plane)
        for (int64_t y = 0; y < rows_kept; ++y)
          std::memcpy(image.data<float>() + (plane * height + y0 + y) * width + x0,
                      t.data<float>() + (plane * th + y) * tw, size_t(cols_kept) * sizeof(float));
    }
  return image;
}

Result<Tensor> LatentCodec::decode(const Tensor& latents, bool tiled) {
  KILN_ASSIGN_OR_RETURN(Tensor z, Tensor::copy_of(latents.view()));
  for (int64_t j = 0; j < z.numel(); ++j) z.data<float>()[j] /= spec_.scaling_factor;
  Result<Tensor> image = tiled ? decode_tiled(z) : decode_whole(z);
  decoder_->release_arena_memory();  // the image is a copy; the arena idles until the next decode
  return image;
}

void planes_to_rgb(const float* v, int64_t pixels, int64_t channel_stride, uint8_t* rgb) {
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < 3; ++c) {
      float u = std::clamp(v[c * channel_stride + p] / 2 + 0.5f, 0.0f, 1.0f) * 255.0f;
      if (!(u >= 0.0f)) u = 0.0f;  // NaN
      rgb[p * 3 + c] = uint8_t(std::nearbyint(u));
    }
}

std::vector<uint8_t> image_to_pixels(const Tensor& image) {
  const int64_t b = image.shape()[0], plane = image.shape()[2] * image.shape()[3];
  std::vector<uint8_t> pixels(size_t(b * plane * 3));
  for (int64_t i = 0; i < b; ++i) planes_to_rgb(image.data<float>() + i * 3 * plane, plane, plane, pixels.data() + i * plane * 3);
  return pixels;
}

}  // namespace kiln
