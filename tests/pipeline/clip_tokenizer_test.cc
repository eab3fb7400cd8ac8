// kiln's CLIP tokenizer against its Python reference (tools/clip_bpe.py),
// whose ids for a few hundred strings are in tests/data/tokenizer/cases.json
// (regenerate: /usr/bin/python3 tools/clip_bpe.py make-test-data tests/data/tokenizer),
// and against hostile tokenizer folders and input.
#include "pipeline/clip_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/mapped_file.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kData = fs::path(KILN_SOURCE_DIR) / "tests" / "data" / "tokenizer";

nlohmann::json read_cases() {
  auto text = read_file((kData / "cases.json").string());
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
}

ClipTokenizer load_ok(const fs::path& dir) {
  auto tok = ClipTokenizer::load(dir.string());
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return std::move(tok).value();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// Checks encode() and tokenize() on every case of a cases.json list; the
// text comes from "text", or from "hex" for bytes that are not UTF-8.
void expect_cases(const ClipTokenizer& tok, const nlohmann::json& cases) {
  for (const auto& c : cases) {
    const std::string text = c.contains("hex") ? from_hex(c["hex"]) : c["text"].get<std::string>();
    const std::string label = c.contains("hex") ? "hex " + c["hex"].get<std::string>() : c["text"].dump();
    EXPECT_EQ(tok.encode(text), c["encoded"].get<std::vector<int32_t>>()) << label;
    EXPECT_EQ(tok.tokenize(text), c["ids"].get<std::vector<int32_t>>()) << label;
  }
}

TEST(ClipTokenizer, LoadsTheTestTokenizer) {
  ClipTokenizer tok = load_ok(kData);
  EXPECT_EQ(tok.vocab_size(), 914u);  // 256 bytes, the same with </w>, 400 merges, BOS, EOS
  EXPECT_EQ(tok.max_length(), 77);
  EXPECT_EQ(tok.bos_id(), 912);
  EXPECT_EQ(tok.eos_id(), 913);
  EXPECT_EQ(tok.pad_id(), 913);  // SD 1.x pads with EOS
  EXPECT_EQ(tok.unk_id(), 913);
}

TEST(ClipTokenizer, MatchesThePythonReference) {
  ClipTokenizer tok = load_ok(kData);
  nlohmann::json cases = read_cases();
  ASSERT_EQ(cases.value("max_length", 0), tok.max_length());
  ASSERT_GE(cases["cases"].size(), 200u);
  expect_cases(tok, cases["cases"]);
}

TEST(ClipTokenizer, ReplacesInvalidUtf8AsPythonDecodeDoes) {
  ClipTokenizer tok = load_ok(kData);
  nlohmann::json cases = read_cases();
  ASSERT_GE(cases["invalid_utf8"].size(), 10u);
  expect_cases(tok, cases["invalid_utf8"]);
}

TEST(ClipTokenizer, TruncatesLongTextToMaxLength) {
  ClipTokenizer tok = load_ok(kData);
  std::string text;
  for (int i = 0; i < 100; ++i) text += "a photo of a cat ";
  std::vector<int32_t> all = tok.encode(text);
  std::vector<int32_t> ids = tok.tokenize(text);
  ASSERT_GT(all.size(), 75u);
  ASSERT_EQ(ids.size(), 77u);
  EXPECT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(ids.back(), tok.eos_id());
  EXPECT_TRUE(std::equal(all.begin(), all.begin() + 75, ids.begin() + 1));
}

class ClipTokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("kiln_clip_tokenizer_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json"})
      fs::copy_file(kData / name, dir_ / name);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const char* name, std::string_view text) { ASSERT_TRUE(write_file((dir_ / name).string(), text).ok()); }
  std::string read(const char* name) { return *read_file((dir_ / name).string()); }
  // The load error, which must name `file` (and `where` in it).
  void expect_error(const std::string& file, const std::string& where = "") {
    auto tok = ClipTokenizer::load(dir_.string());
    ASSERT_FALSE(tok.ok());
    const std::string& msg = tok.status().message();
    EXPECT_NE(msg.find((dir_ / file).string() + where), std::string::npos) << msg;
  }

  fs::path dir_;
};

TEST_F(ClipTokenizerFiles, PadTokenFromSpecialTokensMapSplitsItOutOfText) {
  // SD 2.x: pad "!", so every "!" in a prompt is the special token.
  write("special_tokens_map.json", R"({"pad_token": "!"})");
  ClipTokenizer tok = load_ok(dir_);
  EXPECT_EQ(tok.pad_id(), 0);
  nlohmann::json cases = read_cases();
  const auto& variant = cases["pad_token_variant"];
  ASSERT_EQ(variant["pad_token"], "!");
  ASSERT_GE(variant["cases"].size(), 5u);
  expect_cases(tok, variant["cases"]);
}

TEST_F(ClipTokenizerFiles, DefaultsWithoutTheOptionalFiles) {
  fs::remove(dir_ / "tokenizer_config.json");
  ClipTokenizer tok = load_ok(dir_);
  EXPECT_EQ(tok.max_length(), 77);
  EXPECT_EQ(tok.bos_id(), 912);
  EXPECT_EQ(tok.eos_id(), 913);
  EXPECT_EQ(tok.pad_id(), 913);
}

TEST_F(ClipTokenizerFiles, SpecialTokensMapOverridesTheConfig) {
  write("tokenizer_config.json", R"({"model_max_length": 16, "pad_token": {"content": "<|startoftext|>"}})");
  write("special_tokens_map.json", R"({"pad_token": {"content": "#", "lstrip": false}, "bos_token": null})");
  ClipTokenizer tok = load_ok(dir_);
  EXPECT_EQ(tok.max_length(), 16);
  EXPECT_EQ(tok.pad_id(), 2);  // "#"
  EXPECT_EQ(tok.bos_id(), 912);
  std::vector<int32_t> ids = tok.tokenize("a cat");
  ASSERT_EQ(ids.size(), 16u);
  EXPECT_EQ(ids.back(), 2);
}

TEST_F(ClipTokenizerFiles, MissingVocab) {
  fs::remove(dir_ / "vocab.json");
  expect_error("vocab.json");
}

TEST_F(ClipTokenizerFiles, MissingMerges) {
  fs::remove(dir_ / "merges.txt");
  expect_error("merges.txt");
}

TEST_F(ClipTokenizerFiles, MalformedVocabJson) {
  write("vocab.json", R"({"a": 1, "b": )");
  expect_error("vocab.json", ": not valid JSON");
}

TEST_F(ClipTokenizerFiles, DeeplyNestedJson) {
  write("vocab.json", std::string(1 << 20, '[') + std::string(1 << 20, ']'));
  expect_error("vocab.json", ": JSON nested more than 16 deep");
}

TEST_F(ClipTokenizerFiles, VocabNotAnObject) {
  write("vocab.json", "[1, 2, 3]");
  expect_error("vocab.json", ": expected a JSON object");
}

TEST_F(ClipTokenizerFiles, VocabIdNotAnInteger) {
  write("vocab.json", R"({"a": 0, "b": "1"})");
  expect_error("vocab.json", ": the id of 'b'");
  write("vocab.json", R"({"a": 0, "b": -4})");
  expect_error("vocab.json", ": the id of 'b'");
  write("vocab.json", R"({"a": 0, "b": 1e30})");
  expect_error("vocab.json", ": the id of 'b'");
}

TEST_F(ClipTokenizerFiles, VocabIdsNotUnique) {
  std::string vocab = read("vocab.json");
  vocab.replace(vocab.find("\"<|startoftext|>\": 912"), 22, "\"<|startoftext|>\": 913");
  write("vocab.json", vocab);
  expect_error("vocab.json", ": '<|");
  auto tok = ClipTokenizer::load(dir_.string());
  EXPECT_NE(tok.status().message().find("have the same id 913"), std::string::npos) << tok.status().message();
}

TEST_F(ClipTokenizerFiles, MalformedConfigJson) {
  write("tokenizer_config.json", "{\"model_max_length\": 77,,}");
  expect_error("tokenizer_config.json", ": not valid JSON");
  write("tokenizer_config.json", "");
  expect_error("tokenizer_config.json", ": not valid JSON");
}

TEST_F(ClipTokenizerFiles, BadModelMaxLength) {
  for (const char* v : {"1e30", "1000000000000000019884624838656", "1", "-77", "\"77\"", "77.5"}) {
    write("tokenizer_config.json", fmt::format(R"({{"model_max_length": {}}})", v));
    expect_error("tokenizer_config.json", ": model_max_length");
  }
}

TEST_F(ClipTokenizerFiles, MergesLineNotTwoSymbols) {
  write("merges.txt", "#version: 0.2\ni n\nin g</w> x\n");
  expect_error("merges.txt", ":3: expected two symbols");
  write("merges.txt", "#version: 0.2\ni n\nt\n");
  expect_error("merges.txt", ":3: expected two symbols");
}

TEST_F(ClipTokenizerFiles, MergeSymbolNotInVocab) {
  write("merges.txt", "#version: 0.2\ni n\nq@ z\n");
  expect_error("merges.txt", ":3: symbol 'q@' is not in vocab.json");
}

TEST_F(ClipTokenizerFiles, MergedTokenNotInVocab) {
  write("merges.txt", "#version: 0.2\ni n\nq z</w>\n");
  expect_error("merges.txt", ":3: merged token 'qz</w>' is not in vocab.json");
}

TEST_F(ClipTokenizerFiles, SpecialTokenNotInVocab) {
  write("special_tokens_map.json", R"({"pad_token": "<pad>"})");
  expect_error("special_tokens_map.json", ": pad_token '<pad>' is not in");
  fs::remove(dir_ / "special_tokens_map.json");
  write("tokenizer_config.json", R"({"bos_token": {"content": "<s>"}})");
  expect_error("tokenizer_config.json", ": bos_token '<s>' is not in");
  write("tokenizer_config.json", R"({"eos_token": 7})");
  expect_error("tokenizer_config.json", ": eos_token must be");
  // No file names a BOS and the vocab lacks CLIP's default one.
  fs::remove(dir_ / "tokenizer_config.json");
  write("vocab.json", R"({"a": 0, "<|endoftext|>": 1})");
  write("merges.txt", "#version: 0.2\n");
  expect_error("vocab.json", ": has no bos_token '<|startoftext|>'");
}

TEST_F(ClipTokenizerFiles, MergesReadAsWindowsTextAndWithBlankLines) {
  std::string merges = read("merges.txt");
  std::string crlf;
  for (char c : merges) crlf += c == '\n' ? std::string("\r\n\n") : std::string(1, c);
  write("merges.txt", crlf);
  ClipTokenizer tok = load_ok(dir_);
  ClipTokenizer reference = load_ok(kData);
  for (const char* text : {"a photo of a cat", "an astronaut riding a horse", "Crème Brûlée"})
    EXPECT_EQ(tok.encode(text), reference.encode(text)) << text;
}

// The merge loop against CLIP's on a merges file built to trip shortcuts:
// "ab a" ranks before "a b", so merging one pair at a time would turn "ababa"
// into [aba, b, a</w>]; CLIP merges every "a b" first. Overlapping "a a"
// pairs merge left to right.
TEST_F(ClipTokenizerFiles, MergesLikeClipsLoop) {
  write("vocab.json", R"({"a": 0, "b": 1, "a</w>": 2, "b</w>": 3, "ab": 4, "ab</w>": 5, "aba": 6,
                          "aa": 7, "aa</w>": 8, "<|startoftext|>": 9, "<|endoftext|>": 10})");
  write("merges.txt", "#version: 0.2\nab a\na b\na b</w>\na a\na a</w>\n");
  fs::remove(dir_ / "tokenizer_config.json");
  ClipTokenizer tok = load_ok(dir_);
  EXPECT_EQ(tok.encode("ababa"), (std::vector<int32_t>{4, 4, 2}));  // [ab, ab, a</w>]
  EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{6, 3}));      // [aba, b</w>]
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{7, 2}));   // [aa, a</w>]
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{7, 8}));  // [aa, aa</w>]
  EXPECT_EQ(tok.encode("c"), (std::vector<int32_t>{10}));       // not in the vocab: UNK
}

TEST(ClipTokenizer, HostileInputDoesNotCrash) {
  ClipTokenizer tok = load_ok(kData);
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(state >> 33);
  };
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(next() % 64, '\0');
    for (char& c : bytes) c = char(next() % 256);
    std::vector<int32_t> ids = tok.tokenize(bytes);
    ASSERT_EQ(ids.size(), 77u);
    for (int32_t id : tok.encode(bytes)) ASSERT_TRUE(id >= 0 && size_t(id) < tok.vocab_size());
  }
  // One megabyte-long word: the merge loop must not be quadratic.
  auto start = std::chrono::steady_clock::now();
  std::string word;
  for (int i = 0; i < (1 << 19); ++i) word += "in";
  std::vector<int32_t> ids = tok.encode(word);
  EXPECT_FALSE(ids.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(ClipTokenizer, EncodeIsThreadSafe) {
  ClipTokenizer tok = load_ok(kData);
  nlohmann::json cases = read_cases();
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (const auto& c : cases["cases"]) {
    texts.push_back(c["text"]);
    want.push_back(c["encoded"]);
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round)
        for (size_t i = 0; i < texts.size(); ++i) mismatches[size_t(t)] += tok.encode(texts[i]) != want[i];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace kiln
