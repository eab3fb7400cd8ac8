#include "pipeline/denoiser.h"

namespace kiln {

Result<Tensor> Denoiser::predict(const Tensor& model_in, const Tensor& t, const Conditioning& conditions) {
  NamedTensors inputs = {{"sample", model_in}, {"timestep", t}};
  inputs.insert(inputs.end(), conditions.begin(), conditions.end());
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, runner_->run(inputs));
  if (out.empty() || out[0].dtype() != DType::kF32 || out[0].shape() != model_in.shape())
    return invalid_argument("{}: the prediction is {} {}, expected f32 {}", spec_.label,
                            out.empty() ? "missing" : dtype_name(out[0].dtype()),
                            out.empty() ? "" : shape_to_string(out[0].shape()), shape_to_string(model_in.shape()));
  return out[0];
}

}  // namespace kiln
