// Wan2.2 TI2V-5B as users hold it, opened one network at a time (the text
// encoder's 11 GB can be let go before the transformer's 10 GB are mapped):
//
//   diffusers folder  (Wan-AI/Wan2.2-TI2V-5B-Diffusers) model_index.json, transformer/, text_encoder/
//                     (UMT5EncoderModel, sharded), vae/, tokenizer/spiece.model, scheduler/
//   Wan's own folder  (Wan-AI/Wan2.2-TI2V-5B) config.json (WanModel), diffusion_pytorch_model*.safetensors
//                     under Wan's names, Wan2.2_VAE and models_t5_umt5-xxl-enc-bf16 (shipped as pickles:
//                     converted once to .safetensors, as the refusal explains), google/umt5-xxl/spiece.model
//
//   KILN_ASSIGN_OR_RETURN(WanFolder folder, wan_folder_open("Wan2.2-TI2V-5B-Diffusers", {}));
//   KILN_ASSIGN_OR_RETURN(auto text, wan_load_text_encoder(folder));   // text->weights, text->config
//   ...
//   text.reset();                                                     // unmapped
//   KILN_ASSIGN_OR_RETURN(auto dit, wan_load_transformer(folder));
//
// Every network's architecture comes from its weights' shapes (models/
// wan_transformer.h, umt5.h, wan_vae.h); a config.json gives only what no
// shape holds (heads, the position-bias distance, the latent statistics).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/umt5.h"
#include "models/wan_transformer.h"
#include "models/wan_vae.h"

namespace kiln {

enum class WanLayout { kDiffusers, kOriginal };
const char* wan_layout_name(WanLayout layout);

struct WanFolder {
  std::string path;
  WanLayout layout = WanLayout::kDiffusers;
  std::string variant;                // a diffusers folder's weights variant; "" for the plain files
  std::string tokenizer_model;        // spiece.model
  std::string scheduler_config_path;  // a diffusers folder's; empty for Wan's own (it has none)
};

// Whether `path` is a folder holding a Wan pipeline (either layout).
bool is_wan_folder(const std::string& path);
// Checks the layout and that every component is there (an error naming the
// first one missing, or a pickle to convert); maps nothing.
Result<WanFolder> wan_folder_open(const std::string& path, const std::string& variant);

template <typename Config>
struct WanNetwork {
  WeightSet weights;
  Config config;
  std::vector<std::string> files;  // the files mapped
};
Result<std::unique_ptr<WanNetwork<WanTransformerConfig>>> wan_load_transformer(const WanFolder& folder);
Result<std::unique_ptr<WanNetwork<Umt5Config>>> wan_load_text_encoder(const WanFolder& folder);
Result<std::unique_ptr<WanNetwork<WanVaeConfig>>> wan_load_vae(const WanFolder& folder);

}  // namespace kiln
