#include "pipeline/sentencepiece.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cstring>

#include "core/json_file.h"
#include "pipeline/sentencepiece_model.pb.h"

namespace kiln {

namespace {

constexpr size_t kMaxModelBytes = size_t(256) << 20;
constexpr int kMaxPieces = 1 << 22;
constexpr float kUnknownPenalty = 10.0f;
constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581 "▁"
constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

// Bytes of the UTF-8 character `lead` starts (1 for a stray continuation byte).
size_t char_length(unsigned char lead) {
  static constexpr size_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

// Whether `s` starts with a well-formed UTF-8 character; its length.
bool valid_utf8_prefix(std::string_view s, size_t* length) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const size_t n = char_length(b(0));
  *length = n;
  if (n == 1) return b(0) < 0x80;
  if (s.size() < n) return false;
  for (size_t i = 1; i < n; ++i)
    if ((b(i) & 0xC0) != 0x80) return false;
  const uint32_t c = n == 2 ? ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu)
                     : n == 3
                         ? ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu)
                         : ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  return c >= least[n] && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
}

std::string byte_piece(unsigned char b) { return fmt::format("<0x{:02X}>", b); }

}  // namespace

Result<std::unique_ptr<SentencePiece>> SentencePiece::load(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, open_capped(path, kMaxModelBytes));
  spm::ModelProto model;
  if (!model.ParseFromArray(file->data(), int(file->size())) || model.pieces_size() == 0)
    return invalid_argument("{}: not a SentencePiece model", path);
  const spm::TrainerSpec& trainer = model.trainer_spec();
  if (trainer.model_type() != spm::TrainerSpec::UNIGRAM)
    return invalid_argument("{}: a SentencePiece model of type {}; kiln reads unigram models (T5's)", path,
                            int(trainer.model_type()));
  if (model.pieces_size() > kMaxPieces)
    return invalid_argument("{}: {} pieces is past the limit", path, model.pieces_size());

  std::unique_ptr<SentencePiece> sp(new SentencePiece());
  sp->byte_fallback_ = trainer.byte_fallback();
  sp->whitespace_as_suffix_ = trainer.treat_whitespace_as_suffix();
  const spm::NormalizerSpec& norm = model.normalizer_spec();
  sp->add_dummy_prefix_ = norm.add_dummy_prefix();
  sp->remove_extra_whitespaces_ = norm.remove_extra_whitespaces();
  sp->escape_whitespaces_ = norm.escape_whitespaces();

  sp->pieces_.reserve(size_t(model.pieces_size()));
  for (const auto& p : model.pieces()) sp->pieces_.push_back({p.piece(), p.score(), Type(p.type())});
  sp->min_score_ = FLT_MAX, sp->max_score_ = -FLT_MAX;
  sp->unk_id_ = -1;
  for (int32_t id = 0; id < int32_t(sp->pieces_.size()); ++id) {
    const Piece& p = sp->pieces_[size_t(id)];
    if (p.text.empty()) return invalid_argument("{}: piece {} is empty", path, id);
    if (!sp->all_.emplace(p.text, id).second) return invalid_argument("{}: piece '{}' appears twice", path, p.text);
    if (p.type == Type::kNormal || p.type == Type::kUserDefined || p.type == Type::kUnused) {
      sp->matchable_.emplace(p.text, id);
      sp->longest_piece_ = std::max(sp->longest_piece_, p.text.size());
    }
    if (p.type == Type::kUserDefined) sp->user_defined_.push_back(p.text);
    if (p.type == Type::kNormal) {
      sp->min_score_ = std::min(sp->min_score_, p.score);
      sp->max_score_ = std::max(sp->max_score_, p.score);
    }
    if (p.type == Type::kUnknown) sp->unk_id_ = id;
  }
  if (sp->unk_id_ < 0) return invalid_argument("{}: no unknown piece", path);
  sp->eos_id_ = sp->piece_id("</s>");
  if (sp->eos_id_ < 0) return invalid_argument("{}: no </s> piece (T5's end of sequence)", path);

  // The precompiled character map: the trie's size (u32, little-endian),
  // the trie, then the replacement strings.
  const std::string& map = norm.precompiled_charsmap();
  if (!map.empty()) {
    uint32_t trie_bytes = 0;
    if (map.size() < 4) return invalid_argument("{}: a truncated character map", path);
    std::memcpy(&trie_bytes, map.data(), 4);
    if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > map.size() - 4)
      return invalid_argument("{}: a character map whose trie does not fit it", path);
    sp->trie_.resize(trie_bytes / 4);
    std::memcpy(sp->trie_.data(), map.data() + 4, trie_bytes);
    sp->targets_ = map.substr(4 + trie_bytes);
    if (sp->targets_.empty() || sp->targets_.back() != '\0')
      return invalid_argument("{}: a character map whose replacements are not NUL-terminated", path);
  }
  return sp;
}

int32_t SentencePiece::piece_id(std::string_view piece) const {
  auto it = all_.find(piece);
  return it == all_.end() ? -1 : it->second;
}

std::pair<size_t, uint32_t> SentencePiece::longest_rule(std::string_view input) const {
  // darts-clone units: has_leaf bit 8, label in bits 0-7 (and 31), value in
  // bits 0-30 of a leaf, offset in bits 10-31 (shifted by 8 more when bit 9).
  auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  auto label = [](uint32_t unit) { return unit & ((1u << 31) | 0xFFu); };
  size_t best = 0;
  uint32_t value = 0;
  if (trie_.empty()) return {0, 0};
  size_t node = offset(trie_[0]);
  for (size_t i = 0; i < input.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(input[i]);
    node ^= c;
    if (node >= trie_.size()) break;
    const uint32_t unit = trie_[node];
    if (label(unit) != c) break;
    node ^= offset(unit);
    if (node >= trie_.size()) break;
    if ((unit >> 8) & 1) best = i + 1, value = trie_[node] & ((1u << 31) - 1);
  }
  return {best, value};
}

std::pair<std::string_view, size_t> SentencePiece::normalize_prefix(std::string_view input) const {
  // A user-defined symbol is kept as written (the longest one).
  size_t symbol = 0;
  for (std::string_view u : user_defined_)
    if (u.size() > symbol && input.substr(0, u.size()) == u) symbol = u.size();
  if (symbol > 0) return {input.substr(0, symbol), symbol};
  const auto [length, target] = longest_rule(input);
  if (length > 0 && target < targets_.size()) return {std::string_view(targets_.data() + target), length};
  size_t n = 0;
  if (!valid_utf8_prefix(input, &n)) return {kReplacement, 1};  // one byte of malformed UTF-8
  return {input.substr(0, n), n};
}

std::string SentencePiece::normalize(std::string_view input) const {
  std::string out;
  if (input.empty()) return out;
  const std::string_view space = escape_whitespaces_ ? kSpaceSymbol : " ";
  if (remove_extra_whitespaces_)  // leading spaces
    while (!input.empty()) {
      const auto [piece, consumed] = normalize_prefix(input);
      if (piece != " ") break;
      input.remove_prefix(consumed);
    }
  if (!whitespace_as_suffix_ && add_dummy_prefix_) out += space;
  bool previous_space = remove_extra_whitespaces_;
  while (!input.empty()) {
    auto [piece, consumed] = normalize_prefix(input);
    if (previous_space && remove_extra_whitespaces_)
      while (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      for (char c : piece) {
        if (escape_whitespaces_ && c == ' ') out += kSpaceSymbol;
        else out += c;
      }
      previous_space = piece.back() == ' ';
    }
    input.remove_prefix(consumed);
    if (!remove_extra_whitespaces_) previous_space = false;
  }
  if (remove_extra_whitespaces_)
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  if (whitespace_as_suffix_ && add_dummy_prefix_) out += space;
  return out;
}

std::vector<int32_t> SentencePiece::encode(std::string_view text) const {
  const std::string normalized = normalize(text);
  const std::string_view s = normalized;
  const size_t size = s.size();
  struct Best {
    int32_t id = -1;
    float score = 0;
    int64_t starts_at = -1;
  };
  std::vector<Best> ends_at(size + 1);
  const float unknown_score = min_score_ - kUnknownPenalty;
  auto offer = [&](size_t end, size_t start, int32_t id, float score) {
    Best& b = ends_at[end];
    const float total = score + ends_at[start].score;
    if (b.starts_at == -1 || total > b.score) b = {id, total, int64_t(start)};
  };
  for (size_t start = 0; start < size;) {
    const size_t one = std::min(char_length(static_cast<unsigned char>(s[start])), size - start);
    bool covered = false;
    for (size_t length = 1; length <= std::min(longest_piece_, size - start); ++length) {
      auto it = matchable_.find(s.substr(start, length));
      if (it == matchable_.end()) continue;
      const Piece& p = pieces_[size_t(it->second)];
      if (p.type == Type::kUnused) continue;
      offer(start + length, start, it->second,
            p.type == Type::kUserDefined ? float(length) * max_score_ - 0.1f : p.score);
      covered = covered || length == one;
    }
    if (!covered) offer(start + one, start, unk_id_, unknown_score);
    start += one;
  }
  // The best path, back from the end.
  std::vector<std::pair<std::string_view, int32_t>> path;
  for (size_t end = size; end > 0;) {
    const Best& b = ends_at[end];
    path.emplace_back(s.substr(size_t(b.starts_at), end - size_t(b.starts_at)), b.id);
    end = size_t(b.starts_at);
  }
  std::reverse(path.begin(), path.end());
  std::vector<int32_t> ids;
  bool previous_unknown = false;
  for (const auto& [surface, id] : path) {
    const bool unknown = id == unk_id_;
    if (unknown && byte_fallback_) {
      for (char c : surface) {
        const int32_t byte = piece_id(byte_piece(static_cast<unsigned char>(c)));
        ids.push_back(byte >= 0 ? byte : unk_id_);
      }
    } else if (!(unknown && previous_unknown)) {
      ids.push_back(id);
    }
    previous_unknown = unknown;
  }
  return ids;
}

std::vector<int64_t> t5_token_ids(const SentencePiece& sp, std::string_view text, int64_t max_length) {
  const std::vector<int32_t> pieces = sp.encode(text);
  std::vector<int64_t> ids(pieces.begin(), pieces.begin() + std::min<int64_t>(int64_t(pieces.size()), max_length - 1));
  ids.push_back(sp.eos_id());
  return ids;
}

}  // namespace kiln
