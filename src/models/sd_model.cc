#include "models/sd_model.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "core/json_file.h"
#include "models/ldm_names.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

// Single files' prefixes (reference doc A.1).
constexpr std::string_view kUnetPrefix = "model.diffusion_model.";
constexpr std::string_view kVaePrefixes[] = {"first_stage_model.", "vae."};
constexpr std::string_view kClipPrefix = "cond_stage_model.transformer.";
constexpr std::string_view kOpenClipPrefixes[] = {"cond_stage_model.model.",
                                                  "conditioner.embedders.0.model."};  // SD 2.x in sgm's layout
// What LDM files carry besides weights: the EMA copies, the training
// schedule's buffers, samplers' and textual inversion's state.
constexpr std::string_view kIgnoredPrefixes[] = {"model_ema.", "denoiser.", "embedding_manager", "lora_"};
constexpr std::string_view kIgnoredKeys[] = {
    "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
    "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod", "posterior_variance",
    "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2", "logvar"};
constexpr int64_t kMaxHeadsEntries = 8;

bool starts_with_any(std::string_view key, std::initializer_list<std::string_view> prefixes, std::string_view* which) {
  for (std::string_view p : prefixes)
    if (key.starts_with(p)) {
      *which = p;
      return true;
    }
  return false;
}

bool ignored_key(std::string_view key) {
  for (std::string_view p : kIgnoredPrefixes)
    if (key.starts_with(p)) return true;
  for (std::string_view k : kIgnoredKeys)
    if (key == k) return true;
  return key.ends_with("position_ids") || key.ends_with("logit_scale");
}

// The mid attention's LDM 1x1 convolutions [C, C, 1, 1] are Linear weights [C, C].
Tensor as_linear_weight(const std::string& name, const Tensor& t) {
  const bool attention = name.find("mid_block.attentions.0.to_") != std::string::npos && name.ends_with(".weight");
  if (attention && t.rank() == 4 && t.shape()[2] == 1 && t.shape()[3] == 1) return t.reshaped({t.shape()[0], t.shape()[1]});
  return t;
}

using Keyed = std::vector<std::pair<std::string, Tensor>>;

Status open_single_file(SdModel& m, NamedTensorList tensors) {
  Keyed unet, vae, clip, open_clip;
  std::string_view vae_prefix = kVaePrefixes[0], open_clip_prefix = kOpenClipPrefixes[0];  // as the file spells them
  for (auto& [key, t] : tensors) {
    std::string_view prefix;
    if (key.starts_with(kUnetPrefix)) unet.emplace_back(key.substr(kUnetPrefix.size()), t);
    else if (starts_with_any(key, {kVaePrefixes[0], kVaePrefixes[1]}, &vae_prefix)) vae.emplace_back(key.substr(vae_prefix.size()), t);
    else if (key.starts_with(kClipPrefix)) clip.emplace_back(key.substr(kClipPrefix.size()), t);
    else if (ignored_key(key)) m.ignored_keys.push_back(key);
    else if (starts_with_any(key, {kOpenClipPrefixes[0], kOpenClipPrefixes[1]}, &prefix)) {
      open_clip_prefix = prefix;
      open_clip.emplace_back(key.substr(prefix.size()), t);
    } else if (key.starts_with("conditioner.embedders."))  // a second text encoder: SDXL (or its refiner)
      return unsupported("{}: a Stable Diffusion XL checkpoint ({}); kiln runs SD 1.x and 2.x", m.path, key);
    else m.unclaimed_keys.push_back(key);
  }
  if (unet.empty())
    return invalid_argument("{}: no Stable Diffusion UNet in it (no {}* keys): not an SD 1.x/2.x checkpoint", m.path,
                            kUnetPrefix);
  if (!clip.empty() && !open_clip.empty())
    return invalid_argument("{}: holds both a CLIP ({}*) and an OpenCLIP ({}*) text encoder", m.path, kClipPrefix,
                            open_clip_prefix);
  auto origin = [&](std::string_view prefix, const std::string& key) { return fmt::format("{}: {}{}", m.path, prefix, key); };

  std::vector<std::string> keys;
  for (const auto& [key, t] : unet) keys.push_back(key);
  const LdmUnetLayout unet_layout = ldm_unet_layout(keys);
  for (const auto& [key, t] : unet) {
    if (auto name = unet_name_from_ldm(key, unet_layout)) KILN_RETURN_IF_ERROR(m.unet.add(*name, t, origin(kUnetPrefix, key)));
    else m.unclaimed_keys.push_back(std::string(kUnetPrefix) + key);
  }
  keys.clear();
  for (const auto& [key, t] : vae) keys.push_back(key);
  const LdmVaeLayout vae_layout = ldm_vae_layout(keys);
  for (const auto& [key, t] : vae) {
    if (auto name = vae_name_from_ldm(key, vae_layout))
      KILN_RETURN_IF_ERROR(m.vae.add(*name, as_linear_weight(*name, t), origin(vae_prefix, key)));
    else m.unclaimed_keys.push_back(std::string(vae_prefix) + key);
  }
  for (const auto& [key, t] : clip) {
    if (auto name = clip_name_from_hf(key)) KILN_RETURN_IF_ERROR(m.text_encoder.add(*name, t, origin(kClipPrefix, key)));
    else m.ignored_keys.push_back(std::string(kClipPrefix) + key);
  }
  KILN_RETURN_IF_ERROR(add_open_clip_weights(open_clip, fmt::format("{}: {}", m.path, open_clip_prefix), m.text_encoder));
  return ok_status();
}

Status open_folder(SdModel& m, const SdModelOptions& options) {
  const fs::path dir(m.path);
  KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file((dir / "model_index.json").string(), size_t(1) << 20, false));
  if (index.contains("text_encoder_2"))
    return unsupported("{}: a Stable Diffusion XL pipeline (text_encoder_2); kiln runs SD 1.x and 2.x", m.path);
  KILN_ASSIGN_OR_RETURN(ComponentWeights unet, read_diffusers_component(m.path, "unet", "diffusion_pytorch_model",
                                                                        options.variant));
  m.variant = unet.variant;
  for (auto& [key, t] : unet.tensors) KILN_RETURN_IF_ERROR(m.unet.add(key, t, fmt::format("{}/unet: {}", m.path, key)));
  m.files.insert(m.files.end(), unet.files.begin(), unet.files.end());
  std::error_code ec;
  if (fs::is_directory(dir / "vae", ec)) {
    KILN_ASSIGN_OR_RETURN(ComponentWeights vae, read_diffusers_component(m.path, "vae", "diffusion_pytorch_model",
                                                                         options.variant));
    for (auto& [key, t] : vae.tensors) {
      const std::string name = vae_name_from_old_diffusers(key);
      KILN_RETURN_IF_ERROR(m.vae.add(name, as_linear_weight(name, t), fmt::format("{}/vae: {}", m.path, key)));
    }
    m.files.insert(m.files.end(), vae.files.begin(), vae.files.end());
  }
  if (fs::is_directory(dir / "text_encoder", ec)) {
    KILN_ASSIGN_OR_RETURN(ComponentWeights text, read_diffusers_component(m.path, "text_encoder", "model",
                                                                          options.variant));
    for (auto& [key, t] : text.tensors) {
      const std::string origin = fmt::format("{}/text_encoder: {}", m.path, key);
      if (auto name = clip_name_from_hf(key)) KILN_RETURN_IF_ERROR(m.text_encoder.add(*name, t, origin));
      else m.ignored_keys.push_back("text_encoder/" + key);
    }
    m.files.insert(m.files.end(), text.files.begin(), text.files.end());
  }
  if (fs::is_directory(dir / "tokenizer", ec)) m.tokenizer_dir = (dir / "tokenizer").string();
  if (fs::exists(dir / "scheduler" / "scheduler_config.json", ec))
    m.scheduler_config_path = (dir / "scheduler" / "scheduler_config.json").string();

  return ok_status();
}

// Heads per level from config.json's value (one count, or one per level).
Result<std::vector<int64_t>> heads_from_config(const nlohmann::json& v, int64_t levels, const std::string& where) {
  std::vector<int64_t> heads;
  if (auto n = json_int_in_range(v, 1024); n && *n > 0) {
    heads.assign(size_t(levels), *n);
  } else if (v.is_array() && int64_t(v.size()) == levels && levels <= kMaxHeadsEntries) {
    for (const auto& e : v) {
      auto n = json_int_in_range(e, 1024);
      if (!n || *n < 1) return invalid_argument("{}: attention heads must be positive integers, got {}", where, v.dump());
      heads.push_back(*n);
    }
  } else {
    return invalid_argument("{}: the attention heads must be a count or one count per level ({}), got {}", where,
                            levels, v.dump());
  }
  return heads;
}

Status configure(SdModel& model, const nlohmann::json& unet_json, const nlohmann::json& vae_json,
                 const nlohmann::json& text_json);

}  // namespace

const char* sd_family_name(SdFamily family) { return family == SdFamily::kSd2 ? "SD 2.x" : "SD 1.x"; }

Result<std::shared_ptr<SdModel>> sd_model_open(const std::string& path, const SdModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(CheckpointFormat format, checkpoint_format(path));
  if (format == CheckpointFormat::kSingleFile) {
    KILN_ASSIGN_OR_RETURN(NamedTensorList tensors, safetensors_read(path));
    return sd_model_from_tensors(std::move(tensors), path);
  }
  if (format != CheckpointFormat::kDiffusersFolder)
    return invalid_argument("{}: an ONNX folder, which kiln imports as ONNX, not as a checkpoint", path);
  auto m = std::make_shared<SdModel>();
  m->path = path;
  m->format = format;
  KILN_RETURN_IF_ERROR(open_folder(*m, options));
  const fs::path dir(path);
  nlohmann::json configs[3];
  const char* components[3] = {"unet", "vae", "text_encoder"};
  for (int i = 0; i < 3; ++i) {
    KILN_ASSIGN_OR_RETURN(configs[i], read_json_file((dir / components[i] / "config.json").string(), size_t(1) << 20, true));
  }
  KILN_RETURN_IF_ERROR(configure(*m, configs[0], configs[1], configs[2]));
  return m;
}

Result<std::shared_ptr<SdModel>> sd_model_from_tensors(NamedTensorList tensors, const std::string& path) {
  auto m = std::make_shared<SdModel>();
  m->path = path;
  m->format = CheckpointFormat::kSingleFile;
  m->files.push_back(path);
  KILN_RETURN_IF_ERROR(open_single_file(*m, std::move(tensors)));
  const nlohmann::json none = nlohmann::json::object();
  KILN_RETURN_IF_ERROR(configure(*m, none, none, none));
  return m;
}

namespace {

// The family and each network's configuration, from the weights and (a
// folder's) config.json files.
Status configure(SdModel& model, const nlohmann::json& unet_json, const nlohmann::json& vae_json,
                 const nlohmann::json& text_json) {
  SdModel* m = &model;
  const std::string& path = m->path;
  const bool single = m->format == CheckpointFormat::kSingleFile;

  // The UNet says which family; a single file's text encoder must agree.
  auto unet = sd_unet_config_from_weights(m->unet);
  if (!unet.ok()) return unet.status().with_context(path);
  m->unet_config = *unet;
  if (m->unet.contains("add_embedding.linear_1.weight"))
    return unsupported("{}: a Stable Diffusion XL UNet (label_emb / add_embedding); kiln runs SD 1.x and 2.x", path);
  if (m->unet_config.in_channels != 4)
    return unsupported("{}: a UNet of {} input channels ({}); kiln runs text-to-image and image-to-image UNets (4)",
                       path, m->unet_config.in_channels,
                       m->unet_config.in_channels == 9 ? "inpainting" : m->unet_config.in_channels == 8 ? "instruct-pix2pix" : "unknown");
  m->family = m->unet_config.linear_projection ? SdFamily::kSd2 : SdFamily::kSd1;
  m->has_text_encoder = !m->text_encoder.empty();
  const bool open_clip_layout = single && m->text_encoder.contains("text_projection");
  if (single && m->has_text_encoder && open_clip_layout != (m->family == SdFamily::kSd2))
    return invalid_argument("{}: the UNet is {}'s but the text encoder {}'s", path, sd_family_name(m->family),
                            open_clip_layout ? "OpenCLIP (SD 2.x)" : "CLIP ViT-L (SD 1.x)");

  // UNet: heads and the rest no shape holds.
  const bool sd2 = m->family == SdFamily::kSd2;
  m->unet_config.heads = sd_unet_heads(m->unet_config, sd2 ? 0 : 8, sd2 ? 64 : 0);
  m->unet_config.upcast_attention = sd2;
  m->unet_config.sample_size = sd2 ? 96 : 64;
  const std::string unet_where = path + "/unet/config.json";
  for (const char* key : {"num_attention_heads", "attention_head_dim"})
    if (auto it = unet_json.find(key); it != unet_json.end() && !it->is_null()) {
      KILN_ASSIGN_OR_RETURN(m->unet_config.heads, heads_from_config(*it, m->unet_config.levels(), unet_where));
      break;
    }
  if (auto it = unet_json.find("upcast_attention"); it != unet_json.end())
    m->unet_config.upcast_attention = it->is_boolean() && it->get<bool>();
  if (auto it = unet_json.find("sample_size"); it != unet_json.end()) {
    auto v = json_int_in_range(*it, 1024);
    if (!v || *v < 1) return invalid_argument("{}: \"sample_size\" must be an integer in [1, 1024]", unet_where);
    m->unet_config.sample_size = *v;
  }
  if (auto it = unet_json.find("block_out_channels"); it != unet_json.end() && *it != nlohmann::json(m->unet_config.block_out_channels))
    return invalid_argument("{}: block_out_channels {} but the weights' levels are {}", unet_where, it->dump(),
                            nlohmann::json(m->unet_config.block_out_channels).dump());
  for (size_t i = 0; i < m->unet_config.heads.size(); ++i)
    if (m->unet_config.block_out_channels[i] % m->unet_config.heads[i])
      return invalid_argument("{}: level {} has {} channels, which do not split into {} heads", path, i,
                              m->unet_config.block_out_channels[i], m->unet_config.heads[i]);

  // VAE.
  m->has_vae = !m->vae.empty();
  if (m->has_vae) {
    auto vae = vae_config_from_weights(m->vae);
    if (!vae.ok()) return vae.status().with_context(path);
    m->vae_config = *vae;
    m->vae_config.sample_size = sd2 ? 768 : 512;
    if (auto it = vae_json.find("scaling_factor"); it != vae_json.end() && !it->is_null()) {
      if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
        return invalid_argument("{}/vae/config.json: \"scaling_factor\" must be a positive number", path);
      m->vae_config.scaling_factor = it->get<float>();
    }
    if (auto it = vae_json.find("sample_size"); it != vae_json.end() && !it->is_null()) {
      auto v = json_int_in_range(*it, 8192);
      if (!v || *v < 8) return invalid_argument("{}/vae/config.json: \"sample_size\" must be an integer in [8, 8192]", path);
      m->vae_config.sample_size = *v;
    }
  }

  // Text encoder: SD 2.x's single files stop at the penultimate layer (a
  // folder's converted encoder has that layer dropped already).
  if (m->has_text_encoder) {
    auto text = clip_text_config_from_weights(m->text_encoder);
    if (!text.ok()) return text.status().with_context(path);
    m->text_config = *text;
    m->text_config.activation = sd2 ? "gelu" : "quick_gelu";
    if (single && sd2) m->text_config.layers -= 1;
    const std::string where = path + "/text_encoder/config.json";
    if (auto it = text_json.find("num_attention_heads"); it != text_json.end()) {
      auto v = json_int_in_range(*it, 1024);
      if (!v || *v < 1) return invalid_argument("{}: \"num_attention_heads\" must be a positive integer", where);
      m->text_config.heads = *v;
    }
    if (auto it = text_json.find("hidden_act"); it != text_json.end()) {
      if (!it->is_string()) return invalid_argument("{}: \"hidden_act\" must be a string", where);
      m->text_config.activation = it->get<std::string>();
    }
    if (auto it = text_json.find("num_hidden_layers"); it != text_json.end()) {
      auto v = json_int_in_range(*it, 1024);
      if (!v || *v < 1 || *v > m->text_config.layers)
        return invalid_argument("{}: \"num_hidden_layers\" must be 1 to the {} layers the weights hold", where,
                                m->text_config.layers);
      m->text_config.layers = *v;
    }
    if (auto it = text_json.find("layer_norm_eps"); it != text_json.end() && it->is_number())
      m->text_config.eps = it->get<float>();
  }
  return ok_status();
}

}  // namespace

}  // namespace kiln
