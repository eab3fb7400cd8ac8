// PNG input and output through libpng: 8-bit RGB, with text chunks (iTXt, UTF-8) for
// what made the image, as users of other generators expect to find them
// (prompt, seed, steps, scheduler, model). No time chunk: the same pixels
// and text give byte-identical files.
//
//   KILN_RETURN_IF_ERROR(write_png("out.png", rgb.data(), 512, 512, {{"prompt", "a cat"}, {"seed", "1"}}));
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln {

using PngText = std::vector<std::pair<std::string, std::string>>;

// rgb: height rows of width x 3 bytes.
Result<std::vector<uint8_t>> encode_png(const uint8_t* rgb, int width, int height, const PngText& text);
Status write_png(const std::string& path, const uint8_t* rgb, int width, int height, const PngText& text);

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height rows of width x 3 bytes
};

// Any PNG (grey, palette, 16-bit, with alpha: composited on white) as 8-bit
// RGB. Errors name the file; an image wider or taller than max_side is
// refused before its pixels are read.
Result<RgbImage> read_png(const std::string& path, int max_side);
// The same from bytes in memory (an upload); `name` is what errors call it.
Result<RgbImage> decode_png(const uint8_t* data, size_t size, const std::string& name, int max_side);

}  // namespace kiln
