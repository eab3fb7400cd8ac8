// The prompt's side of a pipeline: a tokenizer and the text encoder that
// turns its ids into the context the denoiser attends to.
//
//   Conditioner c(std::move(tokenizer), std::move(encoder_runner), "text_encoder");
//   KILN_ASSIGN_OR_RETURN(Tensor context, c.encode("a cat", "", 1, &ms));   // [2, 77, D]: [negative, prompt]
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "pipeline/clip_tokenizer.h"
#include "runtime/model_runner.h"

namespace kiln {

class Conditioner {
 public:
  // `encoder` takes input_ids [batch, max_length] of `ids_dtype` and gives
  // the hidden states [batch, max_length, D] as its output `output`.
  Conditioner(ClipTokenizer tokenizer, std::unique_ptr<ModelRunner> encoder, std::string label,
              DType ids_dtype = DType::kI64, size_t output = 0)
      : tokenizer_(std::move(tokenizer)), encoder_(std::move(encoder)), label_(std::move(label)),
        ids_dtype_(ids_dtype), output_(output) {}

  // [2 batch, S, D]: the negative prompt's context in the first `batch` rows,
  // the prompt's in the rest (a copy: the runner's output is overwritten by
  // its next run). Unguided (classifier-free guidance off): [batch, S, D],
  // the prompt's rows alone. *ms: tokenize and encode times, milliseconds.
  Result<Tensor> encode(std::string_view prompt, std::string_view negative, int64_t batch, double ms[2],
                        bool guided = true);

  // Several prompts in one run (a server's batch of requests): every
  // negative prompt's rows first, `count` each in order, then every prompt's
  // (unguided: the prompts' rows alone).
  struct Prompts {
    std::string_view prompt, negative;
    int64_t count = 1;
  };
  Result<Tensor> encode(std::span<const Prompts> members, double ms[2], bool guided = true);

  const ClipTokenizer& tokenizer() const { return tokenizer_; }

 private:
  ClipTokenizer tokenizer_;
  std::unique_ptr<ModelRunner> encoder_;
  std::string label_;  // names it in errors
  DType ids_dtype_;
  size_t output_;
};

}  // namespace kiln
