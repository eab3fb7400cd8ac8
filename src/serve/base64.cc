#include "serve/base64.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

namespace kiln::serve {

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');  // EVP writes a terminating NUL
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

Result<std::vector<uint8_t>> base64_decode(std::string_view text, size_t max_bytes) {
  if (text.starts_with("data:")) {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos || text.substr(0, comma).find(";base64") == std::string_view::npos)
      return invalid_argument("a data: URL that is not base64");
    text.remove_prefix(comma + 1);
  }
  // EVP_DecodeBlock takes whole 4-character groups only: whitespace out, padding in.
  std::string clean;
  clean.reserve(text.size() + 3);
  for (const char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) clean.push_back(c);
  const size_t pad = clean.size() - std::min(clean.size(), clean.find_last_not_of('=') + 1);
  if (pad > 2 || clean.size() % 4 == 1 || (pad > 0 && clean.size() % 4 != 0))
    return invalid_argument("not base64: {} characters", clean.size());
  for (size_t i = 0; i < clean.size() - pad; ++i) {
    const char c = clean[i];
    const auto byte = static_cast<unsigned char>(c);
    if (!std::isalnum(byte) && c != '+' && c != '/')  // named by its code: it may be part of a UTF-8 sequence
      return invalid_argument("not base64: the byte 0x{:02x} at {}", byte, i);
  }
  while (clean.size() % 4) clean.push_back('=');
  const size_t padding = clean.size() - std::min(clean.size(), clean.find_last_not_of('=') + 1);
  const size_t decoded = clean.size() / 4 * 3 - padding;
  if (decoded > max_bytes) return invalid_argument("{} bytes, over the limit of {}", decoded, max_bytes);
  std::vector<uint8_t> out(clean.size() / 4 * 3);
  if (!clean.empty() &&
      EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(clean.data()), int(clean.size())) < 0)
    return invalid_argument("not base64");
  out.resize(decoded);
  return out;
}

}  // namespace kiln::serve
