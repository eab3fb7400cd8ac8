#include "pipeline/prompt_text.h"

#include <libxml/HTMLparser.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cctype>

namespace kiln {

namespace {

void append_utf8(UChar32 c, std::string& out) { icu::UnicodeString(c).toUTF8String(out); }

// The code point a numeric reference names, as Python maps it: U+FFFD for
// 0, surrogates and anything past U+10FFFF.
UChar32 numeric_reference(uint64_t value) {
  if (value == 0 || (value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF) return 0xFFFD;
  return UChar32(value);
}

// Python's str.isspace(): Unicode White_Space plus U+001C..U+001F.
bool is_python_space(UChar32 c) { return u_isUWhiteSpace(c) || (c >= 0x1C && c <= 0x1F); }

}  // namespace

std::string html_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '&') {
      out += s[i++];
      continue;
    }
    size_t j = i + 1;
    if (j < s.size() && s[j] == '#') {  // &#NNN; or &#xHHH; (the ';' optional)
      const bool hex = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
      size_t k = j + 1 + (hex ? 1 : 0), digits = 0;
      uint64_t value = 0;
      while (k < s.size() &&
             (hex ? std::isxdigit(static_cast<unsigned char>(s[k])) : std::isdigit(static_cast<unsigned char>(s[k])))) {
        const char c = char(std::tolower(static_cast<unsigned char>(s[k])));
        value = std::min<uint64_t>(value * (hex ? 16 : 10) + uint64_t(c <= '9' ? c - '0' : c - 'a' + 10), 0x110000);
        ++k, ++digits;
      }
      if (digits > 0) {
        append_utf8(numeric_reference(value), out);
        i = k + (k < s.size() && s[k] == ';' ? 1 : 0);
        continue;
      }
    } else {  // &name;
      size_t k = j;
      while (k < s.size() && k - j < 32 && std::isalnum(static_cast<unsigned char>(s[k]))) ++k;
      if (k > j && k < s.size() && s[k] == ';') {
        const std::string name(s.substr(j, k - j));
        if (const htmlEntityDesc* e = htmlEntityLookup(reinterpret_cast<const xmlChar*>(name.c_str()))) {
          append_utf8(UChar32(e->value), out);
          i = k + 1;
          continue;
        }
      }
    }
    out += s[i++];
  }
  return out;
}

std::string collapse_whitespace(std::string_view utf8) {
  const icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), int32_t(utf8.size())));
  icu::UnicodeString clean;
  bool in_space = true;  // drops leading spaces
  for (int32_t i = 0; i < text.length();) {
    const UChar32 c = text.char32At(i);
    i += U16_LENGTH(c);
    if (is_python_space(c)) {
      in_space = true;
      continue;
    }
    if (in_space && !clean.isEmpty()) clean.append(UChar32(' '));
    in_space = false;
    clean.append(c);
  }
  std::string out;
  clean.toUTF8String(out);
  return out;
}

std::string clean_wan_prompt(std::string_view utf8) { return collapse_whitespace(html_unescape(html_unescape(utf8))); }

}  // namespace kiln
