#include "models/wan_model.h"

#include <filesystem>

#include "core/json_file.h"
#include "models/checkpoint.h"
#include "models/wan_names.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxConfigBytes = size_t(1) << 20;
constexpr const char* kOriginalVae = "Wan2.2_VAE";
constexpr const char* kOriginalT5 = "models_t5_umt5-xxl-enc-bf16";

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// What a file of Wan's own folder is, as .safetensors; its shipped pickle is
// refused with the one-line conversion.
Result<std::string> original_file(const fs::path& dir, const std::string& stem, const char* what) {
  const fs::path converted = dir / (stem + ".safetensors"), pickle = dir / (stem + ".pth");
  if (present(converted)) return converted.string();
  if (present(pickle))
    return invalid_argument(
        "{}: the {} as Wan ships it, a PyTorch pickle, which kiln does not load because unpickling runs whatever "
        "code the file carries; convert it once (in Python: import torch, safetensors.torch; "
        "safetensors.torch.save_file(torch.load(\"{}\", weights_only=True), \"{}\")) and run again",
        pickle.string(), what, pickle.filename().string(), converted.filename().string());
  return not_found("{}: missing (the {} of Wan's folder)", converted.string(), what);
}

// Each file key renamed (nullopt: no parameter of the network, skipped) into `out`.
template <typename Rename>
Status add_renamed(NamedTensorList tensors, const std::string& origin, const Rename& rename, WeightSet& out) {
  for (auto& [key, tensor] : tensors) {
    std::optional<std::string> name = rename(key);
    if (!name) continue;
    KILN_RETURN_IF_ERROR(out.add(std::move(*name), std::move(tensor), origin + ": " + key));
  }
  if (out.empty()) return invalid_argument("{}: none of its tensors is a {} weight", origin, out.label());
  return ok_status();
}

int64_t config_int(const nlohmann::json& config, const char* key, int64_t fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  return json_int_in_range(*it, int64_t(1) << 20).value_or(-1);
}

Result<std::vector<float>> config_floats(const nlohmann::json& config, const char* key, const std::string& file) {
  std::vector<float> out;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return out;
  if (!it->is_array() || it->size() > 4096) return invalid_argument("{}: \"{}\" is no list of numbers", file, key);
  for (const auto& v : *it) {
    if (!v.is_number()) return invalid_argument("{}: \"{}\" is no list of numbers", file, key);
    out.push_back(v.get<float>());
  }
  return out;
}

}  // namespace

const char* wan_layout_name(WanLayout layout) {
  return layout == WanLayout::kDiffusers ? "diffusers folder" : "Wan's own folder";
}

bool is_wan_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  const fs::path dir(path);
  for (const char* file : {"model_index.json", "config.json"}) {
    auto json = read_json_file((dir / file).string(), kMaxConfigBytes, true);
    if (!json.ok()) continue;
    const std::string cls = json->value("_class_name", "");
    if (cls.starts_with("Wan")) return true;
  }
  return false;
}

Result<WanFolder> wan_folder_open(const std::string& path, const std::string& variant) {
  WanFolder f;
  f.path = path;
  f.variant = variant;
  const fs::path dir(path);
  if (present(dir / "model_index.json")) {
    f.layout = WanLayout::kDiffusers;
    for (const char* component : {"transformer", "text_encoder", "vae", "tokenizer", "scheduler"})
      if (!present(dir / component))
        return not_found(
            "{}: missing from the Wan diffusers folder (it holds transformer/, text_encoder/, vae/, "
            "tokenizer/ and scheduler/)",
            (dir / component).string());
    f.tokenizer_model = (dir / "tokenizer" / "spiece.model").string();
    f.scheduler_config_path = (dir / "scheduler" / "scheduler_config.json").string();
  } else {
    f.layout = WanLayout::kOriginal;
    if (!present(dir / "config.json"))
      return not_found("{}: no model_index.json (a diffusers folder) or config.json (Wan's own)", path);
    KILN_RETURN_IF_ERROR(original_file(dir, kOriginalVae, "VAE").status());
    KILN_RETURN_IF_ERROR(original_file(dir, kOriginalT5, "text encoder").status());
    f.tokenizer_model = (dir / "google" / "umt5-xxl" / "spiece.model").string();
  }
  if (!present(f.tokenizer_model))
    return not_found("{}: missing (the tokenizer's SentencePiece model)", f.tokenizer_model);
  return f;
}

Result<std::unique_ptr<WanNetwork<WanTransformerConfig>>> wan_load_transformer(const WanFolder& f) {
  auto net = std::make_unique<WanNetwork<WanTransformerConfig>>(
      WanNetwork<WanTransformerConfig>{WeightSet("transformer"), {}, {}});
  const bool diffusers = f.layout == WanLayout::kDiffusers;
  KILN_ASSIGN_OR_RETURN(ComponentWeights c,
                        read_diffusers_component(f.path, diffusers ? "transformer" : ".", "diffusion_pytorch_model",
                                                 diffusers ? f.variant : ""));
  net->files = c.files;
  const bool original = !c.tensors.empty() && wan_transformer_keys_are_original(c.tensors.front().first);
  const std::string origin = c.files.size() == 1 ? c.files[0] : f.path + " (transformer)";
  if (original)
    KILN_RETURN_IF_ERROR(add_renamed(std::move(c.tensors), origin, wan_transformer_name_from_original, net->weights));
  else
    KILN_RETURN_IF_ERROR(add_renamed(
        std::move(c.tensors), origin, [](const std::string& k) { return std::optional(k); }, net->weights));
  const int64_t heads = config_int(c.config, diffusers ? "num_attention_heads" : "num_heads", 0);
  if (heads < 0) return invalid_argument("{}: the transformer's head count is no small whole number", f.path);
  KILN_ASSIGN_OR_RETURN(net->config, wan_transformer_config_from_weights(net->weights, heads));
  return net;
}

Result<std::unique_ptr<WanNetwork<Umt5Config>>> wan_load_text_encoder(const WanFolder& f) {
  auto net = std::make_unique<WanNetwork<Umt5Config>>(WanNetwork<Umt5Config>{WeightSet("text_encoder"), {}, {}});
  nlohmann::json config = nlohmann::json::object();
  if (f.layout == WanLayout::kDiffusers) {
    KILN_ASSIGN_OR_RETURN(ComponentWeights c, read_diffusers_component(f.path, "text_encoder", "model", f.variant));
    net->files = c.files;
    config = std::move(c.config);
    KILN_RETURN_IF_ERROR(add_renamed(std::move(c.tensors), f.path + "/text_encoder", umt5_name_from_hf, net->weights));
  } else {
    KILN_ASSIGN_OR_RETURN(const std::string file, original_file(fs::path(f.path), kOriginalT5, "text encoder"));
    KILN_ASSIGN_OR_RETURN(NamedTensorList tensors, safetensors_read(file));
    net->files = {file};
    KILN_RETURN_IF_ERROR(add_renamed(std::move(tensors), file, umt5_name_from_original, net->weights));
  }
  const int64_t distance = config_int(config, "relative_attention_max_distance", 128);
  if (distance < 0) return invalid_argument("{}: relative_attention_max_distance is no small whole number", f.path);
  KILN_ASSIGN_OR_RETURN(net->config, umt5_config_from_weights(net->weights, distance));
  return net;
}

Result<std::unique_ptr<WanNetwork<WanVaeConfig>>> wan_load_vae(const WanFolder& f) {
  auto net = std::make_unique<WanNetwork<WanVaeConfig>>(WanNetwork<WanVaeConfig>{WeightSet("vae"), {}, {}});
  std::vector<float> mean, std;
  if (f.layout == WanLayout::kDiffusers) {
    KILN_ASSIGN_OR_RETURN(ComponentWeights c,
                          read_diffusers_component(f.path, "vae", "diffusion_pytorch_model", f.variant));
    net->files = c.files;
    const std::string config_file = f.path + "/vae/config.json";
    KILN_ASSIGN_OR_RETURN(mean, config_floats(c.config, "latents_mean", config_file));
    KILN_ASSIGN_OR_RETURN(std, config_floats(c.config, "latents_std", config_file));
    KILN_RETURN_IF_ERROR(add_renamed(
        std::move(c.tensors), f.path + "/vae", [](const std::string& k) { return std::optional(k); }, net->weights));
  } else {
    KILN_ASSIGN_OR_RETURN(const std::string file, original_file(fs::path(f.path), kOriginalVae, "VAE"));
    KILN_ASSIGN_OR_RETURN(NamedTensorList tensors, safetensors_read(file));
    net->files = {file};
    KILN_RETURN_IF_ERROR(add_renamed(std::move(tensors), file, wan_vae_name_from_original, net->weights));
  }
  KILN_ASSIGN_OR_RETURN(net->config, wan_vae_config_from_weights(net->weights, std::move(mean), std::move(std)));
  return net;
}

}  // namespace kiln
