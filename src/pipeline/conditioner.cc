#include "pipeline/conditioner.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kiln {

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A copy of `t` with the rows `zero` marks set to 0.
Result<Tensor> rows_copy(const Tensor& t, const std::vector<bool>& zero) {
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(DType::kF32, t.shape()));
  const size_t row = size_t(t.numel() / t.shape()[0]);
  for (size_t r = 0; r < zero.size(); ++r) {
    float* dst = out.data<float>() + r * row;
    if (zero[r]) std::memset(dst, 0, row * sizeof(float));
    else std::memcpy(dst, t.data<float>() + r * row, row * sizeof(float));
  }
  return out;
}

}  // namespace

Conditioner::Conditioner(std::vector<Tower> towers, std::string label, Options options)
    : towers_(std::move(towers)), label_(std::move(label)), options_(options) {}

Conditioner::Conditioner(ClipTokenizer tokenizer, std::unique_ptr<ModelRunner> encoder, std::string label,
                         DType ids_dtype, size_t output)
    : label_(std::move(label)) {
  towers_.push_back({.tokenizer = std::move(tokenizer), .encoder = std::move(encoder), .ids_dtype = ids_dtype,
                     .hidden_output = output});
}

Result<Conditioning> Conditioner::encode(std::string_view prompt, std::string_view negative, int64_t batch,
                                         double ms[2], bool guided) {
  const Prompts one{prompt, negative, batch};
  return encode(std::span(&one, 1), ms, guided);
}

Result<Conditioning> Conditioner::encode(std::span<const Prompts> members, double ms[2], bool guided) {
  ms[0] = ms[1] = 0;
  // The rows in order: [negative x count for each member (guided only), prompt x count for each member].
  std::vector<std::string_view> texts;
  std::vector<bool> zero;  // rows set to zeros: empty negative prompts, where the model wants them so
  for (const bool negatives : {true, false}) {
    if (negatives && !guided) continue;
    for (const Prompts& m : members) {
      const std::string_view text = negatives ? m.negative : m.prompt;
      texts.insert(texts.end(), size_t(m.count), text);
      zero.insert(zero.end(), size_t(m.count), negatives && text.empty() && options_.zero_empty_negative);
    }
  }
  const int64_t count = int64_t(texts.size());
  std::vector<Tensor> hidden;
  std::optional<Tensor> pooled;
  for (Tower& tower : towers_) {
    auto start = std::chrono::steady_clock::now();
    const int64_t length = tower.tokenizer.max_length();
    KILN_ASSIGN_OR_RETURN(Tensor ids, Tensor::empty(tower.ids_dtype, {count, length}));
    for (int64_t row = 0; row < count; ++row) {
      const std::vector<int32_t> tokens = tower.tokenizer.tokenize(texts[size_t(row)]);
      for (int64_t j = 0; j < length; ++j) {
        if (tower.ids_dtype == DType::kI64) ids.data<int64_t>()[row * length + j] = tokens[size_t(j)];
        else ids.data<int32_t>()[row * length + j] = tokens[size_t(j)];
      }
    }
    ms[0] += ms_since(start);
    start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, tower.encoder->run({{"input_ids", ids}}));
    const size_t needed = std::max(tower.hidden_output, tower.pooled_output.value_or(0)) + 1;
    if (out.size() < needed) return invalid_argument("{}: the text encoder gave {} outputs, not {}", label_, out.size(), needed);
    const Tensor& h = out[tower.hidden_output];
    if (h.dtype() != DType::kF32 || h.rank() != 3 || h.shape()[0] != count ||
        (!hidden.empty() && h.shape()[1] != hidden[0].shape()[1]))
      return invalid_argument("{}: expected a float32 [{}, sequence, width] hidden state, got {} {}", label_, count,
                              dtype_name(h.dtype()), shape_to_string(h.shape()));
    KILN_ASSIGN_OR_RETURN(Tensor rows, rows_copy(h, zero));
    hidden.push_back(std::move(rows));
    if (tower.pooled_output) {
      const Tensor& p = out[*tower.pooled_output];
      if (p.dtype() != DType::kF32 || p.rank() != 2 || p.shape()[0] != count)
        return invalid_argument("{}: expected a float32 [{}, width] pooled output, got {} {}", label_, count,
                                dtype_name(p.dtype()), shape_to_string(p.shape()));
      KILN_ASSIGN_OR_RETURN(pooled, rows_copy(p, zero));
    }
    tower.encoder->release_arena_memory();  // idle until the next prompt: the other stages get its memory
    ms[1] += ms_since(start);
  }
  // The towers' hidden states side by side along the width.
  Tensor context = hidden[0];
  if (hidden.size() > 1) {
    const int64_t sequence = hidden[0].shape()[1];
    int64_t width = 0;
    for (const Tensor& h : hidden) width += h.shape()[2];
    KILN_ASSIGN_OR_RETURN(context, Tensor::empty(DType::kF32, {count, sequence, width}));
    for (int64_t r = 0; r < count * sequence; ++r) {
      float* dst = context.data<float>() + r * width;
      for (const Tensor& h : hidden) {
        const int64_t w = h.shape()[2];
        std::memcpy(dst, h.data<float>() + r * w, size_t(w) * sizeof(float));
        dst += w;
      }
    }
  }
  Conditioning conditions = {{"encoder_hidden_states", std::move(context)}};
  if (pooled) conditions.emplace_back("text_embeds", std::move(*pooled));
  return conditions;
}

}  // namespace kiln
