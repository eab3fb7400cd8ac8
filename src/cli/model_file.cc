#include "cli/model_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <tuple>

#include "models/sd_model.h"
#include "models/wan_model.h"
#include "npy/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/plan_file.h"
#include "safetensors/safetensors.h"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kComponents[] = {"unet", "text_encoder", "text_encoder_2", "vae_decoder", "vae_encoder"};
constexpr const char* kWanComponents[] = {"transformer", "text_encoder", "vae_decoder", "vae_encoder"};
// The sizes a Wan network is built for (not dims of its inputs).
const std::set<std::string> kWanBuildSizes = {"batch", "frames", "height", "width", "first_frame_clean", "tokens"};

bool has_extension(const std::string& path, std::string_view ext) { return fs::path(path).extension() == ext; }

// A .safetensors file holding a Stable Diffusion UNet (a single-file
// checkpoint), as opposed to a bag of tensors.
Result<bool> holds_sd_unet(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(NamedTensorList tensors, safetensors_read(path));
  for (const auto& [name, t] : tensors)
    if (name.starts_with("model.diffusion_model.")) return true;
  return false;
}

Status check_component(const ModelRef& ref) {
  for (const char* c : kComponents)
    if (ref.component == c) return ok_status();
  return invalid_argument(
      "--component {}: not a network of {} (unet, text_encoder, text_encoder_2 (SDXL), vae_decoder, vae_encoder)",
      ref.component, ref.path);
}

Result<Graph> checkpoint_graph(const ModelRef& ref, std::map<std::string, int64_t>* default_dims) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<SdModel> m, sd_model_open(ref.path, {.variant = ref.variant}));
  const std::string& c = ref.component;
  const int64_t size = m->unet_config.sample_size;
  std::map<std::string, int64_t> dims;
  Result<Graph> graph = invalid_argument("no such component");
  if (c == "unet") {
    dims = {{"batch", 2}, {"height", size}, {"width", size}, {"sequence", m->text_config.max_positions}};
    graph = sd_unet_graph(m->unet_config, m->unet);
  } else if (c == "text_encoder") {
    if (!m->has_text_encoder) return not_found("{}: no text encoder in it", ref.path);
    dims = {{"batch", 2}};
    graph = clip_text_graph(m->text_config, m->text_encoder);
  } else if (c == "text_encoder_2") {
    if (!m->has_text_encoder_2) return not_found("{}: no second text encoder in it (SDXL's)", ref.path);
    dims = {{"batch", 2}};
    graph = clip_text_graph(m->text_config_2, m->text_encoder_2);
  } else {
    if (!m->has_vae) return not_found("{}: no VAE in it", ref.path);
    const int64_t side = c == "vae_decoder" ? size : size * m->vae_config.factor();
    dims = {{"batch", 1}, {"height", side}, {"width", side}};
    graph = c == "vae_decoder" ? vae_decoder_graph(m->vae_config, m->vae) : vae_encoder_graph(m->vae_config, m->vae);
  }
  if (!graph.ok()) return graph.status().with_context(ref.label());
  if (default_dims) *default_dims = std::move(dims);
  return graph;
}

// A Wan folder's network, built for ref.sizes (defaults: a 17-frame 256x256
// video's latents, 16 prompt tokens).
Result<Graph> wan_graph(const ModelRef& ref, std::map<std::string, int64_t>* default_dims) {
  const std::string c = ref.component.empty() ? "transformer" : ref.component;
  if (std::find(std::begin(kWanComponents), std::end(kWanComponents), c) == std::end(kWanComponents))
    return invalid_argument("--component {}: not a network of {} (transformer, text_encoder, vae_decoder, vae_encoder)",
                            c, ref.path);
  for (const auto& [name, value] : ref.sizes)
    if (!kWanBuildSizes.count(name) && name != "text_rows")
      return invalid_argument("--dim {}: not a size of {}'s {}", name, ref.path, c);
  auto size = [&](const char* name, int64_t fallback) {
    auto it = ref.sizes.find(name);
    return it == ref.sizes.end() ? fallback : it->second;
  };
  KILN_ASSIGN_OR_RETURN(WanFolder folder, wan_folder_open(ref.path, ref.variant));
  Result<Graph> graph = invalid_argument("no such component");
  std::map<std::string, int64_t> dims;
  if (c == "transformer") {
    KILN_ASSIGN_OR_RETURN(auto dit, wan_load_transformer(folder));
    const WanVideoShape shape{.batch = size("batch", 2), .frames = size("frames", 5), .height = size("height", 16),
                              .width = size("width", 16)};
    dims = {{"text_rows", 512}};
    graph = wan_transformer_graph(dit->config, dit->weights, shape, size("first_frame_clean", 0) != 0);
  } else if (c == "text_encoder") {
    KILN_ASSIGN_OR_RETURN(auto text, wan_load_text_encoder(folder));
    graph = umt5_graph(text->config, text->weights, size("tokens", 16));
  } else {
    KILN_ASSIGN_OR_RETURN(auto vae, wan_load_vae(folder));
    if (c == "vae_encoder") {
      graph = wan_vae_encoder_graph(vae->config, vae->weights, size("height", 256), size("width", 256));
    } else {
      auto decoder = wan_vae_decoder_graph(vae->config, vae->weights, size("height", 16), size("width", 16), false);
      if (decoder.ok()) graph = std::move(decoder->graph);
      else graph = decoder.status();
    }
  }
  if (!graph.ok()) return graph.status().with_context(ref.label());
  if (default_dims) *default_dims = std::move(dims);
  return graph;
}

std::string count(int64_t n) {  // 1234567 -> "1,234,567"
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string weights_line(const WeightSet& w) {
  std::vector<std::string> dtypes;
  for (const auto& [dtype, n] : w.dtype_counts()) dtypes.push_back(fmt::format("{} {}", n, dtype_name(dtype)));
  return fmt::format("{} parameters in {} tensors ({})", count(w.parameter_count()), w.size(), fmt::join(dtypes, ", "));
}

// The keys nothing reads, a few by name and the rest counted.
std::string key_list(const std::vector<std::string>& keys, size_t shown) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < shown; ++i) out += fmt::format("    {}\n", keys[i]);
  if (keys.size() > shown) out += fmt::format("    ... and {} more\n", keys.size() - shown);
  return out;
}

}  // namespace

std::string ModelRef::label() const { return component.empty() ? path : fmt::format("{} ({})", path, component); }

void add_model_flags(CLI::App* cmd, ModelRef& ref, const std::string& what) {
  CLI::Option* positional = cmd->add_option("MODEL", ref.path, what);
  cmd->add_option("--model,-m", ref.path, "the same as MODEL")->excludes(positional);
  cmd->add_option("--component", ref.component,
                  "the network of a model folder or checkpoint: unet (default), text_encoder, text_encoder_2 "
                  "(SDXL's second), vae_decoder or vae_encoder; of a Wan folder: transformer (default), text_encoder, vae_decoder (a later "
                  "latent frame's call, with its caches) or vae_encoder");
  cmd->add_option("--variant", ref.variant, "a diffusers folder's weights variant, e.g. fp16");
}

Result<Graph> load_model(const ModelRef& ref, std::map<std::string, int64_t>* default_dims) {
  if (ref.path.empty()) return invalid_argument("a MODEL is required (an ONNX file, a model folder or a checkpoint)");
  if (looks_like_plan_file(ref.path))
    return invalid_argument("{}: a compiled .kplan, which only kiln run loads; give the ONNX model it was compiled from",
                            ref.path);
  if (has_extension(ref.path, ".npy")) {
    KILN_ASSIGN_OR_RETURN(Tensor t, npy_read(ref.path));
    return invalid_argument("{}: holds tensors only, not a model; give an ONNX file or a checkpoint", ref.path);
  }
  if (is_wan_folder(ref.path)) return wan_graph(ref, default_dims);
  bool checkpoint = is_checkpoint_path(ref.path);
  if (checkpoint && has_extension(ref.path, ".safetensors")) {
    KILN_ASSIGN_OR_RETURN(checkpoint, holds_sd_unet(ref.path));
    if (!checkpoint)
      return invalid_argument("{}: holds tensors only, not a model; give an ONNX file or a checkpoint (this holds "
                              "no Stable Diffusion UNet)",
                              ref.path);
  }
  if (!checkpoint) {
    if (!ref.component.empty() || !ref.variant.empty())
      return invalid_argument("{}: --component and --variant pick from a model folder or checkpoint, not a file",
                              ref.path);
    return onnx_import_file(ref.path);
  }
  ModelRef r = ref;
  if (r.component.empty()) r.component = "unet";
  KILN_RETURN_IF_ERROR(check_component(r));
  KILN_ASSIGN_OR_RETURN(CheckpointFormat format, checkpoint_format(r.path));
  if (format != CheckpointFormat::kOnnxFolder) return checkpoint_graph(r, default_dims);
  if (!r.variant.empty()) return invalid_argument("{}: --variant picks a diffusers folder's weights", r.path);
  const std::string file = (fs::path(r.path) / r.component / "model.onnx").string();
  if (!fs::exists(file)) return not_found("{}: missing from the model folder", file);
  return onnx_import_file(file);
}

std::vector<std::string> input_dim_flags(const ModelRef& ref, const std::vector<std::string>& flags) {
  if (!is_wan_folder(ref.path)) return flags;
  std::vector<std::string> out;
  for (const std::string& f : flags)
    if (!kWanBuildSizes.count(f.substr(0, f.find('=')))) out.push_back(f);
  return out;
}

std::map<std::string, int64_t> input_dims_of(const ModelRef& ref, std::map<std::string, int64_t> dims) {
  if (is_wan_folder(ref.path))
    for (const std::string& name : kWanBuildSizes) dims.erase(name);
  return dims;
}

Result<std::pair<std::string, std::string>> split_assignment(const std::string& s, std::string_view flag) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    return invalid_argument("{} '{}': expected NAME=VALUE", flag, s);
  return std::make_pair(s.substr(0, eq), s.substr(eq + 1));
}

Result<std::map<std::string, int64_t>> parse_dims(const std::vector<std::string>& flags) {
  std::map<std::string, int64_t> dims;
  for (const auto& d : flags) {
    KILN_ASSIGN_OR_RETURN(auto kv, split_assignment(d, "--dim"));
    char* end = nullptr;
    long long v = std::strtoll(kv.second.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > (int64_t(1) << 40))
      return invalid_argument("--dim {}: '{}' is not a valid size", kv.first, kv.second);
    dims[kv.first] = v;
  }
  return dims;
}

std::optional<Result<std::string>> describe_weights_file(const std::string& path) {
  if (has_extension(path, ".safetensors")) {
    auto sd = holds_sd_unet(path);
    if (sd.ok() && *sd) return std::nullopt;  // a checkpoint: describe_checkpoint's
    auto tensors = safetensors_read(path);
    if (!tensors.ok()) return Result<std::string>(tensors.status());
    std::string out = fmt::format("{}: {} tensors\n", path, tensors->size());
    for (const auto& [name, t] : *tensors)
      out += fmt::format("  {}: {}{}\n", name, dtype_name(t.dtype()), shape_to_string(t.shape()));
    return Result<std::string>(out);
  }
  if (has_extension(path, ".npy")) {
    auto t = npy_read(path);
    if (!t.ok()) return Result<std::string>(t.status());
    return Result<std::string>(fmt::format("{}: {}{}\n", path, dtype_name(t->dtype()), shape_to_string(t->shape())));
  }
  return std::nullopt;
}

// `kiln show WAN_FOLDER`: each network's configuration, dtypes and
// parameters, and the keys its build leaves unread.
Result<std::string> describe_wan(const ModelRef& ref) {
  KILN_ASSIGN_OR_RETURN(WanFolder f, wan_folder_open(ref.path, ref.variant));
  std::string out = fmt::format("{}: Wan2.2 TI2V, {}{}\n", ref.path, wan_layout_name(f.layout),
                                f.variant.empty() ? "" : fmt::format(", variant {}", f.variant));
  std::vector<std::string> unused;
  auto note_unused = [&](const WeightSet& w) {
    for (const std::string& name : w.unused()) unused.push_back(w.origin(name));
  };
  {
    KILN_ASSIGN_OR_RETURN(auto dit, wan_load_transformer(f));
    const WanTransformerConfig& c = dit->config;
    KILN_RETURN_IF_ERROR(wan_transformer_graph(c, dit->weights, {.batch = 1, .frames = 1, .height = 2, .width = 2}, false)
                             .status()
                             .with_context(ref.path));
    out += fmt::format("transformer: {}\n", weights_line(dit->weights));
    out += fmt::format("  {} layers, width {} = {} heads x {}, FFN {}, patch {}x{}x{}, {} latent channels in, {} out, "
                       "text width {}\n",
                       c.layers, c.dim, c.heads, c.head_dim(), c.ffn_dim, c.patch_t, c.patch_h, c.patch_w,
                       c.in_channels, c.out_channels, c.text_dim);
    note_unused(dit->weights);
  }
  {
    KILN_ASSIGN_OR_RETURN(auto text, wan_load_text_encoder(f));
    const Umt5Config& c = text->config;
    KILN_RETURN_IF_ERROR(umt5_graph(c, text->weights, 1).status().with_context(ref.path));
    out += fmt::format("text_encoder: {}\n", weights_line(text->weights));
    out += fmt::format("  UMT5, {} layers, width {} = {} heads x {}, FFN {} (gated tanh GELU), vocabulary {}, {} "
                       "position buckets to distance {}\n",
                       c.layers, c.d_model, c.heads, c.d_kv, c.d_ff, count(c.vocab), c.buckets, c.max_distance);
    note_unused(text->weights);
  }
  {
    KILN_ASSIGN_OR_RETURN(auto vae, wan_load_vae(f));
    const WanVaeConfig& c = vae->config;
    const int64_t side = 2 * c.spatial_factor;
    KILN_RETURN_IF_ERROR(wan_vae_decoder_graph(c, vae->weights, 2, 2, false).status().with_context(ref.path));
    if (c.has_encoder)
      KILN_RETURN_IF_ERROR(wan_vae_encoder_graph(c, vae->weights, side, side).status().with_context(ref.path));
    out += fmt::format("vae: {}\n", weights_line(vae->weights));
    out += fmt::format("  {} latent channels, {}x{}x{} compression (frames x height x width), {}\n", c.z_dim,
                       c.temporal_factor, c.spatial_factor, c.spatial_factor,
                       c.has_encoder ? "encoder and decoder" : "decoder only");
    note_unused(vae->weights);
  }
  out += fmt::format("tokenizer: {}\n", f.tokenizer_model);
  if (!f.scheduler_config_path.empty()) out += fmt::format("scheduler: {}\n", f.scheduler_config_path);
  std::sort(unused.begin(), unused.end());
  out += fmt::format("keys unused: {}\n{}", unused.size(), key_list(unused, 20));
  return out;
}

std::optional<Result<std::string>> describe_checkpoint(const ModelRef& ref) {
  if (is_wan_folder(ref.path)) return describe_wan(ref);
  if (!is_checkpoint_path(ref.path)) return std::nullopt;
  auto format = checkpoint_format(ref.path);
  if (format.ok() && *format == CheckpointFormat::kOnnxFolder) return std::nullopt;
  auto opened = sd_model_open(ref.path, {.variant = ref.variant});
  if (!opened.ok()) return Result<std::string>(opened.status());
  const SdModel& m = **opened;
  // Building every network marks the weights each reads: what is left is unused.
  for (Status s : {sd_unet_graph(m.unet_config, m.unet).status(),
                   m.has_text_encoder ? clip_text_graph(m.text_config, m.text_encoder).status() : ok_status(),
                   m.has_text_encoder_2 ? clip_text_graph(m.text_config_2, m.text_encoder_2).status() : ok_status(),
                   m.has_vae && m.vae_config.has_decoder ? vae_decoder_graph(m.vae_config, m.vae).status() : ok_status(),
                   m.has_vae && m.vae_config.has_encoder ? vae_encoder_graph(m.vae_config, m.vae).status() : ok_status()})
    if (!s.ok()) return Result<std::string>(s.with_context(ref.path));
  const SdUnetConfig& u = m.unet_config;
  std::string out = fmt::format("{}: {}, {}{}\n", ref.path, sd_family_name(m.family), checkpoint_format_name(m.format),
                                m.variant.empty() ? "" : fmt::format(", variant {}", m.variant));
  out += fmt::format("unet: {}\n", weights_line(m.unet));
  out += fmt::format(
      "  {} levels of {} channels, resnets a level {}, attention depth down {} up {} middle {}, heads {}, context "
      "{}, proj_in {}, {}time embedding {}, {} latent channels, trained at {}x{} latents\n",
      u.levels(), fmt::join(u.block_out_channels, "/"), u.layers_per_block, fmt::join(u.down_depth, "/"),
      fmt::join(u.up_depth, "/"), u.mid_depth, fmt::join(u.heads, "/"), u.context_dim,
      u.linear_projection ? "linear" : "1x1 conv", u.upcast_attention ? "attention upcast to f32, " : "",
      u.time_embed_dim, u.in_channels, u.sample_size, u.sample_size);
  if (u.addition_time_embed_dim)
    out += fmt::format("  added conditioning (SDXL): a {}-wide pooled text and 6 size ids embedded {} wide\n",
                       u.text_embeds_dim, u.addition_time_embed_dim);
  if (m.has_vae) {
    const VaeConfig& v = m.vae_config;
    out += fmt::format("vae: {}\n", weights_line(m.vae));
    out += fmt::format("  {} levels of {} channels, resnets a level {}, {} latent channels, {}x per side, scaling "
                       "factor {}, {}\n",
                       v.block_out_channels.size(), fmt::join(v.block_out_channels, "/"), v.layers_per_block,
                       v.latent_channels, v.factor(), v.scaling_factor,
                       v.has_encoder && v.has_decoder ? "encoder and decoder" : v.has_encoder ? "encoder only" : "decoder only");
  }
  for (const auto& [name, t, w, has] : {std::tuple{"text_encoder", &m.text_config, &m.text_encoder, m.has_text_encoder},
                                         std::tuple{"text_encoder_2", &m.text_config_2, &m.text_encoder_2,
                                                    m.has_text_encoder_2}}) {
    if (!has) continue;
    out += fmt::format("{}: {}\n", name, weights_line(*w));
    out += fmt::format("  CLIP, width {}, {} layers run, {} heads, MLP {}, {}, vocabulary {}, {} positions; the "
                       "context: layer {}'s output{}{}\n",
                       t->width, t->layers, t->heads, t->intermediate, t->activation, count(t->vocab_size),
                       t->max_positions, t->layers - t->hidden_skip, t->final_norm ? ", final-normed" : "",
                       t->pooled ? "; the pooled text through text_projection" : "");
  }
  // By the keys the files give them (a packed tensor read as three counts once).
  std::vector<std::string> unused = m.unclaimed_keys;
  for (const WeightSet* w : {&m.unet, &m.vae, &m.text_encoder, &m.text_encoder_2})
    for (const std::string& name : w->unused()) unused.push_back(w->origin(name));
  std::sort(unused.begin(), unused.end());
  unused.erase(std::unique(unused.begin(), unused.end()), unused.end());
  out += fmt::format("keys ignored: {} (EMA copies, schedule buffers, position ids)\n", m.ignored_keys.size());
  out += fmt::format("keys unused: {}\n{}", unused.size(), key_list(unused, 20));
  return Result<std::string>(out);
}

}  // namespace kiln::cli
