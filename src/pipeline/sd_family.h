// Stable Diffusion 1.x and 2.x: a pipeline's roles wired from each form the
// models come in.
//
//   optimum ONNX folder   DIR/{text_encoder,unet,vae_decoder,vae_encoder}/model.onnx imported,
//                         tokenizer/ and scheduler/ from the folder
//   single file           FILE.safetensors built natively (models/sd_model.h); the tokenizer's
//                         vocab.json and merges.txt from --tokenizer DIR, DIR/tokenizer beside
//                         the file, or $KILN_TOKENIZER_DIR; the family's scheduler config
//   diffusers folder      built natively, tokenizer/ and scheduler/ from the folder
//
// A single file carries no scheduler config: it gets its family's reference
// one, SD 1.5's (PNDM, scaled_linear 0.00085-0.012, 1000 steps, steps_offset
// 1, leading spacing: kiln runs euler over it) and SD 2.1's (DDIM, the same
// betas, v-prediction), so a single file and its diffusers folder generate
// the same image. Its prediction type: SD 1.x epsilon; SD 2.x v-prediction
// (the 768-pixel 2.0-v and 2.1 models; --prediction eps for the 512-pixel
// base models, which also makes 512 the default size). SD 2.x pads prompts
// with "!" (id 0), SD 1.x with the end token.
#pragma once

#include "pipeline/pipeline.h"

namespace kiln {

Result<PipelineParts> sd_pipeline_parts(const std::string& path, const PipelineOptions& options);

// "eps" / "epsilon" or "v" / "v_prediction"; an error naming the choices.
Result<PredictionType> parse_prediction_type(std::string_view name);

}  // namespace kiln
