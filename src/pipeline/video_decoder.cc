#include "pipeline/video_decoder.h"

#include <algorithm>
#include <cstring>

namespace kiln {

struct VideoDecoder::Call {
  WanVaeDecoder decoder;
  std::unique_ptr<Plan> plan;            // graph mode, compiled at the first call
  std::unique_ptr<EagerExecutor> eager;  // eager mode
  size_t frames_output = 0;              // the index of "frames" among the graph's outputs
};

namespace {

Result<size_t> output_index(const Graph& g, std::string_view name) {
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i]->name == name) return i;
  return internal_error("the VAE decoder graph has no output '{}'", name);
}

}  // namespace

VideoDecoder::~VideoDecoder() = default;

Result<std::unique_ptr<VideoDecoder>> VideoDecoder::create(const WanVaeConfig& config, const WeightSet& weights,
                                                           int64_t latent_height, int64_t latent_width,
                                                           const RunnerOptions& options) {
  std::unique_ptr<VideoDecoder> d(new VideoDecoder());
  d->config_ = &config, d->weights_ = &weights;
  d->height_ = latent_height, d->width_ = latent_width;
  d->options_ = options;
  for (bool first : {true, false}) {
    auto call = std::make_unique<Call>();
    KILN_ASSIGN_OR_RETURN(call->decoder, wan_vae_decoder_graph(config, weights, latent_height, latent_width, first));
    KILN_ASSIGN_OR_RETURN(call->frames_output, output_index(call->decoder.graph, "frames"));
    for (const WanVaeCache& c : call->decoder.caches) {
      if (std::find(d->cache_names_.begin(), d->cache_names_.end(), c.input) != d->cache_names_.end()) continue;
      d->cache_names_.push_back(c.input);
      KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::kF32, c.shape));
      d->caches_.push_back(std::move(t));
    }
    (first ? d->first_ : d->next_) = std::move(call);
  }
  return d;
}

Status VideoDecoder::run(Call& call, const Tensor& latent, const FrameSink& frames) {
  auto cache_of = [&](const std::string& input) -> Tensor& {
    const size_t i = size_t(std::find(cache_names_.begin(), cache_names_.end(), input) - cache_names_.begin());
    return caches_[i];
  };
  if (options_.mode == ExecutionMode::kEager) {
    if (!call.eager) call.eager = std::make_unique<EagerExecutor>(call.decoder.graph);
    NamedTensors inputs = {{"latent", latent}};
    for (const WanVaeCache& c : call.decoder.caches) inputs.emplace_back(c.input, cache_of(c.input));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, call.eager->run(inputs));
    const Graph& g = call.decoder.graph;
    for (const WanVaeCache& c : call.decoder.caches) {
      KILN_ASSIGN_OR_RETURN(const size_t i, output_index(g, c.output));
      std::memcpy(cache_of(c.input).raw(), out[i].raw(), out[i].nbytes());
    }
    return frames(out[call.frames_output].view());
  }
  if (!call.plan) {
    KILN_ASSIGN_OR_RETURN(call.plan, Plan::compile(std::move(call.decoder.graph), {.passes = options_.passes}));
    // The caches stay bound: each is read, then written, by every call.
    for (const WanVaeCache& c : call.decoder.caches) {
      KILN_RETURN_IF_ERROR(call.plan->bind_input(c.input, cache_of(c.input).view()));
      KILN_RETURN_IF_ERROR(call.plan->bind_output(c.output, cache_of(c.input).view()));
    }
  }
  KILN_RETURN_IF_ERROR(call.plan->bind_input("latent", latent.view()));
  KILN_RETURN_IF_ERROR(call.plan->run());
  return frames(call.plan->output(call.frames_output));
}

Status VideoDecoder::decode(const Tensor& latents, const FrameSink& frames, const Progress& progress) {
  const Shape& s = latents.shape();
  if (latents.dtype() != DType::kF32 || s.size() != 5 || s[0] != 1 || s[1] != config_->z_dim || s[3] != height_ ||
      s[4] != width_)
    return invalid_argument("the VAE decodes latents [1, {}, F, {}, {}], not {}", config_->z_dim, height_, width_,
                            shape_to_string(s));
  for (Tensor& c : caches_) std::memset(c.raw(), 0, c.nbytes());
  KILN_ASSIGN_OR_RETURN(Tensor latent, Tensor::empty(DType::kF32, {1, s[1], 1, s[3], s[4]}));
  const int64_t plane = s[3] * s[4];
  for (int64_t f = 0; f < s[2]; ++f) {
    for (int64_t c = 0; c < s[1]; ++c)
      std::memcpy(latent.data<float>() + c * plane, latents.data<float>() + (c * s[2] + f) * plane,
                  size_t(plane) * sizeof(float));
    KILN_RETURN_IF_ERROR(run(f == 0 ? *first_ : *next_, latent, frames));
    if (progress) progress(f + 1, s[2]);
  }
  return ok_status();
}

void VideoDecoder::release_memory() {
  for (Call* call : {first_.get(), next_.get()})
    if (call && call->plan) call->plan->release_arena_memory();
}

}  // namespace kiln
