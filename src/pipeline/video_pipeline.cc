#include "pipeline/video_pipeline.h"

extern "C" {
#include <libswscale/swscale.h>
}

#include <fmt/format.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/heap_probe.h"
#include "core/rng.h"
#include "models/net_builder.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/prompt_text.h"
#include "pipeline/sentencepiece.h"

namespace kiln {

namespace {

constexpr int64_t kTextRows = 512;  // the context's rows: the prompt's, then zeros
constexpr int64_t kMaxFrames = 4 * 256 + 1;
constexpr int64_t kMaxSide = 4096;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Runs `graph` once in `mode` (eager, or a plan) and returns a copy of output 0.
Result<Tensor> run_once(Graph graph, const NamedTensors& inputs, const VideoPipelineOptions& o) {
  auto runner = ModelRunner::create(
      []() -> Result<Graph> { return internal_error("a one-run graph is not reloaded"); },
      {.mode = o.mode == ExecutionMode::kEager ? ExecutionMode::kEager : ExecutionMode::kGraph, .passes = o.passes},
      std::move(graph));
  if (!runner.ok()) return runner.status();
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, (*runner)->run(inputs));
  return Tensor::copy_of(out[0].view());
}

// [1, 3, 1, H, W] in [-1, 1] from H x W x RGB bytes.
Result<Tensor> pixels_to_frame(const RgbImage& image) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::kF32, {1, 3, 1, image.height, image.width}));
  const int64_t plane = int64_t(image.width) * image.height;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t c = 0; c < 3; ++c)
      t.data<float>()[c * plane + p] = float(image.rgb[size_t(p * 3 + c)]) / 127.5f - 1.0f;
  return t;
}

}  // namespace

Result<RgbImage> resize_to_cover(const RgbImage& image, int64_t width, int64_t height) {
  if (image.width < 1 || image.height < 1 || image.rgb.size() != size_t(image.width) * size_t(image.height) * 3)
    return invalid_argument("the first frame is an empty or inconsistent image");
  if (image.width == width && image.height == height) return image;
  const double scale = std::max(double(width) / image.width, double(height) / image.height);
  const int sw = std::max<int>(int(width), int(std::lround(image.width * scale)));
  const int sh = std::max<int>(int(height), int(std::lround(image.height * scale)));
  SwsContext* sws = sws_getContext(image.width, image.height, AV_PIX_FMT_RGB24, sw, sh, AV_PIX_FMT_RGB24, SWS_LANCZOS,
                                   nullptr, nullptr, nullptr);
  if (!sws) return internal_error("libswscale cannot scale {}x{} to {}x{}", image.width, image.height, sw, sh);
  std::vector<uint8_t> scaled(size_t(sw) * size_t(sh) * 3);
  const uint8_t* src[1] = {image.rgb.data()};
  const int src_stride[1] = {image.width * 3};
  uint8_t* dst[1] = {scaled.data()};
  const int dst_stride[1] = {sw * 3};
  sws_scale(sws, src, src_stride, 0, image.height, dst, dst_stride);
  sws_freeContext(sws);
  RgbImage out{int(width), int(height), std::vector<uint8_t>(size_t(width) * size_t(height) * 3)};
  const int64_t x0 = (sw - width) / 2, y0 = (sh - height) / 2;
  for (int64_t y = 0; y < height; ++y)
    std::memcpy(out.rgb.data() + y * width * 3, scaled.data() + ((y + y0) * sw + x0) * 3, size_t(width) * 3);
  return out;
}

VideoPipeline::~VideoPipeline() = default;

Result<std::unique_ptr<VideoPipeline>> VideoPipeline::load(const std::string& path,
                                                           const VideoPipelineOptions& options) {
  std::unique_ptr<VideoPipeline> p(new VideoPipeline());
  KILN_ASSIGN_OR_RETURN(p->folder_, wan_folder_open(path, options.variant));
  p->options_ = options;
  if (p->folder_.scheduler_config_path.empty()) {
    p->scheduler_ = wan_scheduler_config();  // Wan's own folder has no scheduler config: its pipeline's
  } else {
    KILN_ASSIGN_OR_RETURN(p->scheduler_, load_scheduler_config(p->folder_.scheduler_config_path));
  }
  return p;
}

std::string VideoPipeline::scheduler_name(const std::string& name) const {
  return name.empty() ? scheduler_kind_name(default_scheduler_kind(scheduler_)) : name;
}

std::string VideoPipeline::description() const {
  return fmt::format("Wan2.2 TI2V, {}", wan_layout_name(folder_.layout));
}

Result<Tensor> VideoPipeline::encode_prompts(const VideoRequest& r, StageTimes& times, int& texts_encoded) {
  const auto start = std::chrono::steady_clock::now();
  texts_encoded = 0;
  // Loaded at the first text the cache lacks.
  std::unique_ptr<SentencePiece> sp;
  std::unique_ptr<WanNetwork<Umt5Config>> encoder;
  // A text's 512 rows: from the cache (moved to its newest end), or encoded
  // (its tokens' states, zero-padded) and cached.
  auto rows_of = [&](const std::string& text) -> Result<const Tensor*> {
    for (auto it = text_cache_.begin(); it != text_cache_.end(); ++it)
      if (it->first == text) {
        text_cache_.splice(text_cache_.end(), text_cache_, it);
        return &text_cache_.back().second;
      }
    if (!sp) {
      const auto tokenize_start = std::chrono::steady_clock::now();
      KILN_ASSIGN_OR_RETURN(sp, SentencePiece::load(folder_.tokenizer_model));
      times.tokenize += ms_since(tokenize_start);
      KILN_ASSIGN_OR_RETURN(encoder, wan_load_text_encoder(folder_));
    }
    const std::vector<int64_t> ids = t5_token_ids(*sp, text);
    for (int64_t id : ids)
      if (id < 0 || id >= encoder->config.vocab)
        return invalid_argument("{}: token id {} is outside the text encoder's {} embeddings", folder_.tokenizer_model,
                                id, encoder->config.vocab);
    const int64_t n = int64_t(ids.size());
    KILN_ASSIGN_OR_RETURN(Graph graph, umt5_graph(encoder->config, encoder->weights, n));
    KILN_ASSIGN_OR_RETURN(Tensor input, Tensor::from_vector<int64_t>({1, n}, ids));
    KILN_ASSIGN_OR_RETURN(Tensor hidden, run_once(std::move(graph), {{"input_ids", input}}, options_));
    KILN_ASSIGN_OR_RETURN(Tensor rows, Tensor::empty(DType::kF32, {kTextRows, encoder->config.d_model}));
    std::memcpy(rows.raw(), hidden.raw(), hidden.nbytes());
    if (text_cache_.size() == kTextCacheEntries) text_cache_.pop_front();
    text_cache_.emplace_back(text, std::move(rows));
    ++texts_encoded;
    return &text_cache_.back().second;
  };
  // [2, 512, d]: the negative prompt's rows, then the prompt's (unguided:
  // [1, 512, d], the prompt's). Copied out one at a time: encoding the second
  // may evict the first from the cache.
  Tensor context;
  std::vector<std::string> texts = {clean_wan_prompt(r.prompt)};
  if (guidance_on(r.guidance_scale)) texts.insert(texts.begin(), clean_wan_prompt(r.negative_prompt));
  for (size_t k = 0; k < texts.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(const Tensor* rows, rows_of(texts[k]));
    const int64_t d = rows->shape()[1];
    if (k == 0) { KILN_ASSIGN_OR_RETURN(context, Tensor::empty(DType::kF32, {int64_t(texts.size()), kTextRows, d})); }
    std::memcpy(context.data<float>() + int64_t(k) * kTextRows * d, rows->raw(), rows->nbytes());
  }
  times.text_encoder = ms_since(start) - times.tokenize;
  return context;  // `encoder` goes out of scope: its files are unmapped before the transformer's are mapped
}

Result<Tensor> VideoPipeline::encode_first_frame(const VideoRequest& r, StageTimes& times) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(RgbImage image, resize_to_cover(*r.first_frame, r.width, r.height));
  KILN_ASSIGN_OR_RETURN(auto vae, wan_load_vae(folder_));
  KILN_ASSIGN_OR_RETURN(Graph graph, wan_vae_encoder_graph(vae->config, vae->weights, r.height, r.width));
  KILN_ASSIGN_OR_RETURN(Tensor frame, pixels_to_frame(image));
  KILN_ASSIGN_OR_RETURN(Tensor latent, run_once(std::move(graph), {{"sample", frame}}, options_));
  times.vae_encode = ms_since(start);
  return latent;
}

Status VideoPipeline::denoise_host_loop(const VideoRequest& r, const StepTables& tables, const Tensor& context,
                                        const Tensor* first_latent, const WanNetwork<WanTransformerConfig>& dit,
                                        Tensor& x, VideoGeneration& g) {
  const Shape& shape = x.shape();
  const bool cfg = guidance_on(r.guidance_scale);
  const WanVideoShape video{.batch = cfg ? 2 : 1, .frames = shape[2], .height = shape[3], .width = shape[4]};
  const bool clean = first_latent != nullptr;
  auto runner = ModelRunner::create([&]() { return wan_transformer_graph(dit.config, dit.weights, video, clean); },
                                    {.mode = options_.mode == ExecutionMode::kEager ? ExecutionMode::kEager
                                                                                    : ExecutionMode::kGraph,
                                     .passes = options_.passes});
  if (!runner.ok()) return runner.status();
  const size_t n = size_t(x.numel());
  Shape batch_shape = shape;
  batch_shape[0] = video.batch;
  KILN_ASSIGN_OR_RETURN(Tensor model_in, Tensor::empty(DType::kF32, batch_shape));
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::kF32, {video.batch}));
  std::vector<float> guided(cfg ? n : 0), x0_prev(n, 0.0f), corrected(n, 0.0f), x0_older(n, 0.0f);
  float* xs = x.data<float>();
  const size_t frame0 = clean ? size_t(first_latent->numel()) / size_t(shape[1]) : 0;  // values a channel of frame 0
  const size_t per_channel = n / size_t(shape[1]);
  for (int i = 0; i < tables.steps(); ++i) {
    for (int64_t row = 0; row < video.batch; ++row) {
      std::memcpy(model_in.data<float>() + size_t(row) * n, xs, n * sizeof(float));
      t.data<float>()[row] = tables.timestep[size_t(i)];
    }
    KILN_ASSIGN_OR_RETURN(
        std::vector<Tensor> out,
        (*runner)->run({{"hidden_states", model_in}, {"timestep", t}, {"encoder_hidden_states", context}}));
    g.times.model += (*runner)->last_report().run_ms;
    g.times.compile += (*runner)->last_report().compile_ms;
    const float* prediction = out[0].data<float>();
    if (cfg) {
      const float *uncond = prediction, *cond = prediction + n;
      for (size_t j = 0; j < n; ++j) guided[j] = uncond[j] + r.guidance_scale * (cond[j] - uncond[j]);
      prediction = guided.data();
    }
    if (tables.unipc.empty()) scheduler_step(tables, i, xs, prediction, x0_prev.data(), nullptr, xs, n);
    else unipc_step(tables, i, xs, prediction, corrected.data(), x0_prev.data(), x0_older.data(), xs, n);
    if (clean)  // frame 0 back to the image's latent
      for (int64_t c = 0; c < shape[1]; ++c)
        std::memcpy(xs + size_t(c) * per_channel, first_latent->data<float>() + size_t(c) * frame0,
                    frame0 * sizeof(float));
    if (r.keep_trajectory) g.trajectory.push_back(*Tensor::copy_of(x.view()));
    if (r.on_step) r.on_step(i, tables.steps());
    if (r.cancelled && r.cancelled()) return cancelled_after(i + 1, tables.steps());
  }
  return ok_status();
}

Status VideoPipeline::denoise_whole_loop(const VideoRequest& r, const StepTables& tables, const Tensor& context,
                                         const Tensor* first_latent, const WanNetwork<WanTransformerConfig>& dit,
                                         Tensor& x, VideoGeneration& g) {
  const auto start = std::chrono::steady_clock::now();
  const Shape& shape = x.shape();
  const bool cfg = guidance_on(r.guidance_scale);
  const WanVideoShape video{.batch = cfg ? 2 : 1, .frames = shape[2], .height = shape[3], .width = shape[4]};
  const bool clean = first_latent != nullptr;
  DenoiserBuildFn transformer = [&](GraphBuilder& b, Value* sample, Value* timestep,
                                    const ConditionValues& conditions) -> Value* {
    GraphBuilder::Scope scope = b.scope("transformer");
    NetBuilder n(b, dit.weights);
    return build_wan_transformer(n, dit.config, video, clean, sample, timestep,
                                 conditions.at("encoder_hidden_states"));
  };
  const DenoiseLoopSpec spec{.latent = shape,
                             .conditions = {{"encoder_hidden_states", context.shape()}},
                             .timestep_dtype = DType::kF32,
                             .timestep_shape = {video.batch},
                             .guidance_scale = r.guidance_scale,
                             .guided = cfg,
                             .fixed_first_frame = clean};
  KILN_ASSIGN_OR_RETURN(Graph loop, denoise_loop_graph(transformer, tables, spec));
  const std::vector<LoopState> state = denoise_loop_state(tables);
  std::set<std::string> carried;
  for (const LoopState& s : state) carried.insert(s.input);
  KILN_ASSIGN_OR_RETURN(auto plan,
                        Plan::compile(std::move(loop), {.passes = options_.passes, .loop_carried = carried}));
  g.times.compile = ms_since(start);
  if (options_.log)
    options_.log(
        fmt::format("compiled the whole {}-step denoise loop into one plan: {} kernel calls a step (+{} once "
                    "per video), arena {:.1f} MiB ({:.0f} ms)",
                    tables.steps(), plan->stats().steps - plan->stats().loop_invariant_steps,
                    plan->stats().loop_invariant_steps, plan->stats().arena_bytes / 1048576.0, g.times.compile));
  // The loop's state in place, zeros before step 0: each output bound over its input.
  std::map<std::string, Tensor> buffers;
  int64_t step = 0;
  const TensorView step_view{DType::kI64, {}, &step};
  for (const LoopState& s : state) {
    if (std::string_view(s.input) == "x" || std::string_view(s.input) == "step") continue;
    KILN_ASSIGN_OR_RETURN(buffers[s.input], Tensor::empty(DType::kF32, shape));
  }
  for (const LoopState& s : state) {
    const TensorView view = std::string_view(s.input) == "x"      ? x.view()
                            : std::string_view(s.input) == "step" ? step_view
                                                                  : buffers[s.input].view();
    KILN_RETURN_IF_ERROR(plan->bind_input(s.input, view));
    KILN_RETURN_IF_ERROR(plan->bind_output(s.output, view));
  }
  int64_t seed = 0;
  if (tables.unipc.empty()) KILN_RETURN_IF_ERROR(plan->bind_input("seed", TensorView{DType::kI64, {}, &seed}));
  KILN_RETURN_IF_ERROR(plan->bind_input("encoder_hidden_states", context.view()));
  if (clean) KILN_RETURN_IF_ERROR(plan->bind_input("first_frame", first_latent->view()));
  const std::function<Status(int64_t)> after_step = [&](int64_t done) {
    if (r.keep_trajectory) g.trajectory.push_back(*Tensor::copy_of(x.view()));
    if (r.on_step) r.on_step(int(done - 1), tables.steps());
    return r.cancelled && r.cancelled() ? cancelled_after(int(done), tables.steps()) : ok_status();
  };
  const HeapAllocationCount heap = heap_allocation_count();
  const int64_t heap_before = heap ? heap() : 0;
  const auto run_start = std::chrono::steady_clock::now();
  Status status = plan->run_repeated(tables.steps(), after_step);
  g.times.model = ms_since(run_start);
  if (heap) g.loop_heap_allocations = heap() - heap_before;
  g.loop_output_copy_bytes = plan->output_copy_bytes();
  return status;
}

Status VideoPipeline::denoise(const VideoRequest& r, const StepTables& tables, const Tensor& context,
                              const Tensor* first_latent, const WanNetwork<WanTransformerConfig>& dit, Tensor& x,
                              VideoGeneration& g) {
  const auto start = std::chrono::steady_clock::now();
  // A video step costs seconds: timing it both ways (what `auto` does for
  // images) would cost several, so auto runs the whole loop, kiln's design
  // point; `kiln bench` compares the modes.
  const bool whole = options_.whole_loop || options_.mode == ExecutionMode::kAuto;
  g.mode = whole ? "graph-loop" : execution_mode_name(options_.mode);
  Status s = whole ? denoise_whole_loop(r, tables, context, first_latent, dit, x, g)
                   : denoise_host_loop(r, tables, context, first_latent, dit, x, g);
  g.times.denoise = ms_since(start);
  return s;
}

Result<VideoGeneration> VideoPipeline::generate(const VideoRequest& r, const VideoDecoder::FrameSink& sink) {
  if (r.frames < 1 || r.frames > kMaxFrames || (r.frames - 1) % 4 != 0)
    return invalid_argument("--frames must be 4k+1 (1, 5, 9, ..., 17, ..., 121) up to {}, got {}", kMaxFrames,
                            r.frames);
  if (r.width < 32 || r.height < 32 || r.width > kMaxSide || r.height > kMaxSide || r.width % 32 || r.height % 32)
    return invalid_argument("the video size must be a multiple of 32 from 32 to {} on each side, got {}x{}", kMaxSide,
                            r.width, r.height);
  if (r.steps < 1 || r.steps > 1000) return invalid_argument("--steps must be 1 to 1000, got {}", r.steps);
  if (!std::isfinite(r.guidance_scale)) return invalid_argument("the guidance scale must be a finite number");
  VideoGeneration g;
  g.width = r.width, g.height = r.height, g.frames = r.frames;
  SchedulerKind kind = default_scheduler_kind(scheduler_);
  if (!r.scheduler.empty()) {
    KILN_ASSIGN_OR_RETURN(kind, parse_scheduler_kind(r.scheduler));
    if (kind != SchedulerKind::kUniPc && kind != SchedulerKind::kFlowEuler)
      return invalid_argument("Wan is a flow model: --scheduler unipc or flow_euler, not {}", r.scheduler);
  }
  KILN_ASSIGN_OR_RETURN(StepTables tables, make_step_tables(kind, scheduler_, r.steps));
  g.scheduler = scheduler_kind_name(kind);

  KILN_ASSIGN_OR_RETURN(Tensor context, encode_prompts(r, g.times, g.texts_encoded));
  std::optional<Tensor> first_latent;
  if (r.first_frame) {
    KILN_ASSIGN_OR_RETURN(first_latent, encode_first_frame(r, g.times));
  }
  KILN_ASSIGN_OR_RETURN(auto dit, wan_load_transformer(folder_));
  const int64_t z = dit->config.in_channels;
  if (dit->config.text_dim != context.shape()[2] || (first_latent && first_latent->shape()[1] != z))
    return invalid_argument(
        "{}: the transformer takes {} latent channels and {}-wide text; the text encoder gives {} "
        "and the VAE {}",
        folder_.path, z, dit->config.text_dim, context.shape()[2], first_latent ? first_latent->shape()[1] : z);
  // The latents: kiln's noise for the seed; frame 0 the image's latent, image to video.
  const int64_t latent_frames = (r.frames - 1) / 4 + 1, h = r.height / 16, w = r.width / 16;
  KILN_RETURN_IF_ERROR(wan_check_shape(dit->config, {.batch = 2, .frames = latent_frames, .height = h, .width = w}));
  KILN_ASSIGN_OR_RETURN(Tensor x, Tensor::empty(DType::kF32, {1, z, latent_frames, h, w}));
  NoiseStream(r.seed, 0).fill(x.data<float>(), size_t(x.numel()));
  if (first_latent) {
    const size_t frame = size_t(h * w), per_channel = size_t(latent_frames) * frame;
    for (int64_t c = 0; c < x.shape()[1]; ++c)
      std::memcpy(x.data<float>() + size_t(c) * per_channel, first_latent->data<float>() + size_t(c) * frame,
                  frame * sizeof(float));
  }
  KILN_RETURN_IF_ERROR(denoise(r, tables, context, first_latent ? &*first_latent : nullptr, *dit, x, g));
  dit.reset();  // unmapped before the VAE is mapped
  g.latents = x;
  if (!sink) return g;

  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(auto vae, wan_load_vae(folder_));
  if (vae->config.z_dim != x.shape()[1])
    return invalid_argument("{}: the VAE decodes {} latent channels, the transformer makes {}", folder_.path,
                            vae->config.z_dim, x.shape()[1]);
  KILN_ASSIGN_OR_RETURN(auto decoder,
                        VideoDecoder::create(vae->config, vae->weights, h, w,
                                             {.mode = options_.mode == ExecutionMode::kEager ? ExecutionMode::kEager
                                                                                             : ExecutionMode::kGraph,
                                              .passes = options_.passes}));
  KILN_RETURN_IF_ERROR(decoder->decode(x, sink, r.on_decoded));
  g.times.vae_decode = ms_since(start);
  return g;
}

}  // namespace kiln
