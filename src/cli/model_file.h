// What the model commands (show, run, bench, profile, compile) take as
// MODEL: an ONNX file; or a model folder or checkpoint (optimum's ONNX
// folder, a .safetensors single file, a diffusers folder), of which
// --component picks the network (unet by default); or a Wan2.2 folder
// (transformer by default), whose networks are built for the sizes --dim
// gives (each has defaults: a 17-frame 256x256 video). Weight-only files
// (.safetensors without a model, .npy) are validated and then refused with
// a clear message, so a user who passes the wrong file learns what it is.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::cli {

struct ModelRef {
  std::string path;
  std::string component;  // unet | text_encoder | vae_decoder | vae_encoder (folders and checkpoints)
  std::string variant;    // a diffusers folder's weights variant
  // A Wan network's build sizes (--dim): transformer batch, frames, height,
  // width (latent cells) and first_frame_clean; text_encoder tokens;
  // vae_decoder height, width (latent); vae_encoder height, width (pixels).
  std::map<std::string, int64_t> sizes;
  // "PATH" for a file, "PATH (unet)" for a folder's or checkpoint's network.
  std::string label() const;
};

// MODEL (positional) or --model, --component and --variant.
void add_model_flags(CLI::App* cmd, ModelRef& ref, const std::string& what);

// The model's graph; `default_dims`, when given, gets the sizes its
// symbolic dims usually take (a checkpoint's network: batch 2 for CFG, the
// UNet's trained size, 77 tokens), which --dim overrides.
Result<Graph> load_model(const ModelRef& ref, std::map<std::string, int64_t>* default_dims = nullptr);

// The --dim flags that size a model's inputs: all of them, except those a
// network built for fixed sizes (a Wan folder's) was built with.
std::vector<std::string> input_dim_flags(const ModelRef& ref, const std::vector<std::string>& flags);
std::map<std::string, int64_t> input_dims_of(const ModelRef& ref, std::map<std::string, int64_t> dims);

// "NAME=VALUE" split in two; an error naming `flag` otherwise.
Result<std::pair<std::string, std::string>> split_assignment(const std::string& s, std::string_view flag);
// --dim NAME=VALUE flags as a map of sizes.
Result<std::map<std::string, int64_t>> parse_dims(const std::vector<std::string>& flags);

// A one-line-per-tensor description of a weights file (for `kiln show`);
// nullopt when `path` is not a plain weights file (an SD checkpoint is a model).
std::optional<Result<std::string>> describe_weights_file(const std::string& path);
// `kiln show CHECKPOINT`: its family, each network's configuration, dtypes,
// parameter counts and the keys no network reads; nullopt when `path` is no
// checkpoint (an ONNX file or folder).
std::optional<Result<std::string>> describe_checkpoint(const ModelRef& ref);

}  // namespace kiln::cli
