#include "serve/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "app/default_model.h"
#include "models/wan_model.h"
#include "serve/http_api.h"
#include "serve/model_worker.h"

namespace kiln::serve {

namespace {

namespace fs = std::filesystem;

Result<std::vector<uint8_t>> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("{}: cannot read", path);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The PNGs of a run's images, encoded when called (on the worker's encoder
// thread with overlap).
PendingResult png_outputs(Result<std::vector<GeneratedImage>> images) {
  auto held = std::make_shared<Result<std::vector<GeneratedImage>>>(std::move(images));
  return [held]() -> JobResult {
    if (!held->ok()) return held->status();
    std::vector<JobOutput> outputs;
    for (const GeneratedImage& image : **held) {
      KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> png,
                            encode_png(image.rgb.data(), image.width, image.height, image.text));
      outputs.push_back({"image/png", std::move(png), image.seed});
    }
    return outputs;
  };
}

// One job, or a batch of one shape as one run (Generator::generate_together).
// Every job hears every step; a job cancelled inside a batch ends at once and
// the batch stops only when all of its jobs are cancelled.
std::vector<PendingResult> run_image_jobs(Generator& generator, const std::vector<Job*>& jobs) {
  const GenerationProgress progress = [&](size_t, int i, int steps) {
    for (Job* job : jobs) {
      if (job->cancel_requested)
        job->finish(Status(StatusCode::kCancelled, fmt::format("cancelled after step {}", i + 1)));
      job->step(i, steps);
      if (i + 1 == steps) job->decoding(0, 1);  // the VAE runs next
    }
  };
  const CancelCheck cancelled = [&] {
    return std::all_of(jobs.begin(), jobs.end(), [](Job* j) { return j->cancel_requested.load(); });
  };
  if (jobs.size() == 1) {
    Result<GenerationResult> result = generator.generate(jobs[0]->request.image, progress, cancelled);
    return {
        png_outputs(result.ok() ? Result<std::vector<GeneratedImage>>(std::move(result->images)) : result.status())};
  }
  std::vector<GenerationRequest> requests;
  for (Job* job : jobs) requests.push_back(job->request.image);
  Result<std::vector<GenerationResult>> results = generator.generate_together(requests, progress, cancelled);
  std::vector<PendingResult> out;
  for (size_t k = 0; k < jobs.size(); ++k)
    out.push_back(png_outputs(results.ok() ? Result<std::vector<GeneratedImage>>(std::move((*results)[k].images))
                                           : results.status()));
  return out;
}

JobResult run_video_job(VideoGenerator& generator, Job& job) {
  VideoGenerationRequest r = job.request.video;
  r.output = (fs::temp_directory_path() / fmt::format("kiln-{}.mp4", job.id)).string();
  const VideoProgress progress{.step = [&](int i, int steps) { job.step(i, steps); },
                               .decoded = [&](int64_t done, int64_t total) { job.decoding(done, total); },
                               .cancelled = [&] { return job.cancel_requested.load(); }};
  Result<VideoResult> result = generator.generate(r, progress);
  Result<std::vector<uint8_t>> bytes = result.ok() ? read_file_bytes(r.output) : result.status();
  std::error_code ignored;
  fs::remove(r.output, ignored);
  if (!bytes.ok()) return bytes.status();
  return std::vector<JobOutput>{{"video/mp4", std::move(*bytes), result->seed}};
}

// A model's files' bytes: the file, or every file under the folder.
uintmax_t files_bytes(const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return fs::file_size(path, error);
  uintmax_t total = 0;
  for (fs::recursive_directory_iterator it(path, error), end; !error && it != end; it.increment(error))
    if (it->is_regular_file(error)) total += it->file_size(error);
  return total;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

struct Server::Impl {
  struct Model {
    std::string name, path;
    JobKind kind = JobKind::kImage;
    uintmax_t bytes = 0;  // its files' size: what it counts for against --model-memory
    // Loaded (one of the two) while in the model cache; guarded by cache_mutex.
    std::unique_ptr<Generator> image;
    std::unique_ptr<VideoGenerator> video;
    int in_use = 0;         // runs holding it: never unloaded while > 0
    uint64_t last_use = 0;  // cache_clock when last acquired
    int64_t loads = 0;
    std::unique_ptr<ModelWorker> worker;
  };

  // The model cache: every model is loaded at start; with --model-memory,
  // the least recently used idle models are unloaded to keep the loaded ones'
  // bytes within it, and loaded again by their next run.
  mutable std::mutex cache_mutex;
  uint64_t cache_clock = 0;

  Status load(Model& m) {
    if (m.image || m.video) return ok_status();
    const uintmax_t budget = options.model_memory_bytes;
    if (budget) {
      uintmax_t loaded = 0;
      for (const auto& other : models) loaded += (other->image || other->video) ? other->bytes : 0;
      // Oldest first, among the idle ones.
      while (loaded + m.bytes > budget) {
        Model* oldest = nullptr;
        for (const auto& other : models)
          if ((other->image || other->video) && other->in_use == 0 && (!oldest || other->last_use < oldest->last_use))
            oldest = other.get();
        if (!oldest) break;  // the rest are running: go over the budget rather than wait
        log(fmt::format("unloading {} ({:.0f} MiB) to make room for {}", oldest->name, oldest->bytes / 1048576.0,
                        m.name));
        oldest->image.reset();
        oldest->video.reset();
        loaded -= oldest->bytes;
      }
    }
    if (m.kind == JobKind::kVideo) {
      KILN_ASSIGN_OR_RETURN(m.video, VideoGenerator::open(m.path, options.video));
    } else {
      KILN_ASSIGN_OR_RETURN(m.image, Generator::open({.model = m.path, .pipeline = options.pipeline}));
    }
    ++m.loads;
    return ok_status();
  }

  // The model, loaded, for one run of its worker.
  Status acquire(Model& m) {
    std::lock_guard lock(cache_mutex);
    KILN_RETURN_IF_ERROR(load(m));
    ++m.in_use;
    m.last_use = ++cache_clock;
    return ok_status();
  }
  void release(Model& m) {
    std::lock_guard lock(cache_mutex);
    --m.in_use;
  }

  std::vector<PendingResult> run_jobs(Model& m, const std::vector<Job*>& jobs) {
    if (Status s = acquire(m); !s.ok()) return std::vector<PendingResult>(jobs.size(), [s] { return JobResult(s); });
    std::vector<PendingResult> results;
    if (m.kind == JobKind::kVideo) {
      // The MP4 is written as the VAE decodes: nothing is left to encode after the run.
      auto result = std::make_shared<JobResult>(run_video_job(*m.video, *jobs[0]));
      results = {[result] { return std::move(*result); }};
    } else {
      results = run_image_jobs(*m.image, jobs);
    }
    release(m);
    return results;
  }

  // Requests of one shape share a run when --batch allows it (and the model is loaded to say which).
  std::string batch_key(Model& m, const Job& job) {
    std::lock_guard lock(cache_mutex);
    const GenerationRequest& r = job.request.image;
    return m.image && m.image->batchable(r) ? Generator::batch_key(r) : std::string();
  }

  ServeOptions options;
  std::vector<std::unique_ptr<Model>> models;
  std::unique_ptr<HttpApi> api;

  void log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  std::string cache_metrics() const {
    std::lock_guard lock(cache_mutex);
    std::string out = metric_family("kiln_model_loaded", "gauge", "1 while the model is in the model cache.");
    for (const auto& m : models)
      out += fmt::format("kiln_model_loaded{{model=\"{}\"}} {}\n", m->name, int(m->image || m->video));
    out += metric_family("kiln_model_loads_total", "counter", "Times the model was loaded (start included).");
    for (const auto& m : models) out += fmt::format("kiln_model_loads_total{{model=\"{}\"}} {}\n", m->name, m->loads);
    return out;
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  impl_->api.reset();  // its drain first: the workers it closes belong to the models
}

Result<std::unique_ptr<Server>> Server::open(const ServeOptions& options) {
  if (!is_loopback_host(options.host) && options.api_key.empty())
    return invalid_argument("--host {} serves other machines: give --api-key KEY too", options.host);
  if (options.queue < 1) return invalid_argument("--queue must be at least 1");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::vector<std::string> paths = options.models;
  if (paths.empty()) paths.push_back("");  // the default model
  // Each model is loaded once here, so a bad one stops the server before it listens.
  for (const std::string& path : paths) {
    auto m = std::make_unique<Impl::Model>();
    Impl::Model& model = *m;
    model.kind = !path.empty() && is_wan_folder(path) ? JobKind::kVideo : JobKind::kImage;
    model.path = path;
    if (path.empty()) {
      KILN_ASSIGN_OR_RETURN(model.path, find_default_model());
    }
    model.bytes = files_bytes(model.path);
    if (options.model_memory_bytes && model.bytes > options.model_memory_bytes)
      return invalid_argument("--model-memory {:.3g} MiB is less than {}'s {:.3g} MiB",
                              options.model_memory_bytes / 1048576.0, model.path, model.bytes / 1048576.0);
    {
      std::lock_guard lock(impl->cache_mutex);
      KILN_RETURN_IF_ERROR(impl->load(model));
      model.last_use = ++impl->cache_clock;
    }
    model.name = model.video ? model.video->model_name() : model.image->model_name();
    for (const auto& other : impl->models)
      if (other->name == model.name)
        return invalid_argument("two models are named '{}': {} and {}", model.name, other->path, path);
    Impl* owner = impl.get();
    const WorkerOptions worker{.capacity = options.queue,
                               .batch_images = model.kind == JobKind::kImage ? options.batch_images : 1,
                               .batch_key = [owner, &model](const Job& job) { return owner->batch_key(model, job); },
                               .overlap_encoding = options.overlap_encoding};
    model.worker = std::make_unique<ModelWorker>(
        model.name, [owner, &model](const std::vector<Job*>& jobs) { return owner->run_jobs(model, jobs); }, worker);
    impl->models.push_back(std::move(m));
  }
  std::vector<ApiModel> served;
  for (const auto& m : impl->models) served.push_back({m->name, m->path, m->kind, m->worker.get()});
  Impl* server = impl.get();
  // Each open event stream and each waiting synchronous request holds a
  // thread: room for every queued job's client, and some to spare.
  impl->api = std::make_unique<HttpApi>(std::move(served),
                                        ApiOptions{.api_key = options.api_key,
                                                   .limits = options.limits,
                                                   .grace_seconds = options.grace_seconds,
                                                   .threads = 8 + 2 * options.queue * impl->models.size(),
                                                   .log = options.log,
                                                   .more_metrics = [server] { return server->cache_metrics(); }});
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}


Status Server::run(const std::function<void(int)>& on_listening) {
  return impl_->api->run(impl_->options.host, impl_->options.port, on_listening);
}

void Server::shutdown() { impl_->api->shutdown(); }

}  // namespace kiln::serve
