// JPEG input through libavcodec's MJPEG decoder (already kiln's for video)
// and libswscale to 8-bit RGB: what a client uploads as often as PNG.
//
//   KILN_ASSIGN_OR_RETURN(RgbImage image, decode_jpeg(bytes.data(), bytes.size(), "the upload", 2048));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "pipeline/png.h"

namespace kiln {

// Baseline and progressive JPEG, colour or grey; errors name `name`. An
// image wider or taller than max_side is refused before its pixels are decoded.
Result<RgbImage> decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int max_side);

// Whether the bytes start as a JPEG does (FF D8 FF).
bool is_jpeg(const uint8_t* data, size_t size);

}  // namespace kiln
