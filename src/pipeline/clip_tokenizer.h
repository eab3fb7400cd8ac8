// CLIP's byte-level BPE tokenizer, giving the ids Hugging Face's (slow)
// CLIPTokenizer gives without ftfy, from a tokenizer folder in the layout
// Hugging Face writes:
//
//   DIR/vocab.json               {"token": id, ...}
//   DIR/merges.txt               "#version: 0.2", then one "left right" merge per line, by rank
//   DIR/special_tokens_map.json  optional: bos/eos/unk/pad tokens (strings or {"content": ...})
//   DIR/tokenizer_config.json    optional: "model_max_length" (77) and the same tokens;
//                                special_tokens_map.json wins where both name one
//
//   KILN_ASSIGN_OR_RETURN(ClipTokenizer tok, ClipTokenizer::load("models/sd15/tokenizer"));
//   std::vector<int32_t> ids = tok.tokenize("a photo of a cat");  // max_length() ids
//
// Text to ids (tools/clip_bpe.py is the Python reference, tested against this):
//   1. UTF-8 is decoded with each invalid sequence replaced by U+FFFD, as
//      Python's bytes.decode("utf-8", errors="replace") does; then the text is
//      split on the special tokens' contents (BOS, EOS, UNK, PAD; leftmost,
//      longest first), each found one becoming its id. SD2 pads with "!", so
//      there each "!" in a prompt is id 0, as in transformers.
//   2. Each piece between: whitespace runs -> one space, trimmed, lowercased
//      as Python's str.lower() (full case mapping: "İ" -> "i̇", final sigma).
//   3. CLIP's word pattern: <|startoftext|>, <|endoftext|>, 's 't 're 've 'm
//      'll 'd, letter runs (\p{L}), single numbers (\p{N}), runs of anything
//      else but whitespace.
//   4. BPE over each word's bytes (as printable characters, "</w>" on the
//      last), lowest merge rank first; symbols not in the vocab give UNK.
//
// encode() and tokenize() are const and keep no cache: one tokenizer may be
// shared by threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln {

class ClipTokenizer {
 public:
  // Every error names the file (and the line of merges.txt) at fault.
  // `pad_token`, when not empty, overrides the folder's (SD 2.x pads with
  // "!" whatever tokenizer folder a single file is paired with).
  static Result<ClipTokenizer> load(const std::string& dir, const std::string& pad_token = "");

  // The ids of `utf8`: no BOS/EOS, no truncation, no padding. Reads at most
  // the first kMaxInputBytes bytes (cut back to a character boundary).
  std::vector<int32_t> encode(std::string_view utf8) const;
  // BOS + encode(utf8) cut to max_length() - 2 + EOS, padded with PAD to
  // max_length() ids: what Stable Diffusion's text encoder takes.
  std::vector<int32_t> tokenize(std::string_view utf8) const;

  int64_t max_length() const { return max_length_; }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  size_t vocab_size() const { return vocab_.size(); }

  static constexpr size_t kMaxInputBytes = size_t(1) << 24;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  ClipTokenizer() = default;
  int32_t id_of(std::string_view token) const;  // -1 when not in the vocab
  void encode_piece(std::string_view utf8, std::vector<int32_t>& out) const;
  void encode_word(std::string_view utf8, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  std::array<int32_t, 256> byte_ids_{};        // each byte's symbol, -1 if not in the vocab
  std::array<int32_t, 256> byte_end_ids_{};    // the same with "</w>"
  std::vector<std::pair<std::string, int32_t>> specials_;  // split out of the text, longest first
  int64_t max_length_ = 77;
  int32_t bos_id_ = 0, eos_id_ = 0, pad_id_ = 0, unk_id_ = 0;
};

}  // namespace kiln
