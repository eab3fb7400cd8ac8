// kiln serve under load, against sequential `kiln generate` runs, on the
// same model and settings, in one run:
//
//   build/bench/kiln_bench_serve [--model PATH] [--requests 200] [--clients 4] [--steps 20]
//                                [--sequential 20] [--batch 4] [--rss-requests 1000] [-- SERVE_FLAGS...]
//
// 1. `kiln generate` run --sequential times, one image each (a process per
//    image, as a script without a server does): images/s.
// 2. `kiln serve` with SERVE_FLAGS, --clients threads sending --requests
//    POST /v1/images/generations in all (n=1, distinct seeds): images/s and
//    the p50/p99 latency of a request; with every request alone, with
//    `--batch` (queued requests of one shape as one run) and with
//    `--overlap on` (PNG encoding beside the next run).
// 3. The first server's resident memory after its first request and every
//    250 requests up to --rss-requests: what grows beyond its plan and
//    model caches.
// Loopback only; every count is fixed, so the run is bounded.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve_process.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double rss_mib(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

struct Load {
  int requests = 200, clients = 4, steps = 20, sequential = 20, batch = 4, rss_requests = 1000;
  std::string model;
  std::vector<std::string> serve_flags;
};

std::string model_name_of_path(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p.substr(p.find_last_of('/') + 1);
}

json request_body(const Load& l, int seed) {
  json body = {{"prompt", "a red circle on a blue background"}, {"seed", seed}, {"steps", l.steps}};
  if (!l.model.empty()) body["model"] = model_name_of_path(l.model);
  return body;
}

// `requests` requests from `clients` threads; the latency of each, and the wall time of all.
std::pair<std::vector<double>, double> drive(const kiln::serve::ServeProcess& server, const Load& l, int requests,
                                             int clients, int first_seed) {
  std::vector<double> latency(size_t(requests), 0);
  std::atomic<int> next{0}, failed{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      httplib::Client client = server.client();
      for (int i; (i = next++) < requests;) {
        const auto sent = Clock::now();
        auto res = client.Post("/v1/images/generations", request_body(l, first_seed + i).dump(), "application/json");
        latency[size_t(i)] = seconds_since(sent);
        if (!res || res->status != 200) ++failed;
      }
    });
  for (auto& t : threads) t.join();
  const double wall = seconds_since(start);
  if (failed) fmt::print(stderr, "kiln_bench_serve: {} of {} requests failed\n", failed.load(), requests);
  return {latency, wall};
}

}  // namespace

int main(int argc, char** argv) {
  Load l;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--requests") l.requests = std::stoi(value());
    else if (a == "--clients") l.clients = std::stoi(value());
    else if (a == "--steps") l.steps = std::stoi(value());
    else if (a == "--sequential") l.sequential = std::stoi(value());
    else if (a == "--rss-requests") l.rss_requests = std::stoi(value());
    else if (a == "--batch") l.batch = std::stoi(value());
    else if (a == "--model") l.model = value();
    else if (a == "--") l.serve_flags.assign(argv + i + 1, argv + argc), i = argc;
    else {
      fmt::print(stderr, "kiln_bench_serve: unknown flag '{}' (see the comment at the top of bench/serve_load.cc)\n",
                 a);
      return 2;
    }
  }
  if (l.requests < 1 || l.clients < 1 || l.steps < 1 || l.sequential < 0 || l.rss_requests < 0 || l.batch < 1) {
    fmt::print(stderr, "kiln_bench_serve: the counts must be positive\n");
    return 2;
  }
  const std::string model_flag = l.model.empty() ? "" : " -m " + l.model;

  // 1. A process per image.
  double sequential_rate = 0;
  if (l.sequential > 0) {
    const auto start = Clock::now();
    for (int i = 0; i < l.sequential; ++i) {
      const std::string command = fmt::format(
          "{} generate -q{} -p 'a red circle on a blue background' --seed {} "
          "--steps {} -o /tmp/kiln-bench-serve.png",
          KILN_BINARY, model_flag, i, l.steps);
      if (std::system(command.c_str()) != 0) {
        fmt::print(stderr, "kiln_bench_serve: failed: {}\n", command);
        return 1;
      }
    }
    sequential_rate = l.sequential / seconds_since(start);
    fmt::print("sequential kiln generate: {} images, {:.2f} images/s ({:.3f} s each)\n", l.sequential, sequential_rate,
               1 / sequential_rate);
  }

  // 2. The server under load: each request alone, batched, and with encoding beside the next run.
  double alone_rate = 0;
  const std::vector<std::vector<std::string>> configurations = {
      {"--batch", "1"}, {"--batch", std::to_string(l.batch)}, {"--batch", "1", "--overlap", "on"}};
  for (const std::vector<std::string>& configuration : configurations) {
    const bool alone = &configuration == &configurations[0];
    std::vector<std::string> flags = l.serve_flags;
    if (!l.model.empty()) flags.insert(flags.begin(), {"--model", l.model});
    flags.insert(flags.end(), {"--queue", std::to_string(std::max(16, 2 * l.clients))});
    flags.insert(flags.end(), configuration.begin(), configuration.end());
    kiln::serve::ServeProcess server(flags);
    if (server.port() <= 0) {
      fmt::print(stderr, "kiln_bench_serve: kiln serve did not start\n");
      return 1;
    }
    drive(server, l, 1, 1, 1000000);  // compiles the plan
    const double rss_first = rss_mib(server.pid());
    int done = 1;
    if (alone) {
      const int n = std::min(l.requests, 20);
      const auto [one_latency, one_wall] = drive(server, l, n, 1, 0);
      done += n;
      fmt::print("kiln serve, 1 client:             {} requests, {:.2f} images/s, p50 {:.3f} s\n", n, n / one_wall,
                 percentile(one_latency, 0.5));
    }
    const auto [latency, wall] = drive(server, l, l.requests, l.clients, 0);
    done += l.requests;
    const double rate = l.requests / wall;
    fmt::print("kiln serve {}, {} clients: {} requests, {:.2f} images/s, p50 {:.3f} s, p99 {:.3f} s\n",
               fmt::join(configuration, " "), l.clients, l.requests, rate, percentile(latency, 0.5),
               percentile(latency, 0.99));
    if (sequential_rate > 0)
      fmt::print("  throughput against sequential kiln generate: {:.2f}x\n", rate / sequential_rate);
    if (!alone) {
      fmt::print("  against every request alone: {:.2f}x the throughput\n", rate / alone_rate);
      continue;
    }
    alone_rate = rate;
    // 3. Memory over many requests.
    std::string curve = fmt::format("{:.1f} MiB after 1", rss_first);
    for (int mark = 250; mark <= l.rss_requests; mark += 250) {
      if (mark > done) drive(server, l, mark - done, l.clients, 100000 + done), done = mark;
      curve += fmt::format(", {:.1f} after {}", rss_mib(server.pid()), done);
    }
    fmt::print("server RSS: {}\n", curve);
  }
  return 0;
}
