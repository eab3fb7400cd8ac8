// Prompt text as the reference pipelines clean it before tokenizing.
//
//   std::string text = clean_wan_prompt("a cat &amp;amp;  a dog\n");   // "a cat & a dog"
//
// Wan's (wan/modules/tokenizers.py, diffusers' prompt_clean) is ftfy.fix_text,
// html.unescape twice, strip, whitespace runs to one space, strip. kiln does
// all of it but ftfy's repair of mis-decoded text (mojibake), which no
// library here does. Character references follow Python's html.unescape:
// numeric ones (&#39; &#x27;, the semicolon optional), and named ones with
// their semicolon from HTML 4's table (libxml2's) plus &apos;; a name
// outside it stays as written.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// One pass of html.unescape over UTF-8 text.
std::string html_unescape(std::string_view utf8);
// Whitespace runs (Python's str.isspace characters) to one space, and the
// ends stripped.
std::string collapse_whitespace(std::string_view utf8);
std::string clean_wan_prompt(std::string_view utf8);

}  // namespace kiln
