#include "pipeline/png.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

namespace kiln {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// libpng reports errors by longjmp; the message is kept for the Status.
void on_error(png_structp png, png_const_charp message) {
  auto* out = static_cast<std::string*>(png_get_error_ptr(png));
  *out = message;
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

}  // namespace

namespace {

void append_to_vector(png_structp png, png_bytep data, png_size_t size) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + size);
}
void flush_nothing(png_structp) {}

// The libpng calls, apart: setjmp's frame holds no object that changes
// after it (the caller owns the buffers).
bool encode_png_body(png_structp png, png_infop info, std::vector<uint8_t>* out, const uint8_t* rgb, int width,
                     int height, const PngText& text, std::vector<png_text>& chunks, std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, append_to_vector, flush_nothing);
  png_set_IHDR(png, info, png_uint_32(width), png_uint_32(height), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  for (size_t i = 0; i < text.size(); ++i) {
    chunks[i] = {};
    chunks[i].compression = PNG_ITXT_COMPRESSION_NONE;
    chunks[i].key = const_cast<char*>(text[i].first.c_str());
    chunks[i].text = const_cast<char*>(text[i].second.c_str());
    chunks[i].itxt_length = text[i].second.size();
  }
  if (!chunks.empty()) png_set_text(png, info, chunks.data(), int(chunks.size()));
  for (int y = 0; y < height; ++y) rows[size_t(y)] = const_cast<png_bytep>(rgb + size_t(y) * size_t(width) * 3);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, info);
  return true;
}

}  // namespace

Result<std::vector<uint8_t>> encode_png(const uint8_t* rgb, int width, int height, const PngText& text) {
  if (width <= 0 || height <= 0) return invalid_argument("cannot write a {}x{} image", width, height);
  std::string error;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &error, on_error, on_warning);
  if (!png) return internal_error("libpng: cannot start a PNG");
  png_infop info = png_create_info_struct(png);
  std::vector<png_text> chunks(text.size());
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  std::vector<uint8_t> out;
  const bool written = info && encode_png_body(png, info, &out, rgb, width, height, text, chunks, rows);
  png_destroy_write_struct(&png, &info);
  if (!written) return invalid_argument("cannot encode a PNG: {}", error.empty() ? "libpng failed" : error);
  return out;
}

Status write_png(const std::string& path, const uint8_t* rgb, int width, int height, const PngText& text) {
  KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, encode_png(rgb, width, height, text));
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  if (!file) return invalid_argument("cannot write '{}'", path);
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size() || std::fflush(file.get()) != 0)
    return invalid_argument("cannot write '{}'", path);
  return ok_status();
}

Result<RgbImage> decode_png(const uint8_t* data, size_t size, const std::string& name, int max_side) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    return invalid_argument("{}: not a readable PNG ({})", name, image.message);
  // png_image_free releases what begin_read allocated, on every path out.
  std::unique_ptr<png_image, void (*)(png_imagep)> guard(&image, png_image_free);
  if (image.width == 0 || image.height == 0 || image.width > png_uint_32(max_side) ||
      image.height > png_uint_32(max_side))
    return invalid_argument("{}: the image is {}x{}; kiln reads up to {} pixels a side", name, image.width,
                            image.height, max_side);
  image.format = PNG_FORMAT_RGB;
  RgbImage out{int(image.width), int(image.height), std::vector<uint8_t>(PNG_IMAGE_SIZE(image))};
  const png_color white{255, 255, 255};
  if (!png_image_finish_read(&image, &white, out.rgb.data(), 0, nullptr))
    return invalid_argument("{}: a corrupt or truncated PNG ({})", name, image.message);
  return out;
}

Result<RgbImage> read_png(const std::string& path, int max_side) {
  if (!std::filesystem::exists(path)) return not_found("{}: no such file", path);
  // Far past any PNG of max_side pixels a side: not read into memory.
  constexpr uintmax_t kMaxFileBytes = uintmax_t(1) << 30;
  std::error_code error;
  if (const uintmax_t bytes = std::filesystem::file_size(path, error); error || bytes > kMaxFileBytes)
    return invalid_argument("{}: {}", path, error ? "cannot read its size" : "over 1 GiB; not an image kiln reads");
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return invalid_argument("{}: cannot read", path);
  return decode_png(bytes.data(), bytes.size(), path, max_side);
}

}  // namespace kiln
