#include "pipeline/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/sd_family.h"

namespace kiln {

namespace {

constexpr int kMaxBatch = 64;
constexpr int kMaxImageSide = 4096;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Status cancelled_after(int done, int steps) {
  return Status(StatusCode::kCancelled, fmt::format("cancelled after step {} of {}", done, steps));
}

Result<Tensor> guidance_embedding(float guidance_scale, int64_t dim, int64_t rows) {
  if (dim < 4 || dim % 2) return invalid_argument("a guidance embedding of width {}: an even width of 4 or more", dim);
  const int64_t half = dim / 2;
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::kF32, {rows, dim}));
  const double w = (double(guidance_scale) - 1.0) * 1000.0;
  for (int64_t k = 0; k < half; ++k) {
    // float32, as torch computes the frequencies and their product with w.
    const float freq = float(std::exp(double(k) * -(std::log(10000.0) / double(half - 1))));
    const float arg = float(w) * freq;
    for (int64_t r = 0; r < rows; ++r) {
      t.data<float>()[r * dim + k] = std::sin(arg);
      t.data<float>()[r * dim + half + k] = std::cos(arg);
    }
  }
  return t;
}

Result<std::unique_ptr<Pipeline>> Pipeline::load(const std::string& path, const PipelineOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(PipelineParts parts, sd_pipeline_parts(path, options));
  std::unique_ptr<Pipeline> p(new Pipeline(path, std::move(parts), options));
  p->load_ms_ = ms_since(start);
  return p;
}

Status Pipeline::run_host_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g) {
  const StepTables& tables = run.tables;
  const GenerateOptions& o = run.options;
  const Shape& shape = x.shape();
  const bool cfg = classifier_free(o);
  const int64_t rows = cfg ? 2 * shape[0] : shape[0];
  const size_t n = size_t(x.numel());
  Denoiser& denoiser = *parts_.denoiser;
  const DType timestep_dtype = denoiser.spec().timestep_dtype;
  KILN_ASSIGN_OR_RETURN(Tensor model_in, Tensor::empty(DType::kF32, {rows, shape[1], shape[2], shape[3]}));
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(timestep_dtype, denoiser.timestep_shape(rows)));
  std::vector<float> guided(cfg ? n : 0), x0_prev(n), noise(tables.needs_noise ? n : 0);
  float* xs = x.data<float>();
  for (int i = 0; i < steps; ++i) {
    const float scale = tables.in_scale[size_t(i)];
    float* in = model_in.data<float>();
    for (size_t j = 0; j < n; ++j) in[j] = xs[j] * scale;
    if (cfg) std::memcpy(in + n, in, n * sizeof(float));
    for (int64_t j = 0; j < t.numel(); ++j) {
      if (timestep_dtype == DType::kI64) t.data<int64_t>()[j] = int64_t(tables.timestep[size_t(i)]);
      else t.data<float>()[j] = tables.timestep[size_t(i)];
    }
    KILN_ASSIGN_OR_RETURN(Tensor prediction, denoiser.predict(model_in, t, run.conditions));
    g.times.model += denoiser.runner().last_report().run_ms;
    g.times.compile += denoiser.runner().last_report().compile_ms;
    // Classifier-free guidance over the batched [uncond, cond] prediction;
    // unguided, the prediction is the prompt's alone.
    const float* out = prediction.data<float>();
    if (cfg) {
      const float *uncond = out, *cond = out + n;
      for (size_t j = 0; j < n; ++j) guided[j] = uncond[j] + o.guidance_scale * (cond[j] - uncond[j]);
      out = guided.data();
    }
    // The same place in the noise stream kiln.DenoiseStep draws from.
    if (tables.needs_noise)
      NoiseStream(o.seed, run.noise_first_pair + uint64_t(i) * ((n + 1) / 2)).fill(noise.data(), n);
    scheduler_step(tables, i, xs, out, x0_prev.data(), tables.needs_noise ? noise.data() : nullptr, xs, n);
    if (o.keep_trajectory) g.trajectory.push_back(*Tensor::copy_of(x.view()));
    if (o.on_step) o.on_step(i, tables.steps());
    if (o.cancelled && o.cancelled()) return cancelled_after(i + 1, tables.steps());
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
    const Denoiser& denoiser = *parts_.denoiser;
    const bool cfg = classifier_free(o);
    std::vector<std::pair<std::string, Shape>> conditions;
    for (const auto& [name, t] : run.conditions) conditions.emplace_back(name, t.shape());
    const DenoiseLoopSpec spec{.latent = shape,
                               .conditions = conditions, .timestep_dtype = denoiser.spec().timestep_dtype,
                               .timestep_shape = denoiser.timestep_shape(cfg ? 2 * shape[0] : shape[0]),
                               .guidance_scale = o.guidance_scale, .guided = cfg,
                               .noise_first_pair = run.noise_first_pair};
    auto loop = denoise_loop_graph(denoiser.loop_builder(), tables, spec);
    if (!loop.ok()) return loop.status().with_context(denoiser.spec().label);
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
  for (const auto& [name, t] : run.conditions) KILN_RETURN_IF_ERROR(plan->bind_input(name, t.view()));
  KILN_RETURN_IF_ERROR(plan->bind_output("x_next", x.view()));
  KILN_RETURN_IF_ERROR(plan->bind_output("x0", x0_prev.view()));
  KILN_RETURN_IF_ERROR(plan->bind_output("step_next", step_view));
  const auto start = std::chrono::steady_clock::now();
  Status status = plan->run_repeated(steps, [&](int64_t done) {
    if (o.keep_trajectory) g.trajectory.push_back(*Tensor::copy_of(x.view()));
    if (o.on_step) o.on_step(int(done - 1), tables.steps());
    return o.cancelled && o.cancelled() ? cancelled_after(int(done), tables.steps()) : ok_status();
  });
  g.times.model = ms_since(start);
  return status;
}

Result<bool> Pipeline::choose_whole_loop(const DenoiseRun& run, const Tensor& x) {
  if (auto it = whole_loop_chosen_.find(run.key); it != whole_loop_chosen_.end()) return it->second;
  GenerateOptions silent = run.options;
  silent.on_step = nullptr;
  silent.keep_trajectory = false;
  const DenoiseRun quiet{run.tables, silent, run.conditions, run.noise_first_pair, run.key};
  // The first steps on scratch latents: one step each way to compile (the
  // UNet's plan, the loop's plan) and let the UNet's runner settle its own
  // eager-or-graph choice; then 1 and 3 steps each way, twice, taking turns.
  // A step's cost is the difference over the two extra steps: graph-loop's
  // once-per-image work (the prompt's keys and values) then counts as little
  // as it does over a whole generation.
  auto trial = [&](bool whole, int steps) -> Result<double> {
    KILN_ASSIGN_OR_RETURN(Tensor scratch, Tensor::copy_of(x.view()));
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
  const char* host = execution_mode_name(parts_.denoiser->runner().last_mode());
  if (options_.log)
    options_.log(fmt::format("auto: a denoise step takes {:.3f} ms as graph-loop and {:.3f} ms as a host loop over "
                             "the UNet ({}): using {}",
                             ms[1], ms[0], host, whole_loop ? "graph-loop" : host));
  whole_loop_chosen_[run.key] = whole_loop;
  return whole_loop;
}

Result<Pipeline::SchedulerChoice> Pipeline::choose_scheduler(const std::string& name) const {
  SchedulerChoice c{.config = parts_.scheduler};
  if (name.empty()) {
    c.kind = default_scheduler_kind(c.config, &c.substituted);
    // The substitute visits the timesteps the config's own class would.
    if (c.substituted && !c.config.timestep_spacing)
      c.config.timestep_spacing = default_timestep_spacing(c.config.class_name);
    return c;
  }
  std::string_view kind_name = name;
  c.config.use_karras_sigmas = kind_name.ends_with("_karras");
  if (c.config.use_karras_sigmas) kind_name.remove_suffix(std::string_view("_karras").size());
  KILN_ASSIGN_OR_RETURN(c.kind, parse_scheduler_kind(kind_name));
  return c;
}

bool Pipeline::classifier_free(const GenerateOptions& o) const {
  return guidance_on(o.guidance_scale) && !parts_.guidance_embedding_dim;
}

Result<bool> Pipeline::draws_step_noise(const std::string& scheduler) const {
  KILN_ASSIGN_OR_RETURN(const SchedulerChoice choice, choose_scheduler(scheduler));
  KILN_ASSIGN_OR_RETURN(const StepTables tables, make_step_tables(choice.kind, choice.config, 1, 0));
  return tables.needs_noise;
}

Result<Generation> Pipeline::generate(const GenerateOptions& o) {
  const int64_t factor = parts_.codec->spec().factor;
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
      g.width % factor || g.height % factor)
    return invalid_argument("the image size must be a multiple of {} from {} to {} on each side, got {}x{}", factor,
                            factor, kMaxImageSide, g.width, g.height);
  int64_t batch = o.batch;
  for (const GenerateOptions::Member& m : o.batch_with) batch += m.batch;
  if (o.batch < 1 || batch > kMaxBatch) return invalid_argument("the batch must be 1 to {}, got {}", kMaxBatch, batch);
  if (!std::isfinite(o.guidance_scale)) return invalid_argument("the guidance scale must be a finite number");

  KILN_ASSIGN_OR_RETURN(SchedulerChoice choice, choose_scheduler(o.scheduler));
  if (o.timestep_spacing) choice.config.timestep_spacing = o.timestep_spacing;
  const SchedulerKind kind = choice.kind;
  const SchedulerConfig& config = choice.config;
  if (choice.substituted && options_.log)
    options_.log(fmt::format("the model's scheduler config names {}, which kiln does not implement: using {} "
                             "over its timesteps (--scheduler to choose)",
                             config.class_name, scheduler_kind_name(kind)));
  const bool karras = config.use_karras_sigmas && (kind == SchedulerKind::kEuler || kind == SchedulerKind::kDpmpp2m);
  g.scheduler = std::string(scheduler_kind_name(kind)) + (karras ? "_karras" : "");
  const int first_step = o.init_image ? image_to_image_first_step(o.steps, o.strength) : 0;
  if (first_step == o.steps && o.steps > 0)
    return invalid_argument("strength {} of {} steps leaves no step to run: raise the strength or the steps",
                            o.strength, o.steps);
  KILN_ASSIGN_OR_RETURN(StepTables tables, make_step_tables(kind, config, o.steps, first_step));

  if (!o.batch_with.empty() && (o.init_image || tables.needs_noise))
    return invalid_argument("{} cannot run in a batch of several seeds", o.init_image ? "image to image" : g.scheduler);
  std::vector<Conditioner::Prompts> prompts = {{o.prompt, o.negative_prompt, o.batch}};
  for (const GenerateOptions::Member& m : o.batch_with) prompts.push_back({m.prompt, m.negative_prompt, m.batch});
  double prompt_ms[2] = {0, 0};
  KILN_ASSIGN_OR_RETURN(Conditioning conditions,
                        parts_.conditioner->encode(prompts, prompt_ms, classifier_free(o)));
  g.times.tokenize = prompt_ms[0];
  g.times.text_encoder = prompt_ms[1];
  if (o.release_stages) parts_.conditioner->release();
  if (parts_.guidance_embedding_dim) {  // an LCM UNet: the guidance as an input
    KILN_ASSIGN_OR_RETURN(Tensor w, guidance_embedding(o.guidance_scale, parts_.guidance_embedding_dim,
                                                       conditions[0].second.shape()[0]));
    conditions.emplace_back("timestep_cond", std::move(w));
  }
  if (parts_.size_conditioning) {
    // SDXL's time_ids: original size, crop's top-left corner, target size;
    // diffusers' defaults, the image's size and no crop.
    const int64_t rows = conditions[0].second.shape()[0];
    KILN_ASSIGN_OR_RETURN(Tensor time_ids, Tensor::empty(DType::kF32, {rows, 6}));
    const float ids[6] = {float(g.height), float(g.width), 0.0f, 0.0f, float(g.height), float(g.width)};
    for (int64_t r = 0; r < rows; ++r) std::memcpy(time_ids.data<float>() + r * 6, ids, sizeof(ids));
    conditions.emplace_back("time_ids", std::move(time_ids));
  }

  // The initial latents from the seed's noise stream: standard noise times
  // init_noise_sigma; for image to image, the image's latents (drawn with
  // the first draws) noised with the next ones to the first step's level.
  const Shape shape{batch, parts_.denoiser->spec().latent_channels, g.height / factor, g.width / factor};
  KILN_ASSIGN_OR_RETURN(Tensor x, Tensor::empty(DType::kF32, shape));
  NoiseStream noise(o.seed);
  Tensor x0;
  if (o.init_image) {
    const auto start = std::chrono::steady_clock::now();
    auto encoded = parts_.codec->encode(*o.init_image, o.batch, noise);
    if (!encoded.ok()) return encoded.status().with_context("image to image");
    x0 = std::move(*encoded);
    g.times.vae_encode = ms_since(start);
  }
  // Each member's images from its own seed's stream, as it would draw them alone.
  const size_t per_image = size_t(x.numel() / batch);
  noise.fill(x.data<float>(), per_image * size_t(o.batch));
  float* member_x = x.data<float>() + per_image * size_t(o.batch);
  for (const GenerateOptions::Member& m : o.batch_with) {
    NoiseStream(m.seed).fill(member_x, per_image * size_t(m.batch));
    member_x += per_image * size_t(m.batch);
  }
  for (int64_t j = 0; j < x.numel(); ++j) {
    float& v = x.data<float>()[j];
    v = o.init_image ? tables.image_scale * x0.data<float>()[j] + tables.image_noise_scale * v
                     : v * tables.init_noise_sigma;
  }

  // Everything a compiled loop depends on: the shapes (which also fix where
  // the step noise starts), the guidance scale, the scheduler, its spacing
  // and the steps.
  // The LoRA set is the pipeline's, merged at load: named here all the same,
  // so a plan is never taken for another set's.
  std::string condition_shapes;
  for (const auto& [name, t] : conditions) condition_shapes += " " + signature_entry(name, DType::kF32, t.shape());
  for (const LoraSpec& lora : options_.loras) condition_shapes += fmt::format(" lora={}:{}", lora.path, lora.weight);
  const DenoiseRun run{tables, o, conditions, noise.next_pair(),
                       fmt::format("{}{} guidance={} {} spacing={} steps={} from={}",
                                   signature_entry("x", DType::kF32, shape), condition_shapes, o.guidance_scale,
                                   g.scheduler, o.timestep_spacing ? timestep_spacing_name(*o.timestep_spacing) : "",
                                   o.steps, first_step)};
  g.steps_run = tables.steps();
  bool whole_loop = options_.whole_loop;
  if (options_.mode == ExecutionMode::kAuto) {
    KILN_ASSIGN_OR_RETURN(whole_loop, choose_whole_loop(run, x));
  }
  const auto start = std::chrono::steady_clock::now();
  if (whole_loop) KILN_RETURN_IF_ERROR(run_whole_loop(run, tables.steps(), x, g));
  else KILN_RETURN_IF_ERROR(run_host_loop(run, tables.steps(), x, g));
  g.times.denoise = ms_since(start);
  // The denoiser idles while the VAE decodes: its working memory (and,
  // with nothing to follow, its weights) is the VAE's.
  if (o.release_stages) {
    loop_plans_.erase(run.key);
    parts_.denoiser->runner().release();
  } else if (whole_loop) {
    loop_plans_[run.key]->release_arena_memory();
  } else {
    parts_.denoiser->runner().release_arena_memory();
  }
  g.mode = whole_loop ? "graph-loop" : execution_mode_name(parts_.denoiser->runner().last_mode());
  g.latents = std::move(x);
  // Tiles when asked, or by default when a side is over twice the VAE's tile.
  const auto decode_start = std::chrono::steady_clock::now();
  g.vae_tiled = o.vae_tiling.value_or(std::max(g.width, g.height) > 2 * parts_.codec->spec().tile);
  KILN_ASSIGN_OR_RETURN(g.image, parts_.codec->decode(g.latents, g.vae_tiled));
  g.pixels = image_to_pixels(g.image);
  g.times.vae_decode = ms_since(decode_start);
  return g;
}

}  // namespace kiln
