// The prompt's side of a pipeline: tokenizers and the text encoders that
// turn their ids into the conditions the denoiser reads.
//
//   Conditioner c(std::move(tokenizer), std::move(encoder_runner), "text_encoder");
//   KILN_ASSIGN_OR_RETURN(Conditioning cond, c.encode("a cat", "", 1, &ms));
//   // cond[0]: encoder_hidden_states [2, 77, D]: [negative, prompt]
//
// Most models have one text encoder. SDXL has two (CLIP ViT-L and OpenCLIP
// ViT-bigG), each with its own tokenizer: their hidden states are
// concatenated along the width (768 + 1280 = 2048), and the second one's
// pooled, projected output is the UNet's text_embeds.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/clip_tokenizer.h"
#include "pipeline/denoiser.h"
#include "runtime/model_runner.h"

namespace kiln {

class Conditioner {
 public:
  // One text encoder: input_ids [rows, max_length] of `ids_dtype` in, the
  // hidden states [rows, max_length, D] as its output `hidden_output`; and,
  // where it has one, the pooled text [rows, P] as `pooled_output`.
  struct Tower {
    ClipTokenizer tokenizer;
    std::unique_ptr<ModelRunner> encoder;
    DType ids_dtype = DType::kI64;
    size_t hidden_output = 0;
    std::optional<size_t> pooled_output;
  };
  struct Options {
    // An empty negative prompt's rows are zeros instead of the encoding of
    // "" (diffusers' force_zeros_for_empty_prompt, SDXL's default).
    bool zero_empty_negative = false;
  };

  Conditioner(std::vector<Tower> towers, std::string label, Options options);
  Conditioner(ClipTokenizer tokenizer, std::unique_ptr<ModelRunner> encoder, std::string label,
              DType ids_dtype = DType::kI64, size_t output = 0);

  // encoder_hidden_states [2 batch, S, D]: the negative prompt's in the
  // first `batch` rows, the prompt's in the rest (copies: a runner's output
  // is overwritten by its next run); then text_embeds [2 batch, P] where a
  // tower pools. Unguided (classifier-free guidance off): the prompt's rows
  // alone. *ms: tokenize and encode times, milliseconds.
  Result<Conditioning> encode(std::string_view prompt, std::string_view negative, int64_t batch, double ms[2],
                              bool guided = true);

  // Several prompts in one run (a server's batch of requests): every
  // negative prompt's rows first, `count` each in order, then every prompt's
  // (unguided: the prompts' rows alone).
  struct Prompts {
    std::string_view prompt, negative;
    int64_t count = 1;
  };
  Result<Conditioning> encode(std::span<const Prompts> members, double ms[2], bool guided = true);

  const ClipTokenizer& tokenizer() const { return towers_.front().tokenizer; }
  // Frees the text encoders' compiled plans and weights until the next encode.
  void release() {
    for (Tower& tower : towers_) tower.encoder->release();
  }

 private:
  std::vector<Tower> towers_;
  std::string label_;  // names it in errors
  Options options_;
};

}  // namespace kiln
