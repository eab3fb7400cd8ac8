// SentencePiece's unigram encoding, as T5's tokenizers use it (google/
// umt5-xxl's spiece.model, for Wan): a model file's pieces and normalizer,
// and text to ids exactly as the library's SentencePieceProcessor::Encode
// gives them.
//
//   KILN_ASSIGN_OR_RETURN(auto sp, SentencePiece::load("tokenizer/spiece.model"));
//   std::vector<int32_t> ids = sp->encode("a cat on a mat");
//
// Why not Debian's libsentencepiece: it carries its own copy of protobuf
// (3.14) and exports its symbols, which collide with the system protobuf
// (3.21) that kiln's ONNX import links; in one process one of the two fails
// its version check at the first parse. So the model is read with the
// system protobuf (sentencepiece_model.proto: the fields encoding needs) and
// encoded as the library does, step by step:
//   1. normalize: each longest match in the precompiled character map (a
//      darts-clone double-array trie over the rule's source strings, then
//      their NUL-terminated targets) replaced, else the UTF-8 character
//      kept; user-defined symbols left alone; leading, trailing and repeated
//      spaces dropped; "▁" for every space, one in front (add_dummy_prefix).
//   2. Viterbi over the normalized bytes: every piece (normal, user-defined;
//      not unused) ending at each position scored by its log-probability (a
//      user-defined one by length * max score - 0.1, so it always wins), a
//      character no piece covers by the unknown id at min score - 10; ties
//      to the first path found.
//   3. unknown pieces: as their UTF-8 bytes' <0xXX> pieces with
//      byte_fallback, else each run merged into one.
// tests/pipeline/sentencepiece_test.cc checks it against the library on
// models trained by spm_train (tools/make_tiny_wan.py).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kiln {

class SentencePiece {
 public:
  // An error naming the file when it is missing, no SentencePiece model, or
  // no unigram one.
  static Result<std::unique_ptr<SentencePiece>> load(const std::string& path);

  std::vector<int32_t> encode(std::string_view utf8) const;
  // Step 1 alone.
  std::string normalize(std::string_view utf8) const;

  // The id of `piece` (any type); -1 when the model has none.
  int32_t piece_id(std::string_view piece) const;
  int32_t eos_id() const { return eos_id_; }
  int32_t unk_id() const { return unk_id_; }
  int64_t size() const { return int64_t(pieces_.size()); }

 private:
  enum class Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Piece {
    std::string text;
    float score = 0;
    Type type = Type::kNormal;
  };
  SentencePiece() = default;
  // The normalized form and byte count of the longest rule matching the
  // front of `input` (or of its first character).
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view input) const;
  // Darts-clone's common-prefix search over the character map's trie: the
  // longest match's length (0: none) and its target's offset.
  std::pair<size_t, uint32_t> longest_rule(std::string_view input) const;

  std::vector<Piece> pieces_;
  std::unordered_map<std::string_view, int32_t> matchable_;  // normal, user-defined and unused pieces
  std::unordered_map<std::string_view, int32_t> all_;        // every piece
  std::vector<std::string_view> user_defined_;
  size_t longest_piece_ = 0;  // bytes
  float min_score_ = 0, max_score_ = 0;
  int32_t unk_id_ = 0, eos_id_ = -1;
  bool byte_fallback_ = false, add_dummy_prefix_ = true, remove_extra_whitespaces_ = true, escape_whitespaces_ = true,
       whitespace_as_suffix_ = false;
  std::vector<uint32_t> trie_;  // the character map's double array
  std::string targets_;         // its NUL-terminated replacement strings
};

// T5's ids for (cleaned) text, as Hugging Face's T5Tokenizer with
// add_special_tokens: the pieces' ids cut to max_length - 1, then </s>. No
// padding: the text encoder runs on the real tokens (models/umt5.h).
std::vector<int64_t> t5_token_ids(const SentencePiece& sp, std::string_view text, int64_t max_length = 512);

}  // namespace kiln
