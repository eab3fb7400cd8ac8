// Stable Diffusion 1.x, 2.x and XL checkpoints as users hold them: a single
// "original LDM" .safetensors file or a diffusers folder, opened into each
// network's weights (canonical names, mapped from the files) and
// configuration (from the weights' shapes, and a folder's config.json for
// what no shape holds).
//
//   KILN_ASSIGN_OR_RETURN(std::shared_ptr<const SdModel> m, sd_model_open("v1-5-pruned-emaonly.safetensors", {}));
//   KILN_ASSIGN_OR_RETURN(Graph unet, sd_unet_graph(m->unet_config, m->unet));
//
// The family comes from the UNet's weights, as ComfyUI tells them: SDXL has
// add_embedding (LDM's label_emb) and a 2048-wide context, SD 2.x a linear
// proj_in (and, in a single file, OpenCLIP's text tower), SD 1.x a 1x1
// convolution (and CLIP ViT-L in Hugging Face's layout). What a single file
// cannot say is the family's: SD 1.x 8 attention heads, SD 2.x and XL heads
// of 64 channels, which text layers are read. SDXL's two text encoders are
// text_encoder (CLIP ViT-L) and text_encoder_2 (OpenCLIP ViT-bigG, with its
// projection). The SDXL refiner, inpainting and instruct-pix2pix
// checkpoints are recognised and refused.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "models/clip_text.h"
#include "models/lora.h"
#include "models/sd_unet.h"
#include "models/sd_vae.h"

namespace kiln {

enum class SdFamily { kSd1, kSd2, kSdxl };
const char* sd_family_name(SdFamily family);  // "SD 1.x", "SD 2.x", "SDXL"

struct SdModelOptions {
  std::string variant;  // a diffusers folder's weights variant ("fp16"); empty: the plain files
};

struct SdModel {
  std::string path;
  CheckpointFormat format = CheckpointFormat::kSingleFile;
  SdFamily family = SdFamily::kSd1;
  std::string variant;  // the variant a folder's weights were read from
  WeightSet unet{"unet"}, vae{"vae"}, text_encoder{"text_encoder"}, text_encoder_2{"text_encoder_2"};
  SdUnetConfig unet_config;
  VaeConfig vae_config;
  ClipTextConfig text_config, text_config_2;
  bool has_vae = false, has_text_encoder = false, has_text_encoder_2 = false;
  // A folder's tokenizer/, tokenizer_2/ and scheduler/scheduler_config.json;
  // empty for a single file, which holds none of them.
  std::string tokenizer_dir, tokenizer_2_dir, scheduler_config_path;
  // SDXL: an empty negative prompt as zeros (model_index.json's
  // force_zeros_for_empty_prompt; true for SDXL where it is not said).
  bool zero_empty_negative = false;
  std::vector<std::string> files;           // the weight files read
  std::vector<std::string> ignored_keys;    // keys that are no weights: EMA copies, schedule buffers, position ids
  std::vector<std::string> unclaimed_keys;  // keys no network here reads
};

Result<std::shared_ptr<SdModel>> sd_model_open(const std::string& path, const SdModelOptions& options);
// A single file's tensors, already read (`path` names it in messages).
Result<std::shared_ptr<SdModel>> sd_model_from_tensors(NamedTensorList tensors, const std::string& path);

// What a LoRA may change in `m` (models/lora.h): the UNet (its modules also
// by their LDM names) and the text encoders.
std::vector<LoraTarget> sd_lora_targets(SdModel& m);

}  // namespace kiln
