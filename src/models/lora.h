// LoRA files: low-rank deltas to a model's weights, merged into them before
// its graphs are built, W += weight * alpha / rank * up . down, so a denoise
// step costs what the base model's does.
//
//   KILN_ASSIGN_OR_RETURN(LoraSpec spec, parse_lora_spec("detail.safetensors:0.8"));
//   KILN_ASSIGN_OR_RETURN(LoraReport r, apply_lora(spec, {{"unet", &m->unet}, {"text_encoder", &m->text_encoder}}));
//
// The layouts read:
//   kohya / A1111    lora_unet_<module>, lora_te_<module> (SD 1.x/2.x's text encoder), lora_te1_ and
//                    lora_te2_ (SDXL's two), each .lora_down.weight [r, in(, kh, kw)],
//                    .lora_up.weight [out, r(, 1, 1)] and .alpha (a scalar; absent: r)
//   diffusers, PEFT  unet.<module>, text_encoder.<module>, text_encoder_2.<module>, each
//                    .lora_A.weight and .lora_B.weight (PEFT) or .lora.down.weight and
//                    .lora.up.weight (older diffusers), and .alpha where there is one
// A module is matched by its weight's canonical name (diffusers' for the
// UNet, transformers' for text encoders; kohya writes the dots as _), or by
// the target's second name for it (the UNet's LDM key: kohya's SDXL LoRAs
// name input_blocks_4_1_...). A LoRA for a 1x1 or 3x3 convolution is merged as
// the product of its flattened matrices.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/weights.h"

namespace kiln {

struct LoraSpec {
  std::string path;
  float weight = 1.0f;
};
// "FILE" or "FILE:WEIGHT" (the weight a finite number; a colon followed by
// no number belongs to the path).
Result<LoraSpec> parse_lora_spec(std::string_view text);

// A network a LoRA may change: its component name ("unet", "text_encoder",
// "text_encoder_2") and weights, and where modules have a second name (the
// UNet's LDM keys), the function giving it for a weight's canonical name.
struct LoraTarget {
  std::string component;
  WeightSet* weights = nullptr;
  std::function<std::optional<std::string>(std::string_view)> also_named = {};
};

struct LoraReport {
  int64_t merged = 0;                  // weights changed (at weight 0: matched, left as they were)
  std::vector<std::string> unmatched;  // the file's modules no target holds, or for no target given
};

// Merges spec's file into the targets' weights (each merged weight a new
// tensor in the weight's own dtype). Errors name the file: not a LoRA
// layout kiln reads, a module whose up and down do not make its weight's
// shape, no module matching any weight (a LoRA for another model).
Result<LoraReport> apply_lora(const LoraSpec& spec, std::span<const LoraTarget> targets);

}  // namespace kiln
