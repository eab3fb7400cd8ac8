// kiln serve: the HTTP server (serve/server.h) with its flags, and the
// signals that stop it: SIGTERM or SIGINT drain and exit 0; a second one
// exits at once.
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/pass_flags.h"
#include "serve/server.h"

namespace kiln::cli {

namespace {

struct ServeFlags {
  std::vector<std::string> models;
  std::string host = "127.0.0.1";
  int port = 7860;
  size_t queue = 16;
  int batch = 1;
  std::string overlap = "off";
  double model_memory_mib = 0;
  std::string api_key;
  double grace = 30;
  std::string mode = "graph-loop";
  std::string variant;
  std::vector<std::string> loras;
  PassFlags pass_flags;
  serve::ServeLimits limits;
  bool quiet = false;
};

Status serve_command(const ServeFlags& f) {
  serve::ServeOptions options{.models = f.models,
                              .host = f.host,
                              .port = f.port,
                              .queue = f.queue,
                              .batch_images = f.batch,
                              .overlap_encoding = f.overlap == "on",
                              .model_memory_bytes = uintmax_t(f.model_memory_mib * 1048576.0),
                              .api_key = f.api_key,
                              .limits = f.limits,
                              .grace_seconds = f.grace};
  KILN_ASSIGN_OR_RETURN(options.pipeline.passes, pass_options(f.pass_flags));
  KILN_RETURN_IF_ERROR(parse_generate_mode(f.mode, options.pipeline.mode, options.pipeline.whole_loop));
  options.pipeline.variant = options.video.variant = f.variant;
  for (const std::string& lora : f.loras) {
    KILN_ASSIGN_OR_RETURN(LoraSpec spec, parse_lora_spec(lora));
    options.pipeline.loras.push_back(std::move(spec));
  }
  options.video.passes = options.pipeline.passes;
  options.video.mode = options.pipeline.mode;
  if (!f.quiet)
    options.log = options.pipeline.log =
        options.video.log = [](const std::string& line) { fmt::print(stderr, "kiln: {}\n", line); };
  // The signals go to one thread that waits for them; every thread made
  // from here on (the server's, the model's) inherits the block.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<serve::Server> server, serve::Server::open(options));
  std::thread([&server, stop_signals] {
    for (int count = 0;; ++count) {
      int signal = 0;
      if (sigwait(&stop_signals, &signal) != 0) continue;
      if (count > 0) std::_Exit(128 + signal);  // asked twice: no more waiting
      fmt::print(stderr, "kiln: {}: draining (again to stop at once)\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
      server->shutdown();
    }
  }).detach();
  return server->run([&](int port) {
    fmt::print("kiln: serving on http://{}:{}/ (Ctrl-C to stop)\n", f.host, port);
    std::fflush(stdout);
  });
}

}  // namespace

Handler add_serve_command(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve image (and video) generation over HTTP: OpenAI Images API, A1111 /sdapi/v1, kiln's job API "
      "with progress events, and a web page at /");
  cmd->add_option("-m,--model", f->models,
                  "a model to load (give it again for more): any model kiln generate takes; the first is the "
                  "default; none: kiln's own shapes model");
  cmd->add_option("--host", f->host, "address to listen on (anything but loopback needs --api-key)")
      ->default_val("127.0.0.1");
  cmd->add_option("--port", f->port, "port to listen on; 0: any free one (printed)")
      ->default_val(7860)
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--queue", f->queue, "jobs that may wait per model; more answer 429 with Retry-After")
      ->default_val(16)
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--batch", f->batch,
                  "queued requests of one shape (size, steps, scheduler, guidance) run as one batch of up to this "
                  "many images; faster per image, but a batched image may differ from the same request run alone "
                  "in the last bit of a few pixels (1: every request alone, the default)")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd->add_option("--overlap", f->overlap,
                  "on | off: encode each finished run's PNGs on a second thread while the next run starts")
      ->default_val("off")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--model-memory", f->model_memory_mib,
                  "MiB the loaded models' files may take; past it the least recently used idle model is unloaded and "
                  "loaded again by its next request (default 0: no bound, every model stays loaded)")
      ->default_val(0)
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--api-key", f->api_key, "require 'Authorization: Bearer KEY' on every request but the page at /");
  cmd->add_option("--grace", f->grace,
                  "on SIGTERM/SIGINT: seconds queued and running jobs may finish before "
                  "they are cancelled")
      ->default_val(30)
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--max-pixels", f->limits.max_pixels, "largest width x height a request may ask for")
      ->default_val(f->limits.max_pixels)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-steps", f->limits.max_steps, "most denoising steps a request may ask for")
      ->default_val(f->limits.max_steps)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-images", f->limits.max_images, "most images one request may ask for")
      ->default_val(f->limits.max_images)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--mode", f->mode, "eager | graph | graph-loop | auto, as for kiln generate")
      ->default_val("graph-loop");
  cmd->add_option("--variant", f->variant, "a diffusers folder's weights variant, e.g. fp16");
  cmd->add_option("--lora", f->loras,
                  "FILE[:WEIGHT]: a LoRA merged into every image checkpoint served, as for kiln generate; give it "
                  "again for more")
      ->allow_extra_args(false);
  add_pass_flags(cmd, f->pass_flags);
  cmd->add_flag("-q,--quiet", f->quiet, "print nothing but the address and errors");
  return [f] { return serve_command(*f); };
}

}  // namespace kiln::cli
