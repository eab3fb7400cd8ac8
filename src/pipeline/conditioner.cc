#include "pipeline/conditioner.h"

#include <chrono>
#include <cstring>

namespace kiln {

namespace {
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Result<Tensor> Conditioner::encode(std::string_view prompt, std::string_view negative, int64_t batch, double ms[2],
                                   bool guided) {
  const Prompts one{prompt, negative, batch};
  return encode(std::span(&one, 1), ms, guided);
}

Result<Tensor> Conditioner::encode(std::span<const Prompts> members, double ms[2], bool guided) {
  auto start = std::chrono::steady_clock::now();
  // The rows in order: [negative x count for each member (guided only), prompt x count for each member].
  std::vector<std::vector<int32_t>> rows;
  for (const bool negatives : {true, false}) {
    if (negatives && !guided) continue;
    for (const Prompts& m : members) {
      const std::vector<int32_t> tokens = tokenizer_.tokenize(negatives ? m.negative : m.prompt);
      rows.insert(rows.end(), size_t(m.count), tokens);
    }
  }
  const int64_t length = tokenizer_.max_length(), count = int64_t(rows.size());
  KILN_ASSIGN_OR_RETURN(Tensor ids, Tensor::empty(ids_dtype_, {count, length}));
  for (int64_t row = 0; row < count; ++row) {
    const std::vector<int32_t>& src = rows[size_t(row)];
    for (int64_t j = 0; j < length; ++j) {
      if (ids_dtype_ == DType::kI64) ids.data<int64_t>()[row * length + j] = src[size_t(j)];
      else ids.data<int32_t>()[row * length + j] = src[size_t(j)];
    }
  }
  ms[0] = ms_since(start);
  start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, encoder_->run({{"input_ids", ids}}));
  if (output_ >= out.size()) return invalid_argument("{}: too few outputs", label_);
  const Tensor& hidden = out[output_];
  if (hidden.dtype() != DType::kF32 || hidden.rank() != 3 || hidden.shape()[0] != count)
    return invalid_argument("{}: expected a float32 [{}, sequence, width] hidden state, got {} {}", label_, count,
                            dtype_name(hidden.dtype()), shape_to_string(hidden.shape()));
  KILN_ASSIGN_OR_RETURN(Tensor context, Tensor::empty(DType::kF32, hidden.shape()));
  std::memcpy(context.raw(), hidden.raw(), hidden.nbytes());
  encoder_->release_arena_memory();  // idle until the next prompt: the other stages get its memory
  ms[1] = ms_since(start);
  return context;
}

}  // namespace kiln
