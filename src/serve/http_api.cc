#include "serve/http_api.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "serve/base64.h"
#include "serve/web_page.h"

namespace kiln::serve {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int kSseHeartbeatMs = 15000;  // a comment line this often keeps proxies from closing a quiet stream
constexpr size_t kFinishedJobsKept = 256;
constexpr double kFinishedJobSeconds = 600;  // a finished job's outputs stay this long (then 404)

// JSON text that never throws: a message quoting the client's bytes may
// hold a broken UTF-8 sequence, which becomes U+FFFD instead of a 500.
std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// The OpenAI error envelope, which every route uses.
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& field = "",
                const char* type = "invalid_request_error") {
  res.status = status;
  json error = {{"message", message}, {"type", type}, {"code", nullptr}};
  error["param"] = field.empty() ? json(nullptr) : json(field);
  res.set_content(json_text(json{{"error", error}}), "application/json");
}

void send_json(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

// The body as JSON, or a 400 naming what is wrong.
bool parse_body(const httplib::Request& req, httplib::Response& res, json& body) {
  body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    send_error(res, 400, "the body is not valid JSON", "body");
    return false;
  }
  return true;
}

template <class T>
bool parsed_or_400(Parsed<T>& parsed, httplib::Response& res) {
  if (const auto* e = std::get_if<RequestError>(&parsed)) {
    send_error(res, 400, e->field.empty() ? e->message : fmt::format("{}: {}", e->field, e->message), e->field);
    return false;
  }
  return true;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

std::string metric_family(const char* name, const char* type, const char* help) {
  return fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

struct HttpApi::Impl {
  ApiOptions options;
  std::vector<ApiModel> models;
  httplib::Server http;
  std::atomic<bool> draining{false}, listen_returned{false};
  std::atomic<int> open_streams{0};
  std::thread drainer;


  mutable std::mutex mutex;  // guards the two below
  size_t current_model = 0;  // A1111's sd_model_checkpoint: the model a request naming none gets
  std::map<std::string, std::shared_ptr<Job>> jobs;
  std::vector<std::string> job_order;  // ids by creation, for dropping old finished jobs

  void log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  // ---- models and jobs ----

  // The model `name` names (its name, path, or A1111's "name [hash]" title); empty: the current one.
  ApiModel* find_model(const std::string& name, httplib::Response& res) {
    std::lock_guard lock(mutex);
    if (name.empty()) return &models[current_model];
    for (ApiModel& m : models)
      if (name == m.name || name == m.path || name.starts_with(m.name + " [")) return &m;
    std::vector<std::string> names;
    for (const auto& m : models) names.push_back(m.name);
    send_error(res, 400,
               fmt::format("model: this server has no model '{}' (its models: {})", name, fmt::join(names, ", ")),
               "model");
    return nullptr;
  }

  void remember(const std::shared_ptr<Job>& job) {
    std::lock_guard lock(mutex);
    jobs[job->id] = job;
    job_order.push_back(job->id);
    // Forget finished jobs past the count or the age kept, oldest first.
    size_t finished = 0;
    for (const std::string& id : job_order) finished += jobs[id]->seconds_since_final() >= 0;
    std::erase_if(job_order, [&](const std::string& id) {
      const double age = jobs[id]->seconds_since_final();
      if (age < 0 || (finished <= kFinishedJobsKept && age < kFinishedJobSeconds)) return false;
      --finished;
      jobs.erase(id);
      return true;
    });
  }

  std::shared_ptr<Job> find_job(const std::string& id, httplib::Response& res) {
    std::lock_guard lock(mutex);
    auto it = jobs.find(id);
    if (it == jobs.end()) {
      send_error(res, 404, fmt::format("no job '{}' (finished jobs are kept {} s)", id, kFinishedJobSeconds), "id");
      return nullptr;
    }
    return it->second;
  }

  // Queues the request on its model's worker; null after answering 503/429.
  std::shared_ptr<Job> submit(ApiModel& model, JobRequest request, httplib::Response& res) {
    if (draining) {
      res.set_header("Retry-After", "30");
      send_error(res, 503, "the server is shutting down", "", "server_error");
      return nullptr;
    }
    auto job = std::make_shared<Job>(new_job_id(), model.name, std::move(request));
    if (Status s = model.worker->submit(job); !s.ok()) {
      const bool full = s.code() == StatusCode::kResourceExhausted;
      res.set_header("Retry-After", std::to_string(int(std::ceil(std::max(1.0, model.worker->wait_estimate())))));
      send_error(res, full ? 429 : 503, s.message(), "", "server_error");
      return nullptr;
    }
    remember(job);
    log(fmt::format("{} queued on {}", job->id, model.name));
    return job;
  }

  // A synchronous endpoint's wait: the job's outputs, or false after answering its error.
  bool wait_outputs(const Job& job, httplib::Response& res) {
    // Every job ends: a shutdown cancels what its grace period leaves.
    while (!job.wait_final(milliseconds(1000))) continue;
    const JobSnapshot s = job.snapshot();
    if (s.state == JobState::kDone) return true;
    if (s.state == JobState::kCancelled) send_error(res, 409, "the job was cancelled", "", "cancelled");
    else if (s.error_code == StatusCode::kInternal) send_error(res, 500, s.error, "", "server_error");
    else send_error(res, 400, s.error);
    return false;
  }

  json job_json(const Job& job) const {
    const JobSnapshot s = job.snapshot();
    json j = {{"id", job.id},
              {"object", "job"},
              {"kind", job.request.kind == JobKind::kVideo ? "video" : "image"},
              {"model", job.model},
              {"status", job_state_name(s.state)},
              {"created", job.created},
              {"stage", s.stage},
              {"step", s.step},
              {"steps", s.steps},
              {"progress", s.steps ? double(s.step) / s.steps : 0.0},
              {"seconds", s.seconds},
              {"outputs", s.outputs}};
    if (s.state == JobState::kQueued)
      for (const auto& m : models)
        if (m.name == job.model) j["queue_position"] = m.worker->position(job);
    if (s.state == JobState::kFailed) j["error"] = {{"message", s.error}};
    return j;
  }

  // ---- routes ----

  void openai_images(const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!parse_body(req, res, body)) return;
    Parsed<JobRequest> parsed = parse_openai_images(body, options.limits);
    if (!parsed_or_400(parsed, res)) return;
    JobRequest& request = std::get<JobRequest>(parsed);
    ApiModel* model = find_model(request.model, res);
    if (!model) return;
    if (model->kind != JobKind::kImage)
      return send_error(res, 400, fmt::format("model: {} makes video; use POST /v1/jobs", model->name), "model");
    const bool url = request.response_format == "url";
    std::shared_ptr<Job> job = submit(*model, std::move(request), res);
    if (!job || !wait_outputs(*job, res)) return;
    json data = json::array();
    for (const JobOutput& o : job->outputs()) {
      const std::string b64 = base64_encode(o.bytes);
      data.push_back(url ? json{{"url", "data:image/png;base64," + b64}, {"seed", o.seed}}
                         : json{{"b64_json", b64}, {"seed", o.seed}});
    }
    send_json(res, {{"created", job->created}, {"data", data}, {"output_format", "png"}});
  }

  void a1111_generate(const httplib::Request& req, httplib::Response& res, bool img2img) {
    json body;
    if (!parse_body(req, res, body)) return;
    Parsed<JobRequest> parsed = parse_a1111(body, img2img, options.limits);
    if (!parsed_or_400(parsed, res)) return;
    ApiModel* model = find_model("", res);
    if (model->kind != JobKind::kImage)
      return send_error(res, 400, fmt::format("{} makes video; pick an image model in options", model->name));
    std::shared_ptr<Job> job = submit(*model, std::move(std::get<JobRequest>(parsed)), res);
    if (!job || !wait_outputs(*job, res)) return;
    json images = json::array(), seeds = json::array();
    for (const JobOutput& o : job->outputs()) images.push_back(base64_encode(o.bytes)), seeds.push_back(o.seed);
    const json info = {{"seed", seeds.empty() ? json(nullptr) : seeds[0]},
                       {"all_seeds", seeds},
                       {"sd_model_name", model->name},
                       {"job", job->id}};
    if (body.is_object()) body.erase("init_images");  // not echoed back: it may be megabytes
    send_json(res, {{"images", images}, {"parameters", body}, {"info", json_text(info)}});
  }

  void a1111_progress(httplib::Response& res) {
    std::shared_ptr<Job> running;
    size_t count = 0;
    for (const auto& m : models) {
      const WorkerFigures f = m.worker->figures();
      count += f.queued + (f.running ? 1 : 0);
    }
    for (const auto& m : models)
      if (auto r = m.worker->running(); !r.empty()) running = r[0];
    JobSnapshot s;
    if (running) s = running->snapshot();
    const double progress = running && s.steps ? double(s.step) / s.steps : 0.0;
    const double eta = s.step_seconds * std::max(0, s.steps - s.step);
    send_json(res, {{"progress", progress},
                    {"eta_relative", eta},
                    {"state",
                     {{"skipped", false},
                      {"interrupted", running && running->cancel_requested.load()},
                      {"job", running ? running->id : ""},
                      {"job_count", count},
                      {"job_timestamp", running ? std::to_string(running->created) : "0"},
                      {"job_no", 0},
                      {"sampling_step", s.step},
                      {"sampling_steps", s.steps}}},
                    {"current_image", nullptr},
                    {"textinfo", s.stage}});
  }

  void jobs_create(const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!parse_body(req, res, body)) return;
    Parsed<std::string> name = parse_model_field(body);
    if (!parsed_or_400(name, res)) return;
    ApiModel* model = find_model(std::get<std::string>(name), res);
    if (!model) return;
    Parsed<JobRequest> parsed = parse_job(body, model->kind, options.limits);
    if (!parsed_or_400(parsed, res)) return;
    std::shared_ptr<Job> job = submit(*model, std::move(std::get<JobRequest>(parsed)), res);
    if (job) send_json(res, job_json(*job), 202);
  }

  void jobs_content(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Job> job = find_job(req.matches[1], res);
    if (!job) return;
    const JobSnapshot s = job->snapshot();
    if (s.state != JobState::kDone)
      return send_error(res, 409, fmt::format("job {} is {}: no content", job->id, job_state_name(s.state)), "id");
    size_t index = 0;
    if (req.has_param("index")) {
      const std::string v = req.get_param_value("index");
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(v) >= s.outputs)
        return send_error(res, 400, fmt::format("index: must be from 0 to {}", s.outputs - 1), "index");
      index = std::stoul(v);
    }
    JobOutput o = job->output(index);
    res.set_content(reinterpret_cast<const char*>(o.bytes.data()), o.bytes.size(), o.content_type);
  }

  void jobs_cancel(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Job> job = find_job(req.matches[1], res);
    if (!job) return;
    bool cancelled = false;
    for (const auto& m : models)
      if (m.name == job->model) cancelled = m.worker->cancel(*job);
    if (!cancelled) return send_error(res, 409, fmt::format("job {} has already ended", job->id), "id");
    log(fmt::format("{} cancelled", job->id));
    send_json(res, job_json(*job));
  }

  // Server-sent events: each job event as `event: TYPE` + `data: JSON`, from
  // the first (so a late client sees the whole story) to the final one.
  void jobs_events(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Job> job = find_job(req.matches[1], res);
    if (!job) return;
    ++open_streams;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, seen = size_t(0)](size_t, httplib::DataSink& sink) mutable {
          const std::vector<JobEvent> events = job->events_after(seen, milliseconds(kSseHeartbeatMs));
          if (!sink.is_writable()) return false;  // the client has gone
          std::string text = events.empty() ? std::string(": keep-alive\n\n") : std::string();
          for (const JobEvent& e : events) text += fmt::format("event: {}\ndata: {}\n\n", e.type, json_text(e.data));
          seen += events.size();
          if (!sink.write(text.data(), text.size())) return false;
          if (!events.empty() &&
              (events.back().type == "done" || events.back().type == "failed" || events.back().type == "cancelled"))
            sink.done();
          return true;
        },
        [this](bool) { --open_streams; });
  }

  std::string metrics_text() const {
    std::string out;
    auto family = [&](const char* name, const char* type, const char* help) { out += metric_family(name, type, help); };
    std::vector<std::pair<std::string, WorkerFigures>> figures;
    for (const auto& m : models) figures.emplace_back(m.name, m.worker->figures());
    family("kiln_queue_length", "gauge", "Jobs waiting to run.");
    for (const auto& [name, f] : figures) out += fmt::format("kiln_queue_length{{model=\"{}\"}} {}\n", name, f.queued);
    family("kiln_jobs_running", "gauge", "Jobs running now.");
    for (const auto& [name, f] : figures)
      out += fmt::format("kiln_jobs_running{{model=\"{}\"}} {}\n", name, int(f.running));
    family("kiln_jobs_total", "counter", "Jobs ended, by how.");
    for (const auto& [name, f] : figures)
      for (const auto& [state, n] : {std::pair{"done", f.done}, {"failed", f.failed}, {"cancelled", f.cancelled}})
        out += fmt::format("kiln_jobs_total{{model=\"{}\",state=\"{}\"}} {}\n", name, state, n);
    family("kiln_step_seconds", "summary", "Time of a denoise step.");
    for (const auto& [name, f] : figures)
      out += fmt::format("kiln_step_seconds_sum{{model=\"{}\"}} {}\nkiln_step_seconds_count{{model=\"{}\"}} {}\n", name,
                         f.step_seconds, name, f.steps_timed);
    family("kiln_outputs_total", "counter", "Images and videos made.");
    for (const auto& [name, f] : figures)
      out += fmt::format("kiln_outputs_total{{model=\"{}\"}} {}\n", name, f.outputs);
    family("kiln_runs_total", "counter", "Generations run: a batch of requests counts once.");
    for (const auto& [name, f] : figures) out += fmt::format("kiln_runs_total{{model=\"{}\"}} {}\n", name, f.runs);
    family("kiln_images_per_second", "gauge", "Outputs made per second of running jobs.");
    for (const auto& [name, f] : figures)
      out += fmt::format("kiln_images_per_second{{model=\"{}\"}} {}\n", name,
                         f.busy_seconds > 0 ? double(f.outputs) / f.busy_seconds : 0.0);
    if (options.more_metrics) out += options.more_metrics();
    family("kiln_draining", "gauge", "1 while shutting down.");
    out += fmt::format("kiln_draining {}\n", int(draining.load()));
    return out;
  }

  json models_json() const {
    json data = json::array();
    for (const auto& m : models)
      data.push_back({{"id", m.name},
                      {"object", "model"},
                      {"owned_by", "kiln"},
                      {"kind", m.kind == JobKind::kVideo ? "video" : "image"}});
    return {{"object", "list"}, {"data", data}};
  }

  void routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method == "OPTIONS") {  // CORS preflight
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!options.api_key.empty() && req.path != "/" &&
          !constant_time_equal(req.get_header_value("Authorization"), "Bearer " + options.api_key)) {
        res.set_header("WWW-Authenticate", "Bearer");
        send_error(res, 401, "a valid 'Authorization: Bearer KEY' header is required", "", "authentication_error");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
      res.set_header("Access-Control-Allow-Origin", "*");
    });
    // httplib's own refusals (no route, a body over the limit, a malformed request) in the same envelope.
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty() || res.is_chunked_content_provider_) return;
      if (res.status == 413)
        send_error(res, 400, fmt::format("the body is over the limit of {} bytes", options.limits.max_body_bytes),
                   "body");
      else if (res.status == 404) send_error(res, 404, "no such endpoint (see /v1/models, /v1/jobs, /sdapi/v1/...)");
      else send_error(res, res.status, fmt::format("HTTP {}: the request could not be served", res.status));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
      std::string what = "unknown";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      send_error(res, 500, "internal error: " + what, "", "server_error");
    });

    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kWebPage, "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      json queues = json::object();
      for (const auto& m : models) queues[m.name] = m.worker->figures().queued;
      send_json(res, {{"status", draining ? "draining" : "ok"}, {"queues", queues}}, draining ? 503 : 200);
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { send_json(res, models_json()); });
    http.Post("/v1/images/generations",
              [this](const httplib::Request& req, httplib::Response& res) { openai_images(req, res); });

    http.Post("/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) { jobs_create(req, res); });
    http.Get(R"(/v1/jobs/([A-Za-z0-9-]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (auto job = find_job(req.matches[1], res)) send_json(res, job_json(*job));
    });
    http.Get(R"(/v1/jobs/([A-Za-z0-9-]+)/content)",
             [this](const httplib::Request& req, httplib::Response& res) { jobs_content(req, res); });
    http.Get(R"(/v1/jobs/([A-Za-z0-9-]+)/events)",
             [this](const httplib::Request& req, httplib::Response& res) { jobs_events(req, res); });
    http.Delete(R"(/v1/jobs/([A-Za-z0-9-]+))",
                [this](const httplib::Request& req, httplib::Response& res) { jobs_cancel(req, res); });

    http.Post("/sdapi/v1/txt2img",
              [this](const httplib::Request& req, httplib::Response& res) { a1111_generate(req, res, false); });
    http.Post("/sdapi/v1/img2img",
              [this](const httplib::Request& req, httplib::Response& res) { a1111_generate(req, res, true); });
    http.Get("/sdapi/v1/options", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(mutex);
      send_json(res, {{"sd_model_checkpoint", models[current_model].name}, {"samples_format", "png"}});
    });
    http.Post("/sdapi/v1/options", [this](const httplib::Request& req, httplib::Response& res) {
      json body;
      if (!parse_body(req, res, body)) return;
      if (!body.is_object()) return send_error(res, 400, "the body must be a JSON object", "body");
      if (body.contains("sd_model_checkpoint")) {
        if (!body["sd_model_checkpoint"].is_string())
          return send_error(res, 400, "sd_model_checkpoint: must be a string", "sd_model_checkpoint");
        ApiModel* model = find_model(body["sd_model_checkpoint"], res);
        if (!model) return;
        std::lock_guard lock(mutex);
        for (size_t i = 0; i < models.size(); ++i)
          if (&models[i] == model) current_model = i;
      }
      send_json(res, json::object());
    });
    http.Get("/sdapi/v1/sd-models", [this](const httplib::Request&, httplib::Response& res) {
      json list = json::array();
      for (const auto& m : models)
        if (m.kind == JobKind::kImage)
          list.push_back({{"title", m.name},
                          {"model_name", m.name},
                          {"hash", nullptr},
                          {"sha256", nullptr},
                          {"filename", m.path},
                          {"config", nullptr}});
      send_json(res, list);
    });
    http.Get("/sdapi/v1/samplers", [](const httplib::Request&, httplib::Response& res) {
      json list = json::array();
      for (const A1111Sampler& s : a1111_samplers())
        list.push_back({{"name", s.name}, {"aliases", {s.kiln}}, {"options", json::object()}});
      send_json(res, list);
    });
    http.Get("/sdapi/v1/schedulers", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, json::array({{{"name", "automatic"}, {"label", "Automatic"}},
                                  {{"name", "karras"}, {"label", "Karras"}}}));
    });
    for (const char* empty : {"/sdapi/v1/upscalers", "/sdapi/v1/latent-upscale-modes", "/sdapi/v1/sd-vae"})
      http.Get(empty, [](const httplib::Request&, httplib::Response& res) { send_json(res, json::array()); });
    http.Get("/sdapi/v1/progress", [this](const httplib::Request&, httplib::Response& res) { a1111_progress(res); });
    http.Post("/sdapi/v1/interrupt", [this](const httplib::Request&, httplib::Response& res) {
      for (const auto& m : models)
        for (const auto& job : m.worker->running()) m.worker->cancel(*job);
      send_json(res, json::object());
    });
  }

  // The drain: no new work, the queues run out (or are cancelled at the
  // deadline), the event streams end, then httplib stops.
  void drain() {
    log(fmt::format("shutting down: finishing queued work for up to {} s", options.grace_seconds));
    for (const auto& m : models) m.worker->close();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.grace_seconds);
    auto all_idle = [&] {
      return std::all_of(models.begin(), models.end(), [](const auto& m) { return m.worker->idle(); });
    };
    while (!all_idle() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(milliseconds(20));
    if (!all_idle()) {
      log("grace period over: cancelling what is left");
      for (const auto& m : models) m.worker->cancel_all();
    }
    for (const auto& m : models) m.worker->join();
    // The streams have their final events; give them a moment to send them.
    for (int i = 0; i < 100 && open_streams > 0; ++i) std::this_thread::sleep_for(milliseconds(20));
    while (!listen_returned) {
      http.stop();
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
};

HttpApi::HttpApi(std::vector<ApiModel> models, ApiOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.models = std::move(models);
  s.options = std::move(options);
  s.http.set_payload_max_length(s.options.limits.max_body_bytes);
  s.http.set_read_timeout(30, 0);
  s.http.set_write_timeout(30, 0);
  const size_t threads = s.options.threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.routes();
}

HttpApi::~HttpApi() {
  impl_->listen_returned = true;  // run() has returned by now, or never ran: nothing to stop
  shutdown();
  if (impl_->drainer.joinable()) impl_->drainer.join();
}

Status HttpApi::run(const std::string& host, int port, const std::function<void(int)>& on_listening) {
  Impl& s = *impl_;
  const int bound = port == 0 ? s.http.bind_to_any_port(host) : (s.http.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    s.listen_returned = true;
    return invalid_argument("cannot listen on {}:{} (in use, or not an address of this machine)", host, port);
  }
  if (on_listening) on_listening(bound);
  const bool clean = s.http.listen_after_bind();
  s.listen_returned = true;
  if (s.drainer.joinable()) s.drainer.join();
  if (!clean && !s.draining) return internal_error("the HTTP server stopped unexpectedly");
  return ok_status();
}

void HttpApi::shutdown() {
  bool expected = false;
  if (!impl_->draining.compare_exchange_strong(expected, true)) return;
  impl_->drainer = std::thread([impl = impl_.get()] { impl->drain(); });
}

}  // namespace kiln::serve
