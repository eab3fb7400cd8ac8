#include "pipeline/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/rng.h"
#include "onnx/onnx_import.h"
#include "pipeline/denoise_loop.h"
#include "core/json_file.h"

namespace kiln {

namespace {

constexpr size_t kMaxConfigBytes = size_t(1) << 20;
constexpr int kMaxBatch = 64;
constexpr int kMaxImageSide = 4096;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

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
  if (!std::filesystem::exists(path)) return not_found("{}: missing from the pipeline folder", path);
  KILN_ASSIGN_OR_RETURN(Graph g, onnx_import_file(path));
  for (std::string_view name : inputs)
    if (!find_input(g, name))
      return invalid_argument("{}: the model has no input '{}' (its inputs: {})", path, name, input_names(g));
  return g;
}

// A runner whose first load hands over the graph already imported and checked.
Result<std::unique_ptr<ModelRunner>> make_runner(const std::string& path, Graph checked,
                                                 const PipelineOptions& options) {
  auto first = std::make_shared<std::optional<Graph>>(std::move(checked));
  auto load = [path, first]() -> Result<Graph> {
    if (*first) {
      Graph g = std::move(**first);
      first->reset();
      return g;
    }
    return onnx_import_file(path);
  };
  return ModelRunner::create(load, {.mode = options.mode, .passes = options.passes, .log = options.log});
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

Tensor copy_of(const TensorView& v) {
  Tensor t = *Tensor::empty(v.dtype, v.shape);
  std::memcpy(t.raw(), v.data, v.nbytes());
  return t;
}

}  // namespace

Result<std::unique_ptr<Pipeline>> Pipeline::load(const std::string& dir, const PipelineOptions& options) {
  if (!std::filesystem::is_directory(dir))
    return not_found("{}: not a pipeline folder (expected model_index.json, unet/, text_encoder/, ...)", dir);
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->dir_ = dir;
  p->options_ = options;

  const std::string index_path = dir + "/model_index.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_path, kMaxConfigBytes, false));
  if (index.contains("text_encoder_2"))
    return unsupported("{}: a two-text-encoder pipeline (Stable Diffusion XL); kiln runs SD 1.x/2.x layouts",
                       index_path);

  KILN_ASSIGN_OR_RETURN(ClipTokenizer tokenizer, ClipTokenizer::load(dir + "/tokenizer"));
  p->tokenizer_ = std::move(tokenizer);
  KILN_ASSIGN_OR_RETURN(p->scheduler_config_, load_scheduler_config(dir + "/scheduler/scheduler_config.json"));

  const std::string unet_config_path = dir + "/unet/config.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json unet_config, read_json_file(unet_config_path, kMaxConfigBytes, true));
  KILN_ASSIGN_OR_RETURN(int64_t sample_size, config_int(unet_config, "sample_size", 64, 1024, unet_config_path));
  p->sample_size_ = int(sample_size);
  const std::string vae_config_path = dir + "/vae_decoder/config.json";
  KILN_ASSIGN_OR_RETURN(nlohmann::json vae_config, read_json_file(vae_config_path, kMaxConfigBytes, true));
  KILN_ASSIGN_OR_RETURN(int64_t latent_channels, config_int(vae_config, "latent_channels", 4, 64, vae_config_path));
  p->latent_channels_ = int(latent_channels);
  if (auto it = vae_config.find("scaling_factor"); it != vae_config.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
      return invalid_argument("{}: \"scaling_factor\" must be a positive number, got {}", vae_config_path, it->dump());
    p->scaling_factor_ = it->get<float>();
  }
  if (auto it = vae_config.find("block_out_channels"); it != vae_config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || it->size() > 8)
      return invalid_argument("{}: \"block_out_channels\" must be a list of 1 to 8 sizes", vae_config_path);
    p->vae_factor_ = 1 << (it->size() - 1);  // one 2x upsample between consecutive blocks
  }
  // The VAE's own image size: diffusers' tile for tiled decoding.
  KILN_ASSIGN_OR_RETURN(int64_t vae_tile, config_int(vae_config, "sample_size", p->default_size(), 8192,
                                                     vae_config_path));
  p->vae_tile_ = int(vae_tile);

  const std::string text_path = dir + "/text_encoder/model.onnx";
  KILN_ASSIGN_OR_RETURN(Graph text, import_component(text_path, {"input_ids"}));
  p->ids_dtype_ = find_input(text, "input_ids")->dtype;
  if (p->ids_dtype_ != DType::kI64 && p->ids_dtype_ != DType::kI32)
    return unsupported("{}: input_ids is {}; kiln feeds int32 or int64 ids", text_path, dtype_name(p->ids_dtype_));
  for (size_t i = 0; i < text.outputs().size(); ++i)
    if (text.outputs()[i]->name == "last_hidden_state") p->hidden_state_output_ = i;
  KILN_ASSIGN_OR_RETURN(p->text_encoder_, make_runner(text_path, std::move(text), options));

  p->unet_path_ = dir + "/unet/model.onnx";
  KILN_ASSIGN_OR_RETURN(Graph unet, import_component(p->unet_path_, {"sample", "timestep", "encoder_hidden_states"}));
  const Value* timestep = find_input(unet, "timestep");
  p->timestep_dtype_ = timestep->dtype;
  if (timestep->shape) p->timestep_static_shape_ = sym_shape_concrete(*timestep->shape);
  if (p->timestep_dtype_ != DType::kF32 && p->timestep_dtype_ != DType::kI64)
    return unsupported("{}: timestep is {}; kiln feeds float32 or int64 timesteps", p->unet_path_,
                       dtype_name(p->timestep_dtype_));
  if (unet.outputs().empty()) return invalid_argument("{}: the model has no output", p->unet_path_);
  KILN_ASSIGN_OR_RETURN(p->unet_, make_runner(p->unet_path_, std::move(unet), options));

  const std::string vae_path = dir + "/vae_decoder/model.onnx";
  KILN_ASSIGN_OR_RETURN(Graph vae, import_component(vae_path, {"latent_sample"}));
  KILN_ASSIGN_OR_RETURN(p->vae_decoder_, make_runner(vae_path, std::move(vae), options));
  return p;
}

Shape Pipeline::timestep_shape(int64_t batch) const {
  return timestep_static_shape_ ? *timestep_static_shape_ : Shape{2 * batch};
}

Result<Tensor> Pipeline::encode_prompts(const GenerateOptions& o, StageTimes& times) {
  auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> negative = tokenizer_->tokenize(o.negative_prompt), prompt = tokenizer_->tokenize(o.prompt);
  const int64_t b = o.batch, length = tokenizer_->max_length();
  KILN_ASSIGN_OR_RETURN(Tensor ids, Tensor::empty(ids_dtype_, {2 * b, length}));
  for (int64_t row = 0; row < 2 * b; ++row) {  // [negative x batch, prompt x batch]
    const std::vector<int32_t>& src = row < b ? negative : prompt;
    for (int64_t j = 0; j < length; ++j) {
      if (ids_dtype_ == DType::kI64) ids.data<int64_t>()[row * length + j] = src[size_t(j)];
      else ids.data<int32_t>()[row * length + j] = src[size_t(j)];
    }
  }
  times.tokenize = ms_since(start);
  start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, text_encoder_->run({{"input_ids", ids}}));
  if (hidden_state_output_ >= out.size()) return invalid_argument("{}/text_encoder: too few outputs", dir_);
  const Tensor& hidden = out[hidden_state_output_];
  if (hidden.dtype() != DType::kF32 || hidden.rank() != 3 || hidden.shape()[0] != 2 * b)
    return invalid_argument("{}/text_encoder: expected a float32 [{}, sequence, width] hidden state, got {} {}", dir_,
                            2 * b, dtype_name(hidden.dtype()), shape_to_string(hidden.shape()));
  Tensor context = copy_of(hidden.view());  // the runner's output view is overwritten by its next run
  times.text_encoder = ms_since(start);
  return context;
}

Result<Tensor> Pipeline::encode_image(const RgbImage& image, int64_t batch, NoiseStream& noise, StageTimes& times) {
  const auto start = std::chrono::steady_clock::now();
  if (!vae_encoder_) {
    const std::string path = dir_ + "/vae_encoder/model.onnx";
    auto graph = import_component(path, {"sample"});
    if (!graph.ok()) return graph.status().with_context("image to image");
    KILN_ASSIGN_OR_RETURN(vae_encoder_, make_runner(path, std::move(*graph), options_));
  }
  // Bytes to [-1, 1], as diffusers' image processor: p / 255 * 2 - 1.
  const size_t plane = size_t(image.width) * size_t(image.height);
  KILN_ASSIGN_OR_RETURN(Tensor sample, Tensor::empty(DType::kF32, {batch, 3, image.height, image.width}));
  for (int64_t b = 0; b < batch; ++b)
    for (size_t c = 0; c < 3; ++c)
      for (size_t p = 0; p < plane; ++p)
        sample.data<float>()[(size_t(b) * 3 + c) * plane + p] = float(image.rgb[p * 3 + c]) / 255.0f * 2.0f - 1.0f;
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, vae_encoder_->run({{"sample", sample}}));
  // [B, 2C, h, w]: the latent distribution's mean and log-variance (optimum's
  // latent_parameters); [B, C, h, w]: a latent already drawn.
  const Tensor& params = out[0];
  const int64_t c = latent_channels_, h = image.height / vae_factor_, w = image.width / vae_factor_;
  const bool distribution = params.rank() == 4 && params.shape()[1] == 2 * c;
  if (params.dtype() != DType::kF32 || params.shape() != Shape{batch, distribution ? 2 * c : c, h, w})
    return invalid_argument("{}/vae_encoder: the output is {} {}, expected f32 [{}, {} or {}, {}, {}]", dir_,
                            dtype_name(params.dtype()), shape_to_string(params.shape()), batch, c, 2 * c, h, w);
  KILN_ASSIGN_OR_RETURN(Tensor x0, Tensor::empty(DType::kF32, {batch, c, h, w}));
  const size_t n = size_t(x0.numel()), per_sample = size_t(c * h * w);
  std::vector<float> eps(n);
  noise.fill(eps.data(), n);
  const float* p = params.data<float>();
  for (size_t i = 0; i < n; ++i) {
    float z = p[i];
    if (distribution) {  // mean + exp(logvar / 2) eps, logvar clamped as diffusers does
      const size_t b = i / per_sample, j = i % per_sample;
      const float mean = p[b * 2 * per_sample + j], logvar = p[b * 2 * per_sample + per_sample + j];
      z = mean + std::exp(0.5f * std::clamp(logvar, -30.0f, 20.0f)) * eps[i];
    }
    x0.data<float>()[i] = z * scaling_factor_;
  }
  times.vae_encode = ms_since(start);
  return x0;
}

Status Pipeline::run_host_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g) {
  const StepTables& tables = run.tables;
  const GenerateOptions& o = run.options;
  const Shape& shape = x.shape();
  const int64_t b = shape[0];
  const size_t n = size_t(x.numel());
  KILN_ASSIGN_OR_RETURN(Tensor model_in, Tensor::empty(DType::kF32, {2 * b, shape[1], shape[2], shape[3]}));
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(timestep_dtype_, timestep_shape(b)));
  std::vector<float> guided(n), x0_prev(n), noise(tables.needs_noise ? n : 0);
  float* xs = x.data<float>();
  for (int i = 0; i < steps; ++i) {
    const float scale = tables.in_scale[size_t(i)];
    float* in = model_in.data<float>();
    for (size_t j = 0; j < n; ++j) in[j] = in[n + j] = xs[j] * scale;
    for (int64_t j = 0; j < t.numel(); ++j) {
      if (timestep_dtype_ == DType::kI64) t.data<int64_t>()[j] = int64_t(tables.timestep[size_t(i)]);
      else t.data<float>()[j] = tables.timestep[size_t(i)];
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                          unet_->run({{"sample", model_in}, {"timestep", t}, {"encoder_hidden_states", run.context}}));
    g.times.model += unet_->last_report().run_ms;
    g.times.compile += unet_->last_report().compile_ms;
    if (out[0].dtype() != DType::kF32 || out[0].shape() != model_in.shape())
      return invalid_argument("{}: the noise prediction is {} {}, expected f32 {}", unet_path_,
                              dtype_name(out[0].dtype()), shape_to_string(out[0].shape()),
                              shape_to_string(model_in.shape()));
    // Classifier-free guidance over the batched [uncond, cond] prediction.
    const float* uncond = out[0].data<float>();
    const float* cond = uncond + n;
    for (size_t j = 0; j < n; ++j) guided[j] = uncond[j] + o.guidance_scale * (cond[j] - uncond[j]);
    // The same place in the noise stream kiln.DenoiseStep draws from.
    if (tables.needs_noise)
      NoiseStream(o.seed, run.noise_first_pair + uint64_t(i) * ((n + 1) / 2)).fill(noise.data(), n);
    scheduler_step(tables, i, xs, guided.data(), x0_prev.data(), tables.needs_noise ? noise.data() : nullptr, xs, n);
    if (o.keep_trajectory) g.trajectory.push_back(copy_of(x.view()));
    if (o.on_step) o.on_step(i, tables.steps());
  }
  return ok_status();
}

Status Pipeline::run_whole_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g) {
  const StepTables& tables = run.tables;
  const GenerateOptions& o = run.options;
  const Shape& shape = x.shape();
  std::unique_ptr<Plan>& plan = loop_plans_[run.key];
  if (!plan) {
    const auto start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(Graph unet, onnx_import_file(unet_path_));
    const DenoiseLoopSpec spec{.batch = shape[0], .channels = shape[1], .height = shape[2], .width = shape[3],
                               .context_shape = run.context.shape(), .timestep_dtype = timestep_dtype_,
                               .timestep_shape = timestep_shape(shape[0]),
                               .guidance_scale = o.guidance_scale, .noise_first_pair = run.noise_first_pair};
    auto loop = denoise_loop_graph(inline_denoiser(unet), tables, spec);
    if (!loop.ok()) return loop.status().with_context(unet_path_);
    // The latents, the x0 estimate and the counter change every step; what
    // reads only the prompt's context (cross-attention keys and values) is
    // computed once per generation.
    KILN_ASSIGN_OR_RETURN(plan, Plan::compile(std::move(*loop),
                                                   {.passes = options_.passes, .loop_carried = {"x", "x0_prev", "step"}}));
    g.times.compile = ms_since(start);
    if (options_.log)
      options_.log(fmt::format("compiled the whole {}-step denoise loop into one plan: {} kernel calls a step "
                               "(+{} once per image), arena {:.1f} MiB ({:.0f} ms)",
                               tables.steps(), plan->stats().steps - plan->stats().loop_invariant_steps,
                               plan->stats().loop_invariant_steps, plan->stats().arena_bytes / 1048576.0,
                               g.times.compile));
  }
  KILN_ASSIGN_OR_RETURN(Tensor x0_prev, Tensor::empty(DType::kF32, shape));
  int64_t step = 0;
  int64_t seed = std::bit_cast<int64_t>(o.seed);
  const TensorView step_view{DType::kI64, {}, &step}, seed_view{DType::kI64, {}, &seed};
  // The loop's state lives in place: each output bound over the input it updates.
  KILN_RETURN_IF_ERROR(plan->bind_input("x", x.view()));
  KILN_RETURN_IF_ERROR(plan->bind_input("x0_prev", x0_prev.view()));
  KILN_RETURN_IF_ERROR(plan->bind_input("step", step_view));
  KILN_RETURN_IF_ERROR(plan->bind_input("seed", seed_view));
  KILN_RETURN_IF_ERROR(plan->bind_input("encoder_hidden_states", run.context.view()));
  KILN_RETURN_IF_ERROR(plan->bind_output("x_next", x.view()));
  KILN_RETURN_IF_ERROR(plan->bind_output("x0", x0_prev.view()));
  KILN_RETURN_IF_ERROR(plan->bind_output("step_next", step_view));
  const auto start = std::chrono::steady_clock::now();
  Status status = plan->run_repeated(steps, [&](int64_t done) {
    if (o.keep_trajectory) g.trajectory.push_back(copy_of(x.view()));
    if (o.on_step) o.on_step(int(done - 1), tables.steps());
  });
  g.times.model = ms_since(start);
  return status;
}

Result<bool> Pipeline::choose_whole_loop(const DenoiseRun& run, const Tensor& x) {
  if (auto it = whole_loop_chosen_.find(run.key); it != whole_loop_chosen_.end()) return it->second;
  GenerateOptions silent = run.options;
  silent.on_step = nullptr;
  silent.keep_trajectory = false;
  const DenoiseRun quiet{run.tables, silent, run.context, run.noise_first_pair, run.key};
  // The first steps on scratch latents: one step each way to compile (the
  // UNet's plan, the loop's plan) and let the UNet's runner settle its own
  // eager-or-graph choice; then 1 and 3 steps each way, twice, taking turns.
  // A step's cost is the difference over the two extra steps: graph-loop's
  // once-per-image work (the prompt's keys and values) then counts as little
  // as it does over a whole generation.
  auto trial = [&](bool whole, int steps) -> Result<double> {
    Tensor scratch = copy_of(x.view());
    Generation g;
    const auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(whole ? run_whole_loop(quiet, steps, scratch, g) : run_host_loop(quiet, steps, scratch, g));
    return ms_since(start);
  };
  const int long_trial = std::min(3, run.tables.steps());
  double shortest[2][2] = {{INFINITY, INFINITY}, {INFINITY, INFINITY}};  // [whole][1 step, long_trial steps]
  for (int whole = 0; whole < 2; ++whole) KILN_RETURN_IF_ERROR(trial(whole, 1).status());
  for (int round = 0; round < 2; ++round)
    for (int whole = 0; whole < 2; ++whole)
      for (int n = 0; n < 2; ++n) {
        KILN_ASSIGN_OR_RETURN(double t, trial(whole, n ? long_trial : 1));
        shortest[whole][n] = std::min(shortest[whole][n], t);
      }
  double ms[2];
  for (int whole = 0; whole < 2; ++whole)
    ms[whole] = long_trial > 1 ? (shortest[whole][1] - shortest[whole][0]) / (long_trial - 1) : shortest[whole][0];
  const bool whole_loop = ms[1] < ms[0];
  const char* host = execution_mode_name(unet_->last_mode());
  if (options_.log)
    options_.log(fmt::format("auto: a denoise step takes {:.3f} ms as graph-loop and {:.3f} ms as a host loop over "
                             "the UNet ({}): using {}",
                             ms[1], ms[0], host, whole_loop ? "graph-loop" : host));
  whole_loop_chosen_[run.key] = whole_loop;
  return whole_loop;
}

Result<Tensor> Pipeline::decode_latents(const Tensor& z) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, vae_decoder_->run({{"latent_sample", z}}));
  const Tensor& image = out[0];
  const Shape& s = z.shape();
  const Shape expected{s[0], 3, s[2] * vae_factor_, s[3] * vae_factor_};
  if (image.dtype() != DType::kF32 || image.shape() != expected)
    return invalid_argument("{}/vae_decoder: the image is {} {}, expected f32 {}", dir_, dtype_name(image.dtype()),
                            shape_to_string(image.shape()), shape_to_string(expected));
  return copy_of(image.view());  // the runner's output view is overwritten by its next run
}

namespace {

// diffusers' blend_v (vertical) and blend_h: b's first rows (columns) fade
// in over a's last ones, across at most `extent` of them.
void blend_edge(const Tensor& a, Tensor& b, int64_t extent, bool vertical) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int64_t e = std::min({vertical ? sa[2] : sa[3], vertical ? sb[2] : sb[3], extent});
  const float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t plane = 0; plane < sb[0] * sb[1]; ++plane)
    for (int64_t y = 0; y < sb[2]; ++y)
      for (int64_t x = 0; x < sb[3]; ++x) {
        const int64_t k = vertical ? y : x;
        if (k >= e) continue;
        const int64_t ay = vertical ? sa[2] - e + y : y, ax = vertical ? x : sa[3] - e + x;
        const double t = double(k) / double(e);
        float& out = pb[(plane * sb[2] + y) * sb[3] + x];
        out = pa[(plane * sa[2] + ay) * sa[3] + ax] * float(1 - t) + out * float(t);
      }
}

}  // namespace

Result<Tensor> Pipeline::decode_tiled(const Tensor& z) {
  const Shape& s = z.shape();
  const int64_t b = s[0], c = s[1], h = s[2], w = s[3];
  // diffusers' tiled_decode: latent tiles of the VAE's sample size over the
  // factor, a quarter overlapping; each decoded tile blended into its upper
  // and left neighbours (already blended), then cropped to the stride.
  const int64_t tile = vae_tile_ / vae_factor_, stride = int64_t(double(tile) * 0.75);
  const int64_t blend = int64_t(double(vae_tile_) * 0.25), limit = vae_tile_ - blend;
  std::vector<std::vector<Tensor>> rows;
  for (int64_t i = 0; i < h; i += stride) {
    rows.emplace_back();
    for (int64_t j = 0; j < w; j += stride) {
      const int64_t th = std::min(tile, h - i), tw = std::min(tile, w - j);
      KILN_ASSIGN_OR_RETURN(Tensor part, Tensor::empty(DType::kF32, {b, c, th, tw}));
      for (int64_t plane = 0; plane < b * c; ++plane)
        for (int64_t y = 0; y < th; ++y)
          std::memcpy(part.data<float>() + (plane * th + y) * tw, z.data<float>() + (plane * h + i + y) * w + j,
                      size_t(tw) * sizeof(float));
      KILN_ASSIGN_OR_RETURN(Tensor decoded, decode_latents(part));
      rows.back().push_back(std::move(decoded));
    }
  }
  const int64_t height = h * vae_factor_, width = w * vae_factor_;
  KILN_ASSIGN_OR_RETURN(Tensor image, Tensor::empty(DType::kF32, {b, 3, height, width}));
  for (size_t ri = 0; ri < rows.size(); ++ri)
    for (size_t cj = 0; cj < rows[ri].size(); ++cj) {
      Tensor& t = rows[ri][cj];
      if (ri > 0) blend_edge(rows[ri - 1][cj], t, blend, /*vertical=*/true);
      if (cj > 0) blend_edge(rows[ri][cj - 1], t, blend, /*vertical=*/false);
      const int64_t th = t.shape()[2], tw = t.shape()[3];
      const int64_t y0 = int64_t(ri) * limit, x0 = int64_t(cj) * limit;
      const int64_t rows_kept = std::min({th, limit, height - y0}), cols_kept = std::min({tw, limit, width - x0});
      for (int64_t plane = 0; plane < b * 3; ++plane)
        for (int64_t y = 0; y < rows_kept; ++y)
          std::memcpy(image.data<float>() + (plane * height + y0 + y) * width + x0,
                      t.data<float>() + (plane * th + y) * tw, size_t(cols_kept) * sizeof(float));
    }
  return image;
}

Status Pipeline::decode(Generation& g, bool tiled) {
  const auto start = std::chrono::steady_clock::now();
  Tensor z = copy_of(g.latents.view());
  for (int64_t j = 0; j < z.numel(); ++j) z.data<float>()[j] = g.latents.data<float>()[j] / scaling_factor_;
  if (tiled) {
    KILN_ASSIGN_OR_RETURN(g.image, decode_tiled(z));
  } else {
    KILN_ASSIGN_OR_RETURN(g.image, decode_latents(z));
  }
  g.vae_tiled = tiled;
  // [-1, 1] to bytes as diffusers does: (v / 2 + 0.5) clamped, times 255, rounded half to even.
  const int64_t b = z.shape()[0];
  const size_t plane = size_t(g.width) * size_t(g.height);
  g.pixels.resize(size_t(b) * plane * 3);
  const float* v = g.image.data<float>();
  for (int64_t i = 0; i < b; ++i)
    for (size_t p = 0; p < plane; ++p)
      for (size_t c = 0; c < 3; ++c) {
        float u = std::clamp(v[(size_t(i) * 3 + c) * plane + p] / 2 + 0.5f, 0.0f, 1.0f) * 255.0f;
        if (!(u >= 0.0f)) u = 0.0f;  // NaN
        g.pixels[(size_t(i) * plane + p) * 3 + c] = uint8_t(std::nearbyint(u));
      }
  g.times.vae_decode = ms_since(start);
  return ok_status();
}

Result<Generation> Pipeline::generate(const GenerateOptions& o) {
  Generation g;
  g.width = o.width ? o.width : default_size();
  g.height = o.height ? o.height : default_size();
  if (o.init_image) {  // the picture's size is the output's
    const RgbImage& image = *o.init_image;
    if ((o.width && o.width != image.width) || (o.height && o.height != image.height))
      return invalid_argument("the size asked for, {}x{}, is not the init image's {}x{}", g.width, g.height,
                              image.width, image.height);
    g.width = image.width, g.height = image.height;
    if (image.rgb.size() != size_t(image.width) * size_t(image.height) * 3)
      return invalid_argument("the init image has {} bytes, not {}x{}x3", image.rgb.size(), image.width, image.height);
    if (!(o.strength > 0 && o.strength <= 1))
      return invalid_argument("the strength must be in (0, 1], got {}", o.strength);
  }
  if (g.width <= 0 || g.height <= 0 || g.width > kMaxImageSide || g.height > kMaxImageSide ||
      g.width % vae_factor_ || g.height % vae_factor_)
    return invalid_argument("the image size must be a multiple of {} from {} to {} on each side, got {}x{}",
                            vae_factor_, vae_factor_, kMaxImageSide, g.width, g.height);
  if (o.batch < 1 || o.batch > kMaxBatch) return invalid_argument("the batch must be 1 to {}, got {}", kMaxBatch, o.batch);
  if (!std::isfinite(o.guidance_scale)) return invalid_argument("the guidance scale must be a finite number");

  // The scheduler: the one asked for ("dpmpp_2m_karras" = dpmpp_2m with
  // Karras sigmas), else the one the pipeline's config names.
  SchedulerConfig config = scheduler_config_;
  SchedulerKind kind;
  if (o.scheduler.empty()) {
    bool substituted = false;
    kind = default_scheduler_kind(config, &substituted);
    if (substituted && options_.log)
      options_.log(fmt::format("the pipeline's {} is not a scheduler kiln implements; using {}", config.class_name,
                               scheduler_kind_name(kind)));
  } else {
    std::string_view name = o.scheduler;
    config.use_karras_sigmas = name.ends_with("_karras");
    if (config.use_karras_sigmas) name.remove_suffix(std::string_view("_karras").size());
    KILN_ASSIGN_OR_RETURN(kind, parse_scheduler_kind(name));
  }
  const bool karras = config.use_karras_sigmas && (kind == SchedulerKind::kEuler || kind == SchedulerKind::kDpmpp2m);
  g.scheduler = std::string(scheduler_kind_name(kind)) + (karras ? "_karras" : "");
  const int first_step = o.init_image ? image_to_image_first_step(o.steps, o.strength) : 0;
  if (first_step == o.steps && o.steps > 0)
    return invalid_argument("strength {} of {} steps leaves no step to run: raise the strength or the steps",
                            o.strength, o.steps);
  KILN_ASSIGN_OR_RETURN(StepTables tables, make_step_tables(kind, config, o.steps, first_step));

  KILN_ASSIGN_OR_RETURN(Tensor context, encode_prompts(o, g.times));

  // The initial latents from the seed's noise stream: standard noise times
  // init_noise_sigma; for image to image, the image's latents (drawn with
  // the first draws) noised with the next ones to the first step's level.
  const Shape shape{o.batch, latent_channels_, g.height / vae_factor_, g.width / vae_factor_};
  KILN_ASSIGN_OR_RETURN(Tensor x, Tensor::empty(DType::kF32, shape));
  NoiseStream noise(o.seed);
  Tensor x0;
  if (o.init_image) {
    KILN_ASSIGN_OR_RETURN(x0, encode_image(*o.init_image, o.batch, noise, g.times));
  }
  noise.fill(x.data<float>(), size_t(x.numel()));
  for (int64_t j = 0; j < x.numel(); ++j) {
    float& v = x.data<float>()[j];
    v = o.init_image ? tables.image_scale * x0.data<float>()[j] + tables.image_noise_scale * v
                     : v * tables.init_noise_sigma;
  }

  // Everything a compiled loop depends on: the shapes (which also fix where
  // the step noise starts), the guidance scale, the scheduler and the steps.
  const DenoiseRun run{tables, o, context, noise.next_pair(),
                       fmt::format("{} {} guidance={} {} steps={} from={}", signature_entry("x", DType::kF32, shape),
                                   signature_entry("context", DType::kF32, context.shape()), o.guidance_scale,
                                   g.scheduler, o.steps, first_step)};
  g.steps_run = tables.steps();
  bool whole_loop = options_.whole_loop;
  if (options_.mode == ExecutionMode::kAuto) {
    KILN_ASSIGN_OR_RETURN(whole_loop, choose_whole_loop(run, x));
  }
  const auto start = std::chrono::steady_clock::now();
  if (whole_loop) KILN_RETURN_IF_ERROR(run_whole_loop(run, tables.steps(), x, g));
  else KILN_RETURN_IF_ERROR(run_host_loop(run, tables.steps(), x, g));
  g.times.denoise = ms_since(start);
  g.mode = whole_loop ? "graph-loop" : execution_mode_name(unet_->last_mode());
  g.latents = std::move(x);
  // Tiles when asked, or by default when a side is over twice the VAE's tile.
  const bool tiled = o.vae_tiling.value_or(std::max(g.width, g.height) > 2 * vae_tile_);
  if (tiled && vae_tile_ < 4 * vae_factor_)
    return invalid_argument("{}/vae_decoder/config.json: sample_size {} is too small to decode in tiles", dir_,
                            vae_tile_);
  KILN_RETURN_IF_ERROR(decode(g, tiled));
  return g;
}

}  // namespace kiln
