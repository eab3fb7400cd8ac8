// Base64 (RFC 4648) for images in JSON bodies, over OpenSSL's EVP block
// codec: what A1111 and OpenAI clients send and expect.
//
//   std::string text = base64_encode(png_bytes);              // no line breaks
//   KILN_ASSIGN_OR_RETURN(auto bytes, base64_decode(upload)); // "data:image/png;base64,..." too
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln::serve {

std::string base64_encode(std::span<const uint8_t> bytes);

// Accepts a data: URL's payload or bare base64, padded or not, with
// whitespace anywhere; refuses any other character. `max_bytes` bounds the
// decoded size before anything is decoded.
Result<std::vector<uint8_t>> base64_decode(std::string_view text, size_t max_bytes);

}  // namespace kiln::serve
