// `kiln serve`: the generation library (app/) behind HTTP, in the shapes
// the clients people use already speak: OpenAI's Images API (OpenAI SDKs,
// Open WebUI), an A1111 /sdapi/v1 subset (SillyTavern, Open WebUI), kiln's
// own job API with server-sent progress events (video too), /health,
// /metrics and a web page at /. Facts about those APIs and their clients:
// docs/serve.md.
//
//   KILN_ASSIGN_OR_RETURN(auto server, Server::open({.models = {"shapes"}, .port = 7860}));
//   std::thread([&] { wait_for_sigterm(); server->shutdown(); }).detach();
//   KILN_RETURN_IF_ERROR(server->run([](int port) { fmt::print("listening on {}\n", port); }));
//
// This file loads the models (into a cache bounded by model_memory_bytes)
// and gives each one worker thread and a bounded queue (model_worker.h);
// the routes, jobs and drain are the HTTP side's (http_api.h). HTTP threads
// only parse, wait and encode. shutdown() answers new work with 503, lets
// the queues finish for the grace period, cancels what is left, ends the
// event streams and returns run().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/generator.h"
#include "app/video_generator.h"
#include "serve/api_request.h"

namespace kiln::serve {

struct ServeOptions {
  std::vector<std::string> models;  // paths; empty: kiln's default model
  std::string host = "127.0.0.1";
  int port = 7860;                // 0: any free port (run() reports it)
  size_t queue = 16;              // jobs waiting per model
  int batch_images = 1;           // queued requests of one shape run together up to this many images (1: each alone)
  bool overlap_encoding = false;  // PNG encoding on a second thread beside the next run
  // The loaded models' files may take this many bytes (0: no bound): past
  // it, the least recently used idle model is unloaded, and loaded again by
  // its next request.
  uintmax_t model_memory_bytes = 0;
  std::string api_key;  // required when host is not a loopback address
  ServeLimits limits;
  double grace_seconds = 30;                    // shutdown: how long queued and running work may finish
  PipelineOptions pipeline;                     // image models
  VideoPipelineOptions video;                   // video models
  std::function<void(const std::string&)> log;  // a line per request and decision
};

class Server {
 public:
  // Loads every model (the errors are the CLI's: a bad path is exit 2).
  static Result<std::unique_ptr<Server>> open(const ServeOptions& options);
  ~Server();

  // Binds and serves until shutdown() has drained; `on_listening` hears the
  // port once bound. An error when the address cannot be bound.
  Status run(const std::function<void(int)>& on_listening);
  // Starts the drain (any thread, any number of times); run() returns when done.
  void shutdown();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `host` names this machine only (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

}  // namespace kiln::serve
