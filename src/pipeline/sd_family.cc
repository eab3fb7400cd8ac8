#include "pipeline/sd_family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/json_file.h"
#include "models/sd_model.h"
#include "onnx/onnx_import.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxConfigBytes = size_t(1) << 20;

// The scheduler configs a single file gets (diffusers' SD 1.5 and SD 2.1 folders'):
// shared/reference/sd-checkpoints.md, B.1.
constexpr std::string_view kSd15Scheduler = R"({"_class_name": "PNDMScheduler", "beta_start": 0.00085,
  "beta_end": 0.012, "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": false,
  "skip_prk_steps": true, "steps_offset": 1, "clip_sample": false, "prediction_type": "epsilon"})";
constexpr std::string_view kSd21Scheduler = R"({"_class_name": "DDIMScheduler", "beta_start": 0.00085,
  "beta_end": 0.012, "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": false,
  "skip_prk_steps": true, "steps_offset": 1, "clip_sample": false, "prediction_type": "v_prediction"})";
// stabilityai/stable-diffusion-xl-base-1.0's: Euler, epsilon, leading spacing.
constexpr std::string_view kSdxlScheduler = R"({"_class_name": "EulerDiscreteScheduler", "beta_start": 0.00085,
  "beta_end": 0.012, "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "steps_offset": 1,
  "timestep_spacing": "leading", "use_karras_sigmas": false, "prediction_type": "epsilon"})";

const char* prediction_name(PredictionType p) {
  switch (p) {
    case PredictionType::kEpsilon: return "epsilon";
    case PredictionType::kVPrediction: return "v-prediction";
    case PredictionType::kSample: return "sample";
    case PredictionType::kFlow: return "flow";
  }
  return "?";
}

RunnerOptions runner_options(const PipelineOptions& options) {
  return {.mode = options.mode, .passes = options.passes, .log = options.log};
}

// ---------------------------------------------------------------- optimum's ONNX folder

const Value* find_input(const Graph& g, std::string_view name) {
  for (const Value* v : g.inputs())
    if (v->name == name) return v;
  return nullptr;
}

std::string input_names(const Graph& g) {
  std::string names;
  for (const Value* v : g.inputs()) names += (names.empty() ? "" : ", ") + v->name;
  return names;
}

// DIR/<component>/model.onnx imported, with the inputs kiln feeds it checked.
Result<Graph> import_component(const std::string& path, std::initializer_list<std::string_view> inputs) {
  if (!fs::exists(path)) return not_found("{}: missing from the pipeline folder", path);
  KILN_ASSIGN_OR_RETURN(Graph g, onnx_import_file(path));
  for (std::string_view name : inputs)
    if (!find_input(g, name))
      return invalid_argument("{}: the model has no input '{}' (its inputs: {})", path, name, input_names(g));
  return g;
}

// A runner over an imported file; its first load hands over the graph already imported.
Result<std::unique_ptr<ModelRunner>> onnx_runner(const std::string& path, Graph checked, const PipelineOptions& options) {
  return ModelRunner::create([path] { return onnx_import_file(path); }, runner_options(options), std::move(checked));
}

// An integer config field in [1, max]; `fallback` when absent.
Result<int64_t> config_int(const nlohmann::json& config, const char* key, int64_t fallback, int64_t max,
                           const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  std::optional<int64_t> v = json_int_in_range(*it, max);
  if (!v || *v < 1) return invalid_argument("{}: \"{}\" must be an integer in [1, {}], got {}", path, key, max, it->dump());
  return *v;
}

Result<PipelineParts> onnx_folder_parts(const std::string& dir, const PipelineOptions& options) {
  if (!options.loras.empty())
    return unsupported("--lora {}: LoRA merges into a checkpoint's weights; {} is an ONNX folder",
                       options.loras[0].path, dir);
  PipelineParts parts;
  parts.description = "Stable Diffusion, optimum ONNX folder";
  const std::string index_path = dir + "/model_index.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_path, kMaxConfigBytes, false));
  if (index.contains("text_encoder_2"))
    return unsupported("{}: a two-text-encoder pipeline (Stable Diffusion XL); kiln runs SD 1.x/2.x layouts",
                       index_path);
  KILN_ASSIGN_OR_RETURN(ClipTokenizer tokenizer, ClipTokenizer::load(dir + "/tokenizer"));
  KILN_ASSIGN_OR_RETURN(parts.scheduler, load_scheduler_config(dir + "/scheduler/scheduler_config.json"));

  const std::string unet_config_path = dir + "/unet/config.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json unet_config, read_json_file(unet_config_path, kMaxConfigBytes, true));
  KILN_ASSIGN_OR_RETURN(parts.sample_size, config_int(unet_config, "sample_size", 64, 1024, unet_config_path));
  const std::string vae_config_path = dir + "/vae_decoder/config.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json vae_config, read_json_file(vae_config_path, kMaxConfigBytes, true));
  LatentCodec::Spec codec{.label = dir + "/vae_decoder"};
  KILN_ASSIGN_OR_RETURN(codec.latent_channels, config_int(vae_config, "latent_channels", 4, 64, vae_config_path));
  if (auto it = vae_config.find("scaling_factor"); it != vae_config.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
      return invalid_argument("{}: \"scaling_factor\" must be a positive number, got {}", vae_config_path, it->dump());
    codec.scaling_factor = it->get<float>();
  }
  if (auto it = vae_config.find("block_out_channels"); it != vae_config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || it->size() > 8)
      return invalid_argument("{}: \"block_out_channels\" must be a list of 1 to 8 sizes", vae_config_path);
    codec.factor = int64_t(1) << (it->size() - 1);  // one 2x upsample between consecutive blocks
  }
  // The VAE's own image size: diffusers' tile for tiled decoding.
  KILN_ASSIGN_OR_RETURN(codec.tile, config_int(vae_config, "sample_size", parts.sample_size * codec.factor, 8192,
                                               vae_config_path));

  const std::string text_path = dir + "/text_encoder/model.onnx";
  KILN_ASSIGN_OR_RETURN(Graph text, import_component(text_path, {"input_ids"}));
  const DType ids_dtype = find_input(text, "input_ids")->dtype;
  if (ids_dtype != DType::kI64 && ids_dtype != DType::kI32)
    return unsupported("{}: input_ids is {}; kiln feeds int32 or int64 ids", text_path, dtype_name(ids_dtype));
  size_t hidden_output = 0;
  for (size_t i = 0; i < text.outputs().size(); ++i)
    if (text.outputs()[i]->name == "last_hidden_state") hidden_output = i;
  KILN_ASSIGN_OR_RETURN(auto text_runner, onnx_runner(text_path, std::move(text), options));
  parts.conditioner = std::make_unique<Conditioner>(std::move(tokenizer), std::move(text_runner), dir + "/text_encoder",
                                                    ids_dtype, hidden_output);

  const std::string unet_path = dir + "/unet/model.onnx";
  KILN_ASSIGN_OR_RETURN(Graph unet, import_component(unet_path, {"sample", "timestep", "encoder_hidden_states"}));
  Denoiser::Spec spec{.label = unet_path, .latent_channels = codec.latent_channels};
  const Value* timestep = find_input(unet, "timestep");
  spec.timestep_dtype = timestep->dtype;
  if (timestep->shape) spec.timestep_shape = sym_shape_concrete(*timestep->shape);
  if (spec.timestep_dtype != DType::kF32 && spec.timestep_dtype != DType::kI64)
    return unsupported("{}: timestep is {}; kiln feeds float32 or int64 timesteps", unet_path,
                       dtype_name(spec.timestep_dtype));
  if (unet.outputs().empty()) return invalid_argument("{}: the model has no output", unet_path);
  KILN_ASSIGN_OR_RETURN(auto unet_runner, onnx_runner(unet_path, std::move(unet), options));
  // The loop plan imports the file again: the runner's copy belongs to its own plans.
  DenoiserBuildFn build = [unet_path](GraphBuilder& b, Value* sample, Value* t, const ConditionValues& conditions) -> Value* {
    auto graph = onnx_import_file(unet_path);
    if (!graph.ok()) return b.fail(graph.status());
    return inline_denoiser(*graph)(b, sample, t, conditions);
  };
  parts.denoiser = std::make_unique<Denoiser>(std::move(unet_runner), std::move(build), std::move(spec));

  const std::string vae_path = dir + "/vae_decoder/model.onnx";
  KILN_ASSIGN_OR_RETURN(Graph vae, import_component(vae_path, {"latent_sample"}));
  KILN_ASSIGN_OR_RETURN(auto vae_runner, onnx_runner(vae_path, std::move(vae), options));
  const std::string encoder_path = dir + "/vae_encoder/model.onnx";
  ModelRunner::GraphLoader encoder = [encoder_path]() -> Result<Graph> {
    auto g = import_component(encoder_path, {"sample"});
    if (!g.ok()) return g.status().with_context("image to image");
    return g;
  };
  parts.codec = std::make_unique<LatentCodec>(std::move(vae_runner), std::move(encoder), runner_options(options),
                                              std::move(codec));
  return parts;
}

// ---------------------------------------------------------------- checkpoints

// Where a single file's tokenizer is: --tokenizer DIR, DIR/tokenizer beside
// the file, $KILN_TOKENIZER_DIR.
Result<std::string> find_tokenizer(const SdModel& m, const PipelineOptions& options) {
  auto holds_tables = [](const fs::path& dir) {
    std::error_code ec;
    return fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec);
  };
  if (!options.tokenizer_dir.empty()) {
    if (!holds_tables(options.tokenizer_dir))
      return not_found("--tokenizer {}: no vocab.json and merges.txt there (CLIP's BPE tables)", options.tokenizer_dir);
    return options.tokenizer_dir;
  }
  if (!m.tokenizer_dir.empty()) return m.tokenizer_dir;
  const fs::path beside = fs::path(m.path).parent_path() / "tokenizer";
  if (holds_tables(beside)) return beside.string();
  if (const char* env = std::getenv("KILN_TOKENIZER_DIR"); env && *env) {
    if (!holds_tables(env))
      return not_found("$KILN_TOKENIZER_DIR={}: no vocab.json and merges.txt there (CLIP's BPE tables)", env);
    return std::string(env);
  }
  return not_found("{}: a single file holds no tokenizer; put CLIP's vocab.json and merges.txt (from any SD "
                   "diffusers folder's tokenizer/, e.g. openai/clip-vit-large-patch14) in {}, or name their folder "
                   "with --tokenizer DIR or $KILN_TOKENIZER_DIR",
                   m.path, beside.string());
}

std::string dtype_summary(const WeightSet& w) {
  std::string s;
  for (const auto& [dtype, count] : w.dtype_counts()) s += fmt::format("{}{}", s.empty() ? "" : "+", dtype_name(dtype));
  return s;
}

Result<PipelineParts> checkpoint_parts(const std::string& path, const PipelineOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<SdModel> m, sd_model_open(path, {.variant = options.variant}));
  if (!m->has_text_encoder) return not_found("{}: no text encoder in it, which text to image needs", path);
  if (!m->has_vae || !m->vae_config.has_decoder) return not_found("{}: no VAE decoder in it, which makes the image", path);
  const bool single = m->format == CheckpointFormat::kSingleFile, sd2 = m->family == SdFamily::kSd2;
  const bool xl = m->family == SdFamily::kSdxl;
  std::string loras;  // for the description
  for (const LoraSpec& lora : options.loras) {
    KILN_ASSIGN_OR_RETURN(LoraReport report, apply_lora(lora, sd_lora_targets(*m)));
    loras += fmt::format(" + LoRA {} x {}", fs::path(lora.path).filename().string(), lora.weight);
    if (options.log) {
      options.log(fmt::format("{}: merged into {} weights at {}", lora.path, report.merged, lora.weight));
      if (!report.unmatched.empty())
        options.log(fmt::format("{}: {} of its modules (or keys in no LoRA layout) match no weight of {} and "
                                "are left out: {}{}",
                                lora.path,
                                report.unmatched.size(), path,
                                fmt::join(report.unmatched.begin(),
                                          report.unmatched.begin() + std::min<ptrdiff_t>(8, report.unmatched.size()),
                                          ", "),
                                report.unmatched.size() > 8 ? ", ..." : ""));
    }
  }
  PipelineParts parts;
  parts.description = fmt::format("{}, {}{} ({} weights){}", sd_family_name(m->family),
                                  checkpoint_format_name(m->format), m->variant.empty() ? "" : ", variant " + m->variant,
                                  dtype_summary(m->unet), loras);

  // The scheduler and the prediction type.
  if (!m->scheduler_config_path.empty()) {
    KILN_ASSIGN_OR_RETURN(parts.scheduler, load_scheduler_config(m->scheduler_config_path));
  } else {
    KILN_ASSIGN_OR_RETURN(parts.scheduler,
                          scheduler_config_from_json(xl ? kSdxlScheduler : sd2 ? kSd21Scheduler : kSd15Scheduler));
  }
  if (options.prediction) parts.scheduler.prediction_type = *options.prediction;
  parts.sample_size = m->unet_config.sample_size;
  if (single) {
    // SD 2.x's 768-pixel models predict v, its 512-pixel base models the noise.
    if (sd2) parts.sample_size = parts.scheduler.prediction_type == PredictionType::kVPrediction ? 96 : 64;
  }

  // Conditioner: SD 2.x's single files pad with "!", as its tokenizer does,
  // and so does SDXL's second tokenizer. SDXL: two towers, an empty negative
  // prompt as zeros (diffusers' force_zeros_for_empty_prompt).
  const RunnerOptions runner = runner_options(options);
  KILN_ASSIGN_OR_RETURN(std::string tokenizer_dir, find_tokenizer(*m, options));
  std::vector<Conditioner::Tower> towers;
  auto add_tower = [&](const std::string& dir, const std::string& pad, const ClipTextConfig& config,
                       const WeightSet& weights) -> Status {
    KILN_ASSIGN_OR_RETURN(ClipTokenizer tokenizer, ClipTokenizer::load(dir, pad));
    if (tokenizer.vocab_size() > size_t(config.vocab_size))
      return invalid_argument("{}: the tokenizer has {} tokens but the text encoder's embedding only {}", dir,
                              tokenizer.vocab_size(), config.vocab_size);
    KILN_ASSIGN_OR_RETURN(auto text, ModelRunner::create(
                                         [m, c = &config, w = &weights] { return clip_text_graph(*c, *w); }, runner));
    towers.push_back({.tokenizer = std::move(tokenizer), .encoder = std::move(text),
                      .pooled_output = config.pooled ? std::optional<size_t>(1) : std::nullopt});
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(add_tower(tokenizer_dir, single && sd2 ? "!" : "", m->text_config, m->text_encoder));
  if (xl) {  // the folder's tokenizer_2/ as it is, or the first one's tables padding with "!"
    const bool own = !m->tokenizer_2_dir.empty() && options.tokenizer_dir.empty();
    KILN_RETURN_IF_ERROR(add_tower(own ? m->tokenizer_2_dir : tokenizer_dir, own ? "" : "!", m->text_config_2,
                                   m->text_encoder_2));
  }
  parts.conditioner = std::make_unique<Conditioner>(std::move(towers), path + ": text encoder",
                                                    Conditioner::Options{.zero_empty_negative = m->zero_empty_negative});
  parts.size_conditioning = xl;
  parts.guidance_embedding_dim = m->unet_config.time_cond_proj_dim;

  // Denoiser: the loop plan builds the UNet into its own graph.
  KILN_ASSIGN_OR_RETURN(auto unet, ModelRunner::create([m] { return sd_unet_graph(m->unet_config, m->unet); }, runner));
  DenoiserBuildFn build = [m](GraphBuilder& b, Value* sample, Value* t, const ConditionValues& conditions) {
    GraphBuilder::Scope scope = b.scope("unet");
    NetBuilder n(b, m->unet);
    auto find = [&](std::string_view name) {
      auto it = conditions.find(name);
      return it == conditions.end() ? nullptr : it->second;
    };
    return build_sd_unet(n, m->unet_config,
                         {.sample = sample, .timestep = t, .context = find("encoder_hidden_states"),
                          .text_embeds = find("text_embeds"), .time_ids = find("time_ids"),
                          .timestep_cond = find("timestep_cond")});
  };
  parts.denoiser = std::make_unique<Denoiser>(std::move(unet), std::move(build),
                                              Denoiser::Spec{.label = path + ": UNet",
                                                             .latent_channels = m->unet_config.in_channels});

  // Latent codec. SDXL's VAE in f32 whatever the precision asked for (its
  // activations are large: diffusers upcasts it from fp16 for that).
  RunnerOptions vae_runner = runner;
  if (xl) vae_runner.passes.precision = PrecisionPolicy{};
  KILN_ASSIGN_OR_RETURN(auto decoder,
                        ModelRunner::create([m] { return vae_decoder_graph(m->vae_config, m->vae); }, vae_runner));
  ModelRunner::GraphLoader encoder;
  if (m->vae_config.has_encoder) encoder = [m] { return vae_encoder_graph(m->vae_config, m->vae); };
  parts.codec = std::make_unique<LatentCodec>(std::move(decoder), std::move(encoder), vae_runner,
                                              LatentCodec::Spec{.label = path + ": VAE",
                                                                .latent_channels = m->vae_config.latent_channels,
                                                                .factor = m->vae_config.factor(),
                                                                .tile = m->vae_config.sample_size,
                                                                .scaling_factor = m->vae_config.scaling_factor});
  // What a single file's family decided, said once the model is wired.
  if (single && options.log)
    options.log(fmt::format("{}: {}, {} ({}; --prediction eps|v to change), {} pixels by default", path,
                            parts.description, prediction_name(parts.scheduler.prediction_type),
                            options.prediction ? "as asked" : "the family's default",
                            parts.sample_size * m->vae_config.factor()));
  return parts;
}

}  // namespace

Result<PredictionType> parse_prediction_type(std::string_view name) {
  if (name == "eps" || name == "epsilon") return PredictionType::kEpsilon;
  if (name == "v" || name == "v_prediction") return PredictionType::kVPrediction;
  return invalid_argument("unknown prediction type '{}' (eps, v)", name);
}

Result<PipelineParts> sd_pipeline_parts(const std::string& path, const PipelineOptions& options) {
  KILN_ASSIGN_OR_RETURN(CheckpointFormat format, checkpoint_format(path));
  if (format == CheckpointFormat::kOnnxFolder) return onnx_folder_parts(path, options);
  return checkpoint_parts(path, options);
}

}  // namespace kiln
