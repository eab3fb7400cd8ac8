// The HTTP side of kiln serve: every route, the jobs they queue and their
// events, the API key, /metrics and the drain, over models that each have a
// worker (model_worker.h). It knows nothing of how a model runs (server.cc
// loads the models and makes their workers), so a fuzzer can put stand-in
// workers behind it.
//
//   HttpApi api({{.name = "shapes", .path = path, .worker = &worker}}, {.limits = limits});
//   std::thread([&] { wait_for_sigterm(); api.shutdown(); }).detach();
//   KILN_RETURN_IF_ERROR(api.run("127.0.0.1", 7860, [](int port) { ... }));
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/api_request.h"
#include "serve/model_worker.h"

namespace kiln::serve {

struct ApiModel {
  std::string name, path;
  JobKind kind = JobKind::kImage;
  ModelWorker* worker = nullptr;  // not owned; outlives the HttpApi
};

struct ApiOptions {
  std::string api_key;  // empty: no Authorization needed
  ServeLimits limits;
  double grace_seconds = 30;  // the drain: how long queued and running work may finish
  size_t threads = 8;         // HTTP threads: each waiting request and open event stream holds one
  std::function<void(const std::string&)> log;
  std::function<std::string()> more_metrics;  // appended to /metrics (the model cache's figures)
};

// A Prometheus metric family's "# HELP" and "# TYPE" lines.
std::string metric_family(const char* name, const char* type, const char* help);

class HttpApi {
 public:
  HttpApi(std::vector<ApiModel> models, ApiOptions options);
  ~HttpApi();  // waits for a drain under way

  // Binds (port 0: any free one), tells `on_listening` the port and serves
  // until a drain has ended; an error when the address cannot be bound.
  Status run(const std::string& host, int port, const std::function<void(int)>& on_listening);
  // Starts the drain: new work gets 503, the queues finish within the grace
  // period or are cancelled, the event streams end, run() returns. Any
  // thread, any number of times.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve
