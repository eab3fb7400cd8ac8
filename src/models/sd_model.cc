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
// SDXL's two text encoders, in sgm's layout: CLIP ViT-L (Hugging Face's keys), OpenCLIP ViT-bigG.
constexpr std::string_view kSdxlClipPrefix = "conditioner.embedders.0.transformer.";
constexpr std::string_view kSdxlOpenClipPrefix = "conditioner.embedders.1.model.";
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
  Keyed unet, vae, clip, open_clip, open_clip_2;
  std::string_view vae_prefix = kVaePrefixes[0], open_clip_prefix = kOpenClipPrefixes[0];  // as the file spells them
  std::string_view clip_prefix = kClipPrefix;
  for (auto& [key, t] : tensors) {
    std::string_view prefix;
    if (key.starts_with(kUnetPrefix)) unet.emplace_back(key.substr(kUnetPrefix.size()), t);
    else if (starts_with_any(key, {kVaePrefixes[0], kVaePrefixes[1]}, &vae_prefix)) vae.emplace_back(key.substr(vae_prefix.size()), t);
    else if (starts_with_any(key, {kClipPrefix, kSdxlClipPrefix}, &prefix)) {
      clip_prefix = prefix;
      clip.emplace_back(key.substr(prefix.size()), t);
    } else if (ignored_key(key)) m.ignored_keys.push_back(key);
    else if (starts_with_any(key, {kOpenClipPrefixes[0], kOpenClipPrefixes[1]}, &prefix)) {
      open_clip_prefix = prefix;
      open_clip.emplace_back(key.substr(prefix.size()), t);
    } else if (key.starts_with(kSdxlOpenClipPrefix)) {
      open_clip_2.emplace_back(key.substr(kSdxlOpenClipPrefix.size()), t);
    } else m.unclaimed_keys.push_back(key);
  }
  if (unet.empty())
    return invalid_argument("{}: no Stable Diffusion UNet in it (no {}* keys): not an SD 1.x/2.x checkpoint", m.path,
                            kUnetPrefix);
  if (!clip.empty() && !open_clip.empty())
    return invalid_argument("{}: holds both a CLIP ({}*) and an OpenCLIP ({}*) text encoder", m.path, clip_prefix,
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
    if (auto name = clip_name_from_hf(key)) KILN_RETURN_IF_ERROR(m.text_encoder.add(*name, t, origin(clip_prefix, key)));
    else m.ignored_keys.push_back(std::string(clip_prefix) + key);
  }
  KILN_RETURN_IF_ERROR(add_open_clip_weights(open_clip, fmt::format("{}: {}", m.path, open_clip_prefix), m.text_encoder));
  KILN_RETURN_IF_ERROR(
      add_open_clip_weights(open_clip_2, fmt::format("{}: {}", m.path, kSdxlOpenClipPrefix), m.text_encoder_2));
  return ok_status();
}

// DIR/<component>/: a transformers CLIP text encoder (CLIPTextModel, or
// CLIPTextModelWithProjection with its text_projection).
Status read_text_encoder(SdModel& m, const std::string& component, const SdModelOptions& options, WeightSet& out) {
  KILN_ASSIGN_OR_RETURN(ComponentWeights text, read_diffusers_component(m.path, component, "model", options.variant));
  for (auto& [key, t] : text.tensors) {
    const std::string origin = fmt::format("{}/{}: {}", m.path, component, key);
    if (auto name = clip_name_from_hf(key)) KILN_RETURN_IF_ERROR(out.add(*name, t, origin));
    else m.ignored_keys.push_back(component + "/" + key);
  }
  m.files.insert(m.files.end(), text.files.begin(), text.files.end());
  return ok_status();
}

Status open_folder(SdModel& m, const SdModelOptions& options) {
  const fs::path dir(m.path);
  KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file((dir / "model_index.json").string(), size_t(1) << 20, false));
  if (index.contains("text_encoder_2") && !fs::is_directory(dir / "text_encoder_2"))
    return not_found("{}: model_index.json names text_encoder_2, which the folder lacks", m.path);
  m.zero_empty_negative = true;  // diffusers' default; SDXL is the only family that reads it
  if (auto it = index.find("force_zeros_for_empty_prompt"); it != index.end()) {
    if (!it->is_boolean())
      return invalid_argument("{}/model_index.json: \"force_zeros_for_empty_prompt\" must be true or false", m.path);
    m.zero_empty_negative = it->get<bool>();
  }
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
  if (fs::is_directory(dir / "text_encoder", ec))
    KILN_RETURN_IF_ERROR(read_text_encoder(m, "text_encoder", options, m.text_encoder));
  if (fs::is_directory(dir / "text_encoder_2", ec))
    KILN_RETURN_IF_ERROR(read_text_encoder(m, "text_encoder_2", options, m.text_encoder_2));
  if (fs::is_directory(dir / "tokenizer", ec)) m.tokenizer_dir = (dir / "tokenizer").string();
  if (fs::is_directory(dir / "tokenizer_2", ec)) m.tokenizer_2_dir = (dir / "tokenizer_2").string();
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

// The config.json files a folder's components hold (empty objects for a single file).
struct ComponentConfigs {
  nlohmann::json unet = nlohmann::json::object(), vae = nlohmann::json::object(),
                 text = nlohmann::json::object(), text_2 = nlohmann::json::object();
};
Status configure(SdModel& model, const ComponentConfigs& configs);

}  // namespace

const char* sd_family_name(SdFamily family) {
  switch (family) {
    case SdFamily::kSd1: return "SD 1.x";
    case SdFamily::kSd2: return "SD 2.x";
    case SdFamily::kSdxl: return "SDXL";
  }
  return "?";
}

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
  ComponentConfigs configs;
  for (auto [component, json] : {std::pair{"unet", &configs.unet}, std::pair{"vae", &configs.vae},
                                 std::pair{"text_encoder", &configs.text}, std::pair{"text_encoder_2", &configs.text_2}}) {
    KILN_ASSIGN_OR_RETURN(*json, read_json_file((dir / component / "config.json").string(), size_t(1) << 20, true));
  }
  KILN_RETURN_IF_ERROR(configure(*m, configs));
  return m;
}

std::vector<LoraTarget> sd_lora_targets(SdModel& m) {
  const SdUnetConfig& c = m.unet_config;
  const LdmUnetLayout layout{.layers_per_block = c.layers_per_block, .middle_blocks = c.mid_depth ? 3 : 2};
  std::vector<bool> up_attends;
  for (int64_t depth : c.up_depth) up_attends.push_back(depth > 0);
  auto ldm = [layout, up_attends](std::string_view name) { return ldm_name_from_unet(name, layout, up_attends); };
  return {{"unet", &m.unet, ldm}, {"text_encoder", &m.text_encoder}, {"text_encoder_2", &m.text_encoder_2}};
}

Result<std::shared_ptr<SdModel>> sd_model_from_tensors(NamedTensorList tensors, const std::string& path) {
  auto m = std::make_shared<SdModel>();
  m->path = path;
  m->format = CheckpointFormat::kSingleFile;
  m->files.push_back(path);
  KILN_RETURN_IF_ERROR(open_single_file(*m, std::move(tensors)));
  KILN_RETURN_IF_ERROR(configure(*m, {}));
  return m;
}

namespace {

// How a family reads a text encoder.
struct TextReading {
  const char* activation = "quick_gelu";  // unless config.json says otherwise
  int64_t unread_layers = 0;  // last layers not run (SD 2.x's single files, SDXL's first encoder)
  int64_t hidden_skip = 0;    // ClipTextConfig's
  bool final_norm = true, pooled = false;
};

// A text encoder's configuration from its weights and config.json (`where`
// names it), read as `reading` says.
Result<ClipTextConfig> text_config(const WeightSet& weights, const nlohmann::json& json, const std::string& where,
                                   const TextReading& reading) {
  auto from_weights = clip_text_config_from_weights(weights);
  if (!from_weights.ok()) return from_weights.status().with_context(where);
  ClipTextConfig c = *from_weights;
  c.activation = reading.activation;
  c.final_norm = reading.final_norm;
  c.hidden_skip = reading.hidden_skip;
  c.pooled = reading.pooled;
  if (auto it = json.find("num_attention_heads"); it != json.end()) {
    auto v = json_int_in_range(*it, 1024);
    if (!v || *v < 1) return invalid_argument("{}: \"num_attention_heads\" must be a positive integer", where);
    c.heads = *v;
  }
  if (auto it = json.find("hidden_act"); it != json.end()) {
    if (!it->is_string()) return invalid_argument("{}: \"hidden_act\" must be a string", where);
    c.activation = it->get<std::string>();
  }
  if (auto it = json.find("num_hidden_layers"); it != json.end()) {
    auto v = json_int_in_range(*it, 1024);
    if (!v || *v < 1 || *v > c.layers)
      return invalid_argument("{}: \"num_hidden_layers\" must be 1 to the {} layers the weights hold", where, c.layers);
    c.layers = *v;
  }
  if (auto it = json.find("layer_norm_eps"); it != json.end() && it->is_number()) c.eps = it->get<float>();
  c.layers -= reading.unread_layers;
  if (c.layers < 1 + c.hidden_skip)
    return invalid_argument("{}: {} layers are too few for this family's reading", where, c.layers + reading.unread_layers);
  return c;
}

// The family and each network's configuration, from the weights and (a
// folder's) config.json files.
Status configure(SdModel& model, const ComponentConfigs& configs) {
  SdModel* m = &model;
  const std::string& path = m->path;
  const bool single = m->format == CheckpointFormat::kSingleFile;
  const nlohmann::json& unet_json = configs.unet;

  // The UNet says which family; a single file's text encoder must agree.
  auto unet = sd_unet_config_from_weights(m->unet);
  if (!unet.ok()) return unet.status().with_context(path);
  m->unet_config = *unet;
  if (m->unet_config.in_channels != 4)
    return unsupported("{}: a UNet of {} input channels ({}); kiln runs text-to-image and image-to-image UNets (4)",
                       path, m->unet_config.in_channels,
                       m->unet_config.in_channels == 9 ? "inpainting" : m->unet_config.in_channels == 8 ? "instruct-pix2pix" : "unknown");
  const bool xl = m->unet_config.addition_time_embed_dim > 0;
  // The refiner: a 1280-wide context (bigG alone) and 5 time ids (an aesthetic score for the crop's place).
  if (xl && m->unet_config.context_dim == 1280 && m->unet_config.text_embeds_dim + 6 * 256 == 2560)
    return unsupported("{}: an SDXL refiner (a 1280-wide context, add_embedding of 2560); kiln runs SDXL base "
                       "models, not the refiner yet",
                       path);
  m->family = xl ? SdFamily::kSdxl : m->unet_config.linear_projection ? SdFamily::kSd2 : SdFamily::kSd1;
  m->zero_empty_negative = xl && (single || m->zero_empty_negative);
  m->has_text_encoder = !m->text_encoder.empty();
  m->has_text_encoder_2 = !m->text_encoder_2.empty();
  const bool open_clip_layout = single && m->text_encoder.contains("text_projection");
  if (single && !xl && m->has_text_encoder && open_clip_layout != (m->family == SdFamily::kSd2))
    return invalid_argument("{}: the UNet is {}'s but the text encoder {}'s", path, sd_family_name(m->family),
                            open_clip_layout ? "OpenCLIP (SD 2.x)" : "CLIP ViT-L (SD 1.x)");
  if (m->has_text_encoder_2 && !xl)
    return invalid_argument("{}: a second text encoder (SDXL's) beside a {} UNet", path, sd_family_name(m->family));
  if (xl && m->has_text_encoder != m->has_text_encoder_2)
    return invalid_argument("{}: an SDXL model needs both its text encoders; it holds only the {}", path,
                            m->has_text_encoder ? "first (CLIP ViT-L)" : "second (OpenCLIP ViT-bigG)");

  // UNet: heads and the rest no shape holds.
  const bool sd2 = m->family == SdFamily::kSd2;
  m->unet_config.heads = sd_unet_heads(m->unet_config, sd2 || xl ? 0 : 8, sd2 || xl ? 64 : 0);
  m->unet_config.upcast_attention = sd2;
  m->unet_config.sample_size = xl ? 128 : sd2 ? 96 : 64;
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
  if (auto it = unet_json.find("addition_time_embed_dim"); xl && it != unet_json.end() && !it->is_null()) {
    auto v = json_int_in_range(*it, 4096);
    const int64_t inputs = m->unet_config.text_embeds_dim + 6 * m->unet_config.addition_time_embed_dim;
    if (!v || *v < 1 || inputs - 6 * *v < 1)
      return invalid_argument("{}: \"addition_time_embed_dim\" must be a positive integer that leaves add_embedding's "
                              "{} inputs room for the text",
                              unet_where, inputs);
    m->unet_config.addition_time_embed_dim = *v;
    m->unet_config.text_embeds_dim = inputs - 6 * *v;
  }
  if (auto it = unet_json.find("block_out_channels"); it != unet_json.end() && *it != nlohmann::json(m->unet_config.block_out_channels))
    return invalid_argument("{}: block_out_channels {} but the weights' levels are {}", unet_where, it->dump(),
                            nlohmann::json(m->unet_config.block_out_channels).dump());
  for (size_t i = 0; i < m->unet_config.heads.size(); ++i) {
    // The heads of a level with attention (down, or up at the same
    // resolution); the middle block's are the last level's.
    const size_t up = m->unet_config.heads.size() - 1 - i;
    const bool attends = m->unet_config.down_depth[i] || m->unet_config.up_depth[up] ||
                         (up == 0 && m->unet_config.mid_depth);
    if (attends && (m->unet_config.heads[i] < 1 || m->unet_config.block_out_channels[i] % m->unet_config.heads[i]))
      return invalid_argument("{}: level {} has {} channels, which do not split into {} heads", path, i,
                              m->unet_config.block_out_channels[i], m->unet_config.heads[i]);
  }

  // VAE.
  m->has_vae = !m->vae.empty();
  if (m->has_vae) {
    auto vae = vae_config_from_weights(m->vae);
    if (!vae.ok()) return vae.status().with_context(path);
    m->vae_config = *vae;
    m->vae_config.sample_size = xl ? 1024 : sd2 ? 768 : 512;
    if (xl) m->vae_config.scaling_factor = 0.13025f;  // SDXL's latent scale (reference doc A.4)
    const nlohmann::json& vae_json = configs.vae;
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

  // Text encoders. SD 1.x reads the last layer, final-normed. SD 2.x the
  // penultimate, final-normed: its single files hold the last layer (unread),
  // a folder's converted encoder has it dropped already. SDXL reads both
  // encoders' penultimate layers without the final norm, and the second's
  // pooled text.
  if (m->has_text_encoder) {
    TextReading first{.activation = sd2 ? "gelu" : "quick_gelu", .unread_layers = single && sd2 ? 1 : 0};
    if (xl) first.unread_layers = 1, first.final_norm = false;
    KILN_ASSIGN_OR_RETURN(m->text_config, text_config(m->text_encoder, configs.text, path + "/text_encoder", first));
  }
  if (m->has_text_encoder_2) {
    const TextReading second{.activation = "gelu", .hidden_skip = 1, .final_norm = false, .pooled = true};
    KILN_ASSIGN_OR_RETURN(m->text_config_2,
                          text_config(m->text_encoder_2, configs.text_2, path + "/text_encoder_2", second));
  }
  return ok_status();
}

}  // namespace

}  // namespace kiln
