// The files users hold, opened for the model builders: a single
// .safetensors file, or a diffusers folder whose components each hold a
// config.json and their weights (plain, a `.fp16` variant, or sharded with
// an index). Every tensor is mapped, not read. Formats and sources:
// shared/reference/sd-checkpoints.md, sections B and E.1.
//
//   KILN_ASSIGN_OR_RETURN(CheckpointFormat format, checkpoint_format(path));
//   KILN_ASSIGN_OR_RETURN(ComponentWeights unet,
//                         read_diffusers_component(dir, "unet", "diffusion_pytorch_model", /*variant=*/""));
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "safetensors/safetensors.h"

namespace kiln {

enum class CheckpointFormat {
  kSingleFile,       // FILE.safetensors: every network under its original LDM keys
  kDiffusersFolder,  // DIR/model_index.json, DIR/unet/*.safetensors, ...
  kOnnxFolder,       // optimum's export: DIR/model_index.json, DIR/unet/model.onnx, ...
};
const char* checkpoint_format_name(CheckpointFormat format);

// What `path` holds, told by its name and contents. A pickle (.ckpt, .pt,
// .pth, .bin) is refused with how to convert it: loading one runs the code
// it carries.
Result<CheckpointFormat> checkpoint_format(const std::string& path);
// Whether `path` names a model kiln reads natively or through ONNX: a
// .safetensors file or a folder with model_index.json (false for .onnx,
// .kplan and anything else).
bool is_checkpoint_path(const std::string& path);

// One component of a diffusers folder.
struct ComponentWeights {
  NamedTensorList tensors;          // the file keys, mapped
  std::vector<std::string> files;   // what was read
  std::string variant;              // "" or the variant read ("fp16")
  nlohmann::json config;            // config.json; an empty object when absent
};

// DIR/<component>/: config.json and the weights, as diffusers names them:
// <stem>.safetensors, <stem>.<variant>.safetensors, or the shards that
// <stem>.safetensors.index[.<variant>].json lists. With `variant` empty the
// plain files are read, or a variant's when it is the only one there; with
// a variant named, that variant's (an error when it is missing).
Result<ComponentWeights> read_diffusers_component(const std::string& dir, const std::string& component,
                                                  const std::string& stem, const std::string& variant);

}  // namespace kiln
