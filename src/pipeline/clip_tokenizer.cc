// The reference for every choice here is transformers' CLIPTokenizer run
// through tools/clip_bpe.py; where CLIP's Python regex (the `regex` module,
// IGNORECASE) and ICU could disagree, the classes below were checked code
// point by code point against it.
#include "pipeline/clip_tokenizer.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>

#include "core/mapped_file.h"
#include "core/json_file.h"

namespace kiln {

namespace {

constexpr size_t kMaxTableBytes = size_t(16) << 20;  // vocab.json, merges.txt: CLIP's are about 1 MB
constexpr size_t kMaxConfigBytes = size_t(1) << 20;
constexpr int64_t kMaxModelMaxLength = 1 << 16;
constexpr char kStartOfText[] = "<|startoftext|>";
constexpr char kEndOfText[] = "<|endoftext|>";
constexpr char kEndOfWord[] = "</w>";

void append_utf8(std::string& out, UChar32 c) {
  char buf[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, c);
  out.append(buf, size_t(n));
}

// CLIP's byte -> character table: bytes that print map to themselves, the
// others to 256 and up in byte order, so no symbol is a space or a control.
std::array<UChar32, 256> byte_code_points() {
  auto prints = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  std::array<UChar32, 256> table{};
  UChar32 moved = 256;
  for (int b = 0; b < 256; ++b) table[size_t(b)] = prints(b) ? b : moved++;
  return table;
}

// Python's str.isspace(): Unicode White_Space plus U+001C..U+001F (bidi
// separators). The `regex` module's \s is White_Space alone, so those four
// are trimmed at the ends but are "other" characters inside the text.
bool is_python_space(UChar32 c) { return u_isUWhiteSpace(c) || (c >= 0x1C && c <= 0x1F); }

enum class CharClass { kLetter, kNumber, kSpace, kOther, kUnmatched };

CharClass char_class(UChar32 c) {
  uint32_t gc = U_GET_GC_MASK(c);
  if (gc & U_GC_L_MASK) return CharClass::kLetter;
  if (gc & U_GC_N_MASK) return CharClass::kNumber;
  if (u_isUWhiteSpace(c)) return CharClass::kSpace;
  // U+0345 (a combining mark) case-folds to a letter, so under IGNORECASE it
  // matches neither [\p{L}] nor [^\s\p{L}\p{N}]: CLIP's pattern drops it.
  if (c == 0x345) return CharClass::kUnmatched;
  return CharClass::kOther;
}

// Length in UTF-16 units of `pattern` (lowercase ASCII) at `pos`, matched
// case-insensitively as the `regex` module does (simple case folding, so
// U+017F long s matches "s"); 0 when it does not match.
int32_t match_folded(const icu::UnicodeString& s, int32_t pos, std::string_view pattern) {
  int32_t i = pos;
  for (char p : pattern) {
    if (i >= s.length()) return 0;
    UChar32 c = s.char32At(i);
    if (u_foldCase(c, U_FOLD_CASE_DEFAULT) != UChar32(p)) return 0;
    i += U16_LENGTH(c);
  }
  return i - pos;
}

int32_t match_marker_or_contraction(const icu::UnicodeString& s, int32_t pos) {
  static constexpr std::string_view kAlternatives[] = {kStartOfText, kEndOfText, "'s", "'t", "'re",
                                                       "'ve",        "'m",       "'ll", "'d"};
  for (std::string_view a : kAlternatives)
    if (int32_t n = match_folded(s, pos, a)) return n;
  return 0;
}

// A special token as Hugging Face writes it: "text" or {"content": "text", ...}.
// Null or absent leaves `out` as it was.
Status read_special_token(const nlohmann::json& config, const char* key, const std::string& path,
                          std::string* out, std::string* source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return ok_status();
  const nlohmann::json* v = &*it;
  if (v->is_object()) {
    auto content = v->find("content");
    if (content == v->end()) return invalid_argument("{}: {} has no \"content\"", path, key);
    v = &*content;
  }
  if (!v->is_string() || v->get_ref<const std::string&>().empty())
    return invalid_argument("{}: {} must be a non-empty string or {{\"content\": string}}", path, key);
  *out = v->get<std::string>();
  *source = path;
  return ok_status();
}

}  // namespace

Result<ClipTokenizer> ClipTokenizer::load(const std::string& dir, const std::string& pad_token) {
  ClipTokenizer tok;
  const std::string vocab_path = dir + "/vocab.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json vocab, read_json_file(vocab_path, kMaxTableBytes, false));
  std::unordered_map<int32_t, std::string> token_of_id;
  tok.vocab_.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    std::optional<int64_t> id = json_int_in_range(value, INT32_MAX);
    if (!id) return invalid_argument("{}: the id of '{}' is not an integer in [0, {}]", vocab_path, token, INT32_MAX);
    auto [other, fresh] = token_of_id.emplace(int32_t(*id), token);
    if (!fresh)
      return invalid_argument("{}: '{}' and '{}' have the same id {}", vocab_path, other->second, token, *id);
    tok.vocab_.emplace(token, int32_t(*id));
  }
  if (tok.vocab_.empty()) return invalid_argument("{}: the vocabulary is empty", vocab_path);

  const auto bytes = byte_code_points();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, bytes[size_t(b)]);
    tok.byte_ids_[b] = tok.id_of(symbol);
    tok.byte_end_ids_[b] = tok.id_of(symbol + kEndOfWord);
  }

  const std::string merges_path = dir + "/merges.txt";
  KILN_ASSIGN_OR_RETURN(auto merges_file, open_capped(merges_path, kMaxTableBytes));
  std::string_view merges(reinterpret_cast<const char*>(merges_file->data()), merges_file->size());
  int32_t line_no = 0;
  while (!merges.empty()) {
    size_t eol = merges.find('\n');
    std::string_view line = merges.substr(0, eol);
    merges.remove_prefix(eol == std::string_view::npos ? merges.size() : eol + 1);
    ++line_no;
    // The "#version: 0.2" header; after it "#" is an ordinary symbol ("# #").
    if (tok.merges_.empty() && line.starts_with("#version")) continue;
    std::vector<std::string_view> parts;
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
        ++i;
        continue;
      }
      size_t j = line.find_first_of(" \t\r", i);
      if (j == std::string_view::npos) j = line.size();
      parts.push_back(line.substr(i, j - i));
      i = j;
    }
    if (parts.empty()) continue;  // blank lines carry no merge
    if (parts.size() != 2)
      return invalid_argument("{}:{}: expected two symbols separated by a space, got {} in '{}'", merges_path,
                              line_no, parts.size(), line.substr(0, 200));
    int32_t left = tok.id_of(parts[0]), right = tok.id_of(parts[1]);
    for (auto [part, id] : {std::pair{parts[0], left}, std::pair{parts[1], right}})
      if (id < 0) return invalid_argument("{}:{}: symbol '{}' is not in vocab.json", merges_path, line_no, part);
    std::string merged = std::string(parts[0]) + std::string(parts[1]);
    int32_t merged_id = tok.id_of(merged);
    if (merged_id < 0)
      return invalid_argument("{}:{}: merged token '{}' is not in vocab.json", merges_path, line_no, merged);
    // A repeated merge takes its last line's rank, as transformers' dict does.
    tok.merges_[uint64_t(uint32_t(left)) << 32 | uint32_t(right)] = Merge{line_no, merged_id};
  }

  // Defaults are CLIPTokenizer's; special_tokens_map.json is read last
  // because from_pretrained lets it override tokenizer_config.json.
  std::string names[4] = {kStartOfText, kEndOfText, kEndOfText, kEndOfText};
  std::string sources[4];  // the file that named each one; empty for a default
  static constexpr const char* kKeys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
  for (const char* file : {"/tokenizer_config.json", "/special_tokens_map.json"}) {
    const std::string path = dir + file;
    KILN_ASSIGN_OR_RETURN(nlohmann::json config, read_json_file(path, kMaxConfigBytes, true));
    for (int k = 0; k < 4; ++k)
      KILN_RETURN_IF_ERROR(read_special_token(config, kKeys[k], path, &names[k], &sources[k]));
    if (std::string_view(file) != "/tokenizer_config.json") continue;
    auto it = config.find("model_max_length");
    if (it == config.end() || it->is_null()) continue;
    std::optional<int64_t> max_length = json_int_in_range(*it, kMaxModelMaxLength);
    if (!max_length || *max_length < 2)
      return invalid_argument("{}: model_max_length must be an integer in [2, {}]", path, kMaxModelMaxLength);
    tok.max_length_ = *max_length;
  }
  if (!pad_token.empty()) {
    names[3] = pad_token;
    sources[3] = "the model's padding";
  }
  int32_t* ids[4] = {&tok.bos_id_, &tok.eos_id_, &tok.unk_id_, &tok.pad_id_};
  for (int k = 0; k < 4; ++k) {
    *ids[k] = tok.id_of(names[k]);
    if (*ids[k] < 0 && sources[k].empty())
      return invalid_argument("{}: has no {} '{}', CLIPTokenizer's default (neither tokenizer_config.json "
                              "nor special_tokens_map.json names one)", vocab_path, kKeys[k], names[k]);
    if (*ids[k] < 0)
      return invalid_argument("{}: {} '{}' is not in {}", sources[k], kKeys[k], names[k], vocab_path);
    if (std::none_of(tok.specials_.begin(), tok.specials_.end(), [&](const auto& s) { return s.first == names[k]; }))
      tok.specials_.emplace_back(names[k], *ids[k]);
  }
  std::sort(tok.specials_.begin(), tok.specials_.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.first < b.first;
  });
  return tok;
}

int32_t ClipTokenizer::id_of(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view utf8) const {
  if (utf8.size() > kMaxInputBytes) {
    size_t n = kMaxInputBytes;
    for (int back = 0; back < 3 && (uint8_t(utf8[n]) & 0xC0) == 0x80; ++back) --n;
    utf8 = utf8.substr(0, n);
  }
  // Invalid sequences become U+FFFD first, so the special-token search and
  // everything after it see the same text Python's decode would give.
  std::string text;
  icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), int32_t(utf8.size()))).toUTF8String(text);

  std::vector<int32_t> out;
  size_t piece_start = 0;
  for (size_t i = 0; i < text.size();) {
    auto special = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) {
      return std::string_view(text).substr(i).starts_with(s.first);
    });
    if (special == specials_.end()) {
      ++i;
      continue;
    }
    encode_piece(std::string_view(text).substr(piece_start, i - piece_start), out);
    out.push_back(special->second);
    i += special->first.size();
    piece_start = i;
  }
  encode_piece(std::string_view(text).substr(piece_start), out);
  return out;
}

std::vector<int32_t> ClipTokenizer::tokenize(std::string_view utf8) const {
  std::vector<int32_t> ids = encode(utf8);
  const size_t n = size_t(max_length_);
  if (ids.size() > n - 2) ids.resize(n - 2);
  ids.insert(ids.begin(), bos_id_);
  ids.push_back(eos_id_);
  ids.resize(n, pad_id_);
  return ids;
}

void ClipTokenizer::encode_piece(std::string_view utf8, std::vector<int32_t>& out) const {
  if (utf8.empty()) return;
  const icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), int32_t(utf8.size())));

  // Whitespace runs -> one space, then trimmed: the regex's \s+ first and
  // str.strip() after, which trims a few more characters (is_python_space).
  icu::UnicodeString clean;
  bool in_space = false;
  for (int32_t i = 0; i < text.length();) {
    UChar32 c = text.char32At(i);
    i += U16_LENGTH(c);
    if (u_isUWhiteSpace(c)) {
      if (!in_space) clean.append(UChar32(' '));
      in_space = true;
    } else {
      clean.append(c);
      in_space = false;
    }
  }
  int32_t begin = 0, end = clean.length();  // every space character is in the BMP
  while (begin < end && is_python_space(clean[begin])) ++begin;
  while (end > begin && is_python_space(clean[end - 1])) --end;
  // The root locale's full lowercase mapping is str.lower()'s: "İ" -> "i̇",
  // and a final capital sigma -> "ς".
  icu::UnicodeString lower = clean.tempSubStringBetween(begin, end);
  lower.toLower(icu::Locale::getRoot());

  std::string word;
  for (int32_t i = 0; i < lower.length();) {
    UChar32 c = lower.char32At(i);
    int32_t j = i + match_marker_or_contraction(lower, i);
    if (j == i) {
      CharClass cls = char_class(c);
      j = i + U16_LENGTH(c);
      if (cls == CharClass::kSpace || cls == CharClass::kUnmatched) {
        i = j;
        continue;
      }
      if (cls != CharClass::kNumber)  // letters and others run on; a number is one character
        while (j < lower.length() && char_class(lower.char32At(j)) == cls) j += U16_LENGTH(lower.char32At(j));
    }
    word.clear();
    lower.tempSubStringBetween(i, j).toUTF8String(word);
    encode_word(word, out);
    i = j;
  }
}

// BPE over one word. CLIP's loop merges every occurrence of the lowest-ranked
// pair left to right, then looks again; doing it literally is quadratic in
// the word's length, so this keeps the pairs in a heap and takes all entries
// of the lowest rank as one batch, in position order. A merge never recreates
// the pair it merged, so each batch is exactly one pass of CLIP's loop.
void ClipTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word == kStartOfText || word == kEndOfText) {  // CLIP's BPE cache holds these whole
    int32_t id = id_of(word);
    out.push_back(id >= 0 ? id : unk_id_);
    return;
  }
  struct Symbol {
    int32_t id;  // -1: not in the vocab (never merges)
    int32_t prev, next;
    bool alive;
  };
  const int32_t n = int32_t(word.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    uint8_t b = uint8_t(word[size_t(k)]);
    symbols[size_t(k)] = Symbol{k + 1 == n ? byte_end_ids_[b] : byte_ids_[b], k - 1, k + 1 < n ? k + 1 : -1, true};
  }
  auto find_merge = [&](int32_t pos) -> const Merge* {
    const Symbol& s = symbols[size_t(pos)];
    if (s.next < 0 || s.id < 0 || symbols[size_t(s.next)].id < 0) return nullptr;
    auto it = merges_.find(uint64_t(uint32_t(s.id)) << 32 | uint32_t(symbols[size_t(s.next)].id));
    return it == merges_.end() ? nullptr : &it->second;
  };
  using Entry = std::pair<int32_t, int32_t>;  // rank, position
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    if (const Merge* m = find_merge(pos)) heap.emplace(m->rank, pos);
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k);

  std::vector<int32_t> batch;
  while (!heap.empty()) {
    const int32_t rank = heap.top().first;
    batch.clear();
    while (!heap.empty() && heap.top().first == rank) {
      batch.push_back(heap.top().second);
      heap.pop();
    }
    std::sort(batch.begin(), batch.end());
    for (int32_t pos : batch) {
      Symbol& s = symbols[size_t(pos)];
      const Merge* m = s.alive ? find_merge(pos) : nullptr;
      if (m == nullptr || m->rank != rank) continue;  // stale, or consumed earlier in this batch
      Symbol& right = symbols[size_t(s.next)];
      right.alive = false;
      s.id = m->merged_id;
      s.next = right.next;
      if (right.next >= 0) symbols[size_t(right.next)].prev = pos;
      push(s.prev);
      push(pos);
    }
  }
  for (int32_t k = 0; k >= 0; k = symbols[size_t(k)].next)
    out.push_back(symbols[size_t(k)].id >= 0 ? symbols[size_t(k)].id : unk_id_);
}

}  // namespace kiln
