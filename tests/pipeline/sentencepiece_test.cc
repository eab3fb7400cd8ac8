// Wan's prompt cleaning and T5's SentencePiece tokenizer against Python's
// (tools/wan/text.py: html.unescape, re's \s, the sentencepiece library's
// own encode) on tests/models/wan-tiny/reference/tokenizer.json: entities,
// doubly escaped text, Unicode whitespace, NFKC, unknown characters, the
// empty prompt, truncation at 512.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "pipeline/prompt_text.h"
#include "pipeline/sentencepiece.h"

namespace kiln {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(KILN_SOURCE_DIR) / "tests" / "models" / "wan-tiny";

TEST(SentencePiece, WanPromptsMatchTheLibrary) {
  auto sp = SentencePiece::load((kTiny / "diffusers" / "tokenizer" / "spiece.model").string());
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ((*sp)->eos_id(), 1);
  std::ifstream in(kTiny / "reference" / "tokenizer.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string clean = clean_wan_prompt(c["text"].get<std::string>());
    EXPECT_EQ(clean, c["clean"].get<std::string>());
    EXPECT_EQ(t5_token_ids(**sp, clean), c["ids"].get<std::vector<int64_t>>());
  }
}

// The library's ids for 305 texts (corpus fragments spliced with accents,
// CJK, emoji, fullwidth, ligatures, odd whitespace) under three models:
// Wan's tiny one, one with byte fallback and user-defined symbols, one with
// the identity normalizer and no whitespace cleanup (tools/make_sentencepiece_cases.py).
TEST(SentencePiece, RandomTextsMatchTheLibrary) {
  const std::filesystem::path dir = std::filesystem::path(KILN_SOURCE_DIR) / "tests" / "data" / "sentencepiece";
  std::ifstream in(dir / "cases.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  const auto& texts = cases["texts"];
  for (const auto& [name, model] :
       {std::pair{"wan", kTiny / "diffusers" / "tokenizer" / "spiece.model"}, std::pair{"bytes", dir / "bytes.model"},
        std::pair{"identity", dir / "identity.model"}}) {
    auto sp = SentencePiece::load(model.string());
    ASSERT_TRUE(sp.ok()) << sp.status().message();
    const auto& ids = cases["ids"][name];
    ASSERT_EQ(ids.size(), texts.size());
    int mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<int32_t> got = (*sp)->encode(texts[i].get<std::string>());
      if (got == ids[i].get<std::vector<int32_t>>()) continue;
      if (++mismatches <= 3) ADD_FAILURE() << name << " text " << i << ": '" << texts[i].get<std::string>() << "'";
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

TEST(PromptText, HtmlReferencesAndWhitespace) {
  EXPECT_EQ(html_unescape("a &amp; b &lt;i&gt; &#65;&#x42;&#67 &hellip; &bogus; & &#xD800; &#0;"),
            "a & b <i> ABC \u2026 &bogus; & \uFFFD \uFFFD");
  EXPECT_EQ(collapse_whitespace("\u3000 a \t\n b\u00a0\x1c"), "a b");
  EXPECT_EQ(clean_wan_prompt(" x &amp;amp;&nbsp;y "), "x & y");
}

TEST(SentencePiece, RejectsWhatIsNoModel) {
  auto missing = SentencePiece::load("/nonexistent/spiece.model");
  EXPECT_FALSE(missing.ok());
  auto wrong = SentencePiece::load((kTiny / "diffusers" / "model_index.json").string());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not a SentencePiece model"), std::string::npos) << wrong.status().message();
}

}  // namespace
}  // namespace kiln
