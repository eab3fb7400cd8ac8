// A real `kiln serve` on a loopback port with kiln's default model, driven
// over HTTP: the OpenAI and A1111 endpoints' PNGs against `kiln generate`'s
// pixels, the job API's events in order, cancel within a step, a full queue,
// malformed requests, the API key, and SIGTERM's drain.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "pipeline/jpeg.h"
#include "pipeline/png.h"
#include "serve/base64.h"
#include "serve_process.h"

namespace kiln::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

RgbImage png_pixels(const std::string& bytes) {
  auto image = decode_png(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "response", 4096);
  EXPECT_TRUE(image.ok()) << image.status().message();
  return image.ok() ? *image : RgbImage{};
}

RgbImage b64_pixels(const json& text) {
  auto bytes = base64_decode(text.get<std::string>(), size_t(1) << 26);
  EXPECT_TRUE(bytes.ok());
  return png_pixels(std::string(bytes->begin(), bytes->end()));
}

// `kiln generate` with the same settings: what the server's pixels must equal.
RgbImage generate_pixels(const std::string& args) {
  const fs::path out = fs::temp_directory_path() / fmt::format("kiln-serve-test-{}.png", getpid());
  const std::string command = fmt::format("{} generate -q {} -o {}", KILN_BINARY, args, out.string());
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  auto image = read_png(out.string(), 4096);
  fs::remove(out);
  EXPECT_TRUE(image.ok());
  return image.ok() ? *image : RgbImage{};
}

void expect_same_pixels(const RgbImage& a, const RgbImage& b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  EXPECT_TRUE(a.rgb == b.rgb) << "the pixels differ";
  EXPECT_FALSE(a.rgb.empty());
}

json post_json(httplib::Client& c, const std::string& path, const json& body, int expected_status) {
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) return json();
  EXPECT_EQ(res->status, expected_status) << path << " " << res->body.substr(0, 300);
  return json::parse(res->body, nullptr, false);
}

// The job's server-sent events, as (type, data), read to the end of the stream.
std::vector<std::pair<std::string, json>> read_events(
    httplib::Client& c, const std::string& id, const std::function<void(const std::string&, const json&)>& seen = {}) {
  std::vector<std::pair<std::string, json>> events;
  std::string buffer;
  auto res = c.Get(("/v1/jobs/" + id + "/events").c_str(), [&](const char* data, size_t size) {
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string block = buffer.substr(0, end);
      std::smatch m;
      if (!std::regex_search(block, m, std::regex("event: (\\w+)\ndata: (.*)"))) continue;
      events.emplace_back(m[1], json::parse(m[2].str()));
      if (seen) seen(events.back().first, events.back().second);
    }
    return true;
  });
  EXPECT_TRUE(res);
  if (res) EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  return events;
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServeProcess({"--queue", "4"}); }
  static void TearDownTestSuite() { delete server_; }
  static ServeProcess* server_;
};
ServeProcess* Serve::server_ = nullptr;

TEST_F(Serve, OpenAiImagesEqualKilnGenerate) {
  ASSERT_GT(server_->port(), 0);
  httplib::Client c = server_->client();
  const json r = post_json(c, "/v1/images/generations",
                           {{"prompt", "a red circle on a blue background"},
                            {"n", 2},
                            {"seed", 11},
                            {"steps", 6},
                            {"model", "shapes"},
                            {"response_format", "b64_json"}},
                           200);
  ASSERT_EQ(r["data"].size(), 2u);
  const RgbImage expected =
      generate_pixels("--prompt 'a red circle on a blue background' --batch 2 --seed 11 --steps 6 --grid 2");
  // The grid puts the two side by side, two grey columns between them.
  const RgbImage first = b64_pixels(r["data"][0]["b64_json"]), second = b64_pixels(r["data"][1]["b64_json"]);
  ASSERT_EQ(expected.width, 2 * first.width + 2);
  for (int y = 0; y < first.height; ++y) {
    const uint8_t* row = expected.rgb.data() + size_t(y) * expected.width * 3;
    ASSERT_TRUE(std::equal(row, row + first.width * 3, first.rgb.data() + size_t(y) * first.width * 3)) << y;
    ASSERT_TRUE(std::equal(row + (first.width + 2) * 3, row + expected.width * 3,
                           second.rgb.data() + size_t(y) * first.width * 3))
        << y;
  }
  EXPECT_EQ(r["data"][0]["seed"], 11);
  // url: the same PNG as a data: URL.
  const json u = post_json(
      c, "/v1/images/generations",
      {{"prompt", "a red circle on a blue background"}, {"seed", 11}, {"steps", 6}, {"response_format", "url"}}, 200);
  const std::string url = u["data"][0]["url"];
  ASSERT_TRUE(url.starts_with("data:image/png;base64,"));
  expect_same_pixels(b64_pixels(url), first);
  const json models = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "shapes");
}

TEST_F(Serve, A1111EqualsKilnGenerate) {
  httplib::Client c = server_->client();
  const json r = post_json(c, "/sdapi/v1/txt2img",
                           {{"prompt", "two green squares"},
                            {"negative_prompt", ""},
                            {"steps", 5},
                            {"cfg_scale", 7.5},
                            {"width", 64},
                            {"height", 64},
                            {"seed", 3},
                            {"sampler_name", "DDIM"},
                            {"batch_size", 1},
                            {"n_iter", 1},
                            {"enable_hr", false},
                            {"save_images", false},
                            {"alwayson_scripts", json::object()}},
                           200);
  ASSERT_EQ(r["images"].size(), 1u);
  expect_same_pixels(
      b64_pixels(r["images"][0]),
      generate_pixels("--prompt 'two green squares' --steps 5 --seed 3 --scheduler ddim --width 64 --height 64"));
  EXPECT_EQ(json::parse(r["info"].get<std::string>())["seed"], 3);
  EXPECT_EQ(r["parameters"]["sampler_name"], "DDIM");
  // img2img from that picture, as kiln generate --init-image does it.
  const json i = post_json(c, "/sdapi/v1/img2img",
                           {{"prompt", "a red circle"},
                            {"steps", 10},
                            {"seed", 5},
                            {"denoising_strength", 0.5},
                            {"cfg_scale", 7.5},
                            {"init_images", {r["images"][0]}}},
                           200);
  const fs::path init = fs::temp_directory_path() / fmt::format("kiln-serve-init-{}.png", getpid());
  const RgbImage first = b64_pixels(r["images"][0]);
  ASSERT_TRUE(write_png(init.string(), first.rgb.data(), first.width, first.height, {}).ok());
  expect_same_pixels(b64_pixels(i["images"][0]),
                     generate_pixels(fmt::format(
                         "--prompt 'a red circle' --steps 10 --seed 5 --strength 0.5 --scheduler euler --init-image {}",
                         init.string())));

  // img2img from a JPEG upload: the server's decoding of it, as a PNG, is kiln generate's init image.
  std::ifstream jpeg_file(KILN_SOURCE_DIR "/tests/data/serve/squares.jpg", std::ios::binary);
  const std::string jpeg((std::istreambuf_iterator<char>(jpeg_file)), std::istreambuf_iterator<char>());
  const uint8_t* jpeg_bytes = reinterpret_cast<const uint8_t*>(jpeg.data());
  const json j =
      post_json(c, "/sdapi/v1/img2img",
                {{"prompt", "a red circle"},
                 {"steps", 10},
                 {"seed", 5},
                 {"denoising_strength", 0.5},
                 {"cfg_scale", 7.5},
                 {"init_images", {"data:image/jpeg;base64," + base64_encode(std::span(jpeg_bytes, jpeg.size()))}}},
                200);
  const RgbImage squares = *decode_jpeg(jpeg_bytes, jpeg.size(), "squares.jpg", 4096);
  ASSERT_TRUE(write_png(init.string(), squares.rgb.data(), squares.width, squares.height, {}).ok());
  expect_same_pixels(b64_pixels(j["images"][0]),
                     generate_pixels(fmt::format("--prompt 'a red circle' --steps 10 --seed 5 --strength 0.5 "
                                                 "--scheduler euler --init-image {}",
                                                 init.string())));
  fs::remove(init);

  const json options = json::parse(c.Get("/sdapi/v1/options")->body);
  EXPECT_EQ(options["sd_model_checkpoint"], "shapes");
  post_json(c, "/sdapi/v1/options", {{"sd_model_checkpoint", "shapes"}, {"CLIP_stop_at_last_layers", 1}}, 200);
  post_json(c, "/sdapi/v1/options", {{"sd_model_checkpoint", "no-such-model"}}, 400);
  EXPECT_EQ(json::parse(c.Get("/sdapi/v1/sd-models")->body)[0]["title"], "shapes");
  EXPECT_EQ(json::parse(c.Get("/sdapi/v1/samplers")->body)[0]["name"], "Euler");
  EXPECT_TRUE(json::parse(c.Get("/sdapi/v1/schedulers")->body).is_array());
  EXPECT_TRUE(json::parse(c.Get("/sdapi/v1/upscalers")->body).is_array());
  const json progress = json::parse(c.Get("/sdapi/v1/progress")->body);
  EXPECT_EQ(progress["state"]["job_count"], 0);
  EXPECT_EQ(c.Post("/sdapi/v1/interrupt", "", "application/json")->status, 200);
}

TEST_F(Serve, JobStreamsEveryEventInOrder) {
  httplib::Client c = server_->client();
  const json job = post_json(c, "/v1/jobs",
                             {{"prompt", "a small yellow triangle at the top left"}, {"steps", 7}, {"seed", 21}}, 202);
  // Queued when submitted; the worker may have taken it by the time the answer is written.
  ASSERT_TRUE(job["status"] == "queued" || job["status"] == "running" || job["status"] == "done") << job.dump();
  const std::string id = job["id"];
  const auto events = read_events(c, id);
  std::vector<std::string> types;
  for (const auto& [type, data] : events) types.push_back(type);
  std::vector<std::string> expected = {"queued", "started"};
  for (int i = 1; i <= 7; ++i) expected.push_back("step");
  expected.insert(expected.end(), {"decoding", "done"});
  ASSERT_EQ(types, expected);
  for (int i = 1; i <= 7; ++i) {
    EXPECT_EQ(events[size_t(i) + 1].second["step"], i);
    EXPECT_EQ(events[size_t(i) + 1].second["steps"], 7);
  }
  const json status = json::parse(c.Get(("/v1/jobs/" + id).c_str())->body);
  EXPECT_EQ(status["status"], "done");
  auto content = c.Get(("/v1/jobs/" + id + "/content").c_str());
  ASSERT_EQ(content->status, 200);
  EXPECT_EQ(content->get_header_value("Content-Type"), "image/png");
  expect_same_pixels(png_pixels(content->body),
                     generate_pixels("--prompt 'a small yellow triangle at the top left' --steps 7 --seed 21"));
  EXPECT_EQ(c.Get(("/v1/jobs/" + id + "/content?index=1").c_str())->status, 400);
  EXPECT_EQ(c.Delete(("/v1/jobs/" + id).c_str())->status, 409);  // already done
  EXPECT_EQ(c.Get("/v1/jobs/job-0000000000000000")->status, 404);
}

TEST_F(Serve, CancelStopsAJobWithinOneStep) {
  httplib::Client c = server_->client(), canceller = server_->client();
  const json job = post_json(c, "/v1/jobs", {{"prompt", "a red circle"}, {"steps", 150}}, 202);
  const std::string id = job["id"];
  int step_at_cancel = -1;
  const auto events = read_events(c, id, [&](const std::string& type, const json& data) {
    if (type == "step" && data["step"] == 3) {
      auto res = canceller.Delete(("/v1/jobs/" + id).c_str());
      ASSERT_EQ(res->status, 200);
      step_at_cancel = json::parse(res->body)["step"];
    }
  });
  ASSERT_GE(step_at_cancel, 3);
  ASSERT_EQ(events.back().first, "cancelled");
  int last_step = 0;
  for (const auto& [type, data] : events)
    if (type == "step") last_step = data["step"];
  EXPECT_LE(last_step, step_at_cancel + 1);
  EXPECT_EQ(json::parse(c.Get(("/v1/jobs/" + id).c_str())->body)["status"], "cancelled");
  EXPECT_EQ(c.Get(("/v1/jobs/" + id + "/content").c_str())->status, 409);
}

TEST_F(Serve, MalformedRequestsGet400AndTheServerKeepsServing) {
  httplib::Client c = server_->client();
  const std::pair<std::string, std::string> cases[] = {
      {"/v1/images/generations", "{\"prompt\": "},
      {"/v1/images/generations", "[1, 2, 3]"},
      {"/v1/images/generations", "{\"prompt\": 42}"},
      {"/v1/images/generations", "{\"prompt\": \"x\", \"n\": \"two\"}"},
      {"/v1/images/generations", "{\"prompt\": \"x\", \"size\": \"100000x100000\"}"},
      {"/v1/images/generations", "{\"prompt\": \"x\", \"steps\": -5}"},
      {"/v1/images/generations", "{\"prompt\": \"x\", \"model\": \"nope\"}"},
      {"/v1/images/generations", "{\"prompt\": \"x\", \"scheduler\": \"nope\"}"},
      {"/sdapi/v1/txt2img", "{\"prompt\": \"x\", \"width\": 1e9}"},
      {"/sdapi/v1/img2img", "{\"prompt\": \"x\", \"init_images\": [\"%%%not base64\"]}"},
      {"/sdapi/v1/img2img", "{\"prompt\": \"x\", \"init_images\": [\"abcde\u00e9\"]}"},  // found by serve_http
      {"/v1/jobs", "{\"prompt\": \"x\", \"image\": \"aGVsbG8=\"}"},
      {"/v1/jobs", std::string(40u << 20, ' ')},  // over the 32 MiB body limit
  };
  for (const auto& [path, body] : cases) {
    auto res = c.Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(res) << path << " " << body.substr(0, 80);
    EXPECT_EQ(res->status, 400) << path << " " << body.substr(0, 80) << " -> " << res->body;
    const json error = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(error.contains("error") && error["error"]["message"].is_string()) << res->body;
  }
  EXPECT_EQ(c.Get("/no/such/endpoint")->status, 404);
  EXPECT_EQ(c.Get("/health")->status, 200);
  post_json(c, "/v1/images/generations", {{"prompt", "a red circle"}, {"steps", 2}}, 200);
}

// The handlers (not only the parsers, which the fuzzer covers) on mangled
// requests: valid bodies with bytes flipped, cut short or fields swapped for
// other types, odd headers and methods, from a fixed seed. Each gets an
// answer in the error envelope or a result; the server never stops serving.
TEST_F(Serve, MangledRequestsNeverBreakTheServer) {
  httplib::Client c = server_->client();
  c.set_read_timeout(30, 0);
  std::mt19937 random(1234);
  const std::vector<std::pair<std::string, json>> valid = {
      {"/v1/images/generations", {{"prompt", "a red circle"}, {"n", 1}, {"size", "64x64"}, {"steps", 2}, {"seed", 1}}},
      {"/sdapi/v1/txt2img",
       {{"prompt", "a red circle"}, {"steps", 2}, {"width", 64}, {"height", 64}, {"sampler_name", "Euler"}}},
      {"/sdapi/v1/img2img",
       {{"prompt", "x"},
        {"steps", 2},
        {"init_images",
         {"iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAAABJRU5ErkJggg=="}}}},
      {"/v1/jobs", {{"prompt", "a red circle"}, {"steps", 2}, {"width", 64}, {"height", 64}}},
      {"/sdapi/v1/options", {{"sd_model_checkpoint", "shapes"}}},
  };
  const std::vector<json> odd_values = {nullptr,
                                        true,
                                        -1,
                                        0,
                                        1e308,
                                        -1e308,
                                        18446744073709551615ull,
                                        "",
                                        "64x64",
                                        json::array(),
                                        json::object(),
                                        std::string(5000, 'x')};
  int answered = 0;
  for (int round = 0; round < 150; ++round) {
    const auto& [path, body] = valid[random() % valid.size()];
    std::string text;
    switch (random() % 4) {
      case 0: {  // a field replaced by a value of another type
        json mangled = body;
        auto it = std::next(mangled.begin(), std::ptrdiff_t(random() % mangled.size()));
        *it = odd_values[random() % odd_values.size()];
        text = mangled.dump();
        break;
      }
      case 1:  // cut short
        text = body.dump().substr(0, random() % body.dump().size());
        break;
      case 2: {  // bytes flipped
        text = body.dump();
        for (int k = 0; k < 3; ++k) text[random() % text.size()] = char(random() % 256);
        break;
      }
      default:  // not JSON at all
        text = std::string(random() % 64, char(random() % 256));
    }
    const httplib::Headers headers = {{"X-Junk", std::string(random() % 100, 'h')},
                                      {"Authorization", "Bearer nothing"}};
    auto res = random() % 5 == 0
                   ? c.Put(path.c_str(), headers, text, "application/json")
                   : c.Post(path.c_str(), headers, text, random() % 2 ? "application/json" : "text/plain");
    ASSERT_TRUE(res) << "no answer to " << path << " " << text.substr(0, 200);
    if (res->status == 200 || res->status == 202) continue;
    ++answered;
    ASSERT_TRUE(res->status == 400 || res->status == 404 || res->status == 405) << res->status << " " << res->body;
    const json error = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(error.contains("error")) << path << " " << text.substr(0, 200) << " -> " << res->body;
  }
  EXPECT_GT(answered, 100);  // most mangled requests are refused
  EXPECT_EQ(c.Get("/health")->status, 200);
  post_json(c, "/v1/images/generations", {{"prompt", "a red circle"}, {"steps", 2}}, 200);
}

TEST_F(Serve, TheWebPageIsServed) {
  httplib::Client c = server_->client();
  auto res = c.Get("/");
  ASSERT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("/v1/jobs"), std::string::npos);
  auto metrics = c.Get("/metrics");
  EXPECT_NE(metrics->body.find("kiln_queue_length{model=\"shapes\"}"), std::string::npos);
}

TEST(ServeAlone, AFullQueueAnswers429) {
  ServeProcess server({"--queue", "1"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client();
  const std::string running = post_json(c, "/v1/jobs", {{"prompt", "a red circle"}, {"steps", 150}}, 202)["id"];
  while (json::parse(c.Get(("/v1/jobs/" + running).c_str())->body)["status"] != "running")
    std::this_thread::sleep_for(5ms);
  const std::string waiting = post_json(c, "/v1/jobs", {{"prompt", "a red circle"}, {"steps", 150}}, 202)["id"];
  auto full = c.Post("/v1/jobs", json{{"prompt", "a red circle"}}.dump(), "application/json");
  ASSERT_EQ(full->status, 429);
  EXPECT_FALSE(full->get_header_value("Retry-After").empty());
  EXPECT_EQ(c.Post("/v1/images/generations", json{{"prompt", "x"}}.dump(), "application/json")->status, 429);
  EXPECT_EQ(json::parse(c.Get(("/v1/jobs/" + waiting).c_str())->body)["queue_position"], 1);
  EXPECT_EQ(c.Delete(("/v1/jobs/" + waiting).c_str())->status, 200);
  EXPECT_EQ(c.Delete(("/v1/jobs/" + running).c_str())->status, 200);
}

TEST(ServeAlone, QueuedRequestsOfOneShapeRunAsOneBatch) {
  ServeProcess server({"--batch", "4", "--queue", "8"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client();
  // One long job holds the worker while three of one shape queue up behind it.
  const std::string blocker = post_json(c, "/v1/jobs", {{"prompt", "a red circle"}, {"steps", 150}}, 202)["id"];
  while (json::parse(c.Get(("/v1/jobs/" + blocker).c_str())->body)["status"] != "running")
    std::this_thread::sleep_for(5ms);
  const std::vector<std::string> prompts = {"a red circle", "two green squares", "a blue triangle on the left"};
  std::vector<std::string> ids;
  for (size_t k = 0; k < prompts.size(); ++k)
    ids.push_back(post_json(c, "/v1/jobs", {{"prompt", prompts[k]}, {"steps", 6}, {"seed", 40 + k}}, 202)["id"]);
  for (const std::string& id : ids) read_events(c, id);
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_NE(metrics.find("kiln_runs_total{model=\"shapes\"} 2"), std::string::npos)
      << metrics;  // the blocker, then one batch
  // Each image is its lone run's, up to rounding in the last bit.
  for (size_t k = 0; k < prompts.size(); ++k) {
    const RgbImage batched = png_pixels(c.Get(("/v1/jobs/" + ids[k] + "/content").c_str())->body);
    const RgbImage alone = generate_pixels(fmt::format("--prompt '{}' --steps 6 --seed {}", prompts[k], 40 + k));
    ASSERT_EQ(batched.rgb.size(), alone.rgb.size());
    int worst = 0;
    for (size_t i = 0; i < alone.rgb.size(); ++i)
      worst = std::max(worst, std::abs(int(batched.rgb[i]) - int(alone.rgb[i])));
    EXPECT_LE(worst, 2) << prompts[k];
  }
}

TEST(ServeAlone, EncodingBesideTheNextRunGivesTheSamePngs) {
  ServeProcess server({"--overlap", "on"});
  ASSERT_GT(server.port(), 0);
  std::vector<std::string> pngs(3);
  std::vector<std::thread> clients;
  for (int k = 0; k < 3; ++k)
    clients.emplace_back([&, k] {
      httplib::Client c = server.client();
      const json r =
          post_json(c, "/v1/images/generations", {{"prompt", "a red circle"}, {"steps", 5}, {"seed", 60 + k}}, 200);
      if (r.contains("data")) pngs[size_t(k)] = r["data"][0]["b64_json"];
    });
  for (auto& t : clients) t.join();
  for (int k = 0; k < 3; ++k)
    expect_same_pixels(b64_pixels(pngs[size_t(k)]),
                       generate_pixels(fmt::format("--prompt 'a red circle' --steps 5 --seed {}", 60 + k)));
}

// Two models whose files (shapes 20.2 MiB, tiny-sd 4.2 MiB) do not fit 22
// MiB together: each request for the unloaded one unloads the other first.
TEST(ServeAlone, TheModelCacheKeepsToItsMemoryBound) {
  const std::string shapes = KILN_SOURCE_DIR "/models/shapes", tiny = KILN_SOURCE_DIR "/tests/models/tiny-sd";
  ServeProcess server({"--model", shapes, "--model", tiny, "--model-memory", "22"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client();
  auto loads = [&](const std::string& model) {
    const std::string metrics = c.Get("/metrics")->body;
    std::smatch m;
    const bool found =
        std::regex_search(metrics, m, std::regex("kiln_model_loads_total\\{model=\"" + model + "\"\\} (\\d+)"));
    return found ? std::stoi(m[1]) : -1;
  };
  EXPECT_EQ(loads("shapes"), 1);  // loaded at start to check it, then unloaded for tiny-sd
  EXPECT_EQ(loads("tiny-sd"), 1);
  const json r = post_json(c, "/v1/images/generations",
                           {{"model", "shapes"}, {"prompt", "a red circle"}, {"steps", 4}, {"seed", 8}}, 200);
  expect_same_pixels(b64_pixels(r["data"][0]["b64_json"]),
                     generate_pixels("--prompt 'a red circle' --steps 4 --seed 8"));
  EXPECT_EQ(loads("shapes"), 2);
  post_json(c, "/v1/images/generations", {{"model", "tiny-sd"}, {"prompt", "a cat"}, {"steps", 2}}, 200);
  post_json(c, "/v1/images/generations", {{"model", "tiny-sd"}, {"prompt", "a dog"}, {"steps", 2}}, 200);
  EXPECT_EQ(loads("tiny-sd"), 2);  // once more after shapes took its place, then kept
  EXPECT_NE(c.Get("/metrics")->body.find("kiln_model_loaded{model=\"shapes\"} 0"), std::string::npos);
  // A bound below one model's files is refused at start.
  const std::string command =
      fmt::format("{} serve --port 0 --model {} --model-memory 5 2>/dev/null", KILN_BINARY, shapes);
  EXPECT_EQ(WEXITSTATUS(std::system(command.c_str())), 2);
}

// --lora: the served checkpoint's image is kiln generate's with the same LoRA.
TEST(ServeAlone, LorasAreMergedIntoTheServedCheckpoint) {
  const std::string dir = KILN_SOURCE_DIR "/tests/models/sd-checkpoints";
  const std::string model = dir + "/sd1.safetensors", lora = dir + "/lora-sd1-kohya.safetensors:0.7";
  ServeProcess server({"--model", model, "--lora", lora});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client();
  const json r = post_json(c, "/v1/images/generations",
                           {{"prompt", "a red circle"}, {"steps", 3}, {"seed", 4}, {"size", "32x32"}}, 200);
  const RgbImage served = b64_pixels(r["data"][0]["b64_json"]);
  expect_same_pixels(served, generate_pixels(fmt::format(
                                 "--model {} --lora {} --prompt 'a red circle' --steps 3 --seed 4 --width 32 --height 32",
                                 model, lora)));
  const RgbImage plain =
      generate_pixels(fmt::format("--model {} --prompt 'a red circle' --steps 3 --seed 4 --width 32 --height 32", model));
  EXPECT_NE(served.rgb, plain.rgb);
}

TEST(ServeAlone, TheApiKeyIsRequired) {
  ServeProcess server({"--api-key", "s3cret"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client();
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(c.Post("/v1/jobs", json{{"prompt", "x"}}.dump(), "application/json")->status, 401);
  EXPECT_EQ(c.Get("/")->status, 200);  // the page itself: it asks for the key
  c.set_bearer_token_auth("s3cret");
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
}

TEST(ServeAlone, SigtermDrainsAndExits0) {
  ServeProcess server({"--grace", "60"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client(), late = server.client();
  const std::string id = post_json(c, "/v1/jobs", {{"prompt", "a red circle"}, {"steps", 120}}, 202)["id"];
  while (json::parse(c.Get(("/v1/jobs/" + id).c_str())->body)["status"] != "running") std::this_thread::sleep_for(5ms);
  std::vector<std::pair<std::string, json>> events;
  std::thread reader([&] { events = read_events(c, id); });
  std::this_thread::sleep_for(50ms);  // the stream is open before the signal
  // New work, once /health says the drain has begun (the running job keeps the server up meanwhile).
  int late_status = 0;
  std::thread signaller([&] {
    for (int i = 0; i < 1000; ++i) {
      auto health = late.Get("/health");
      if (!health || health->status == 503) break;
      std::this_thread::sleep_for(5ms);
    }
    auto res = late.Post("/v1/jobs", json{{"prompt", "x"}}.dump(), "application/json");
    late_status = res ? res->status : -1;
  });
  const int exit_code = server.stop(SIGTERM, 120s);
  signaller.join();
  reader.join();
  EXPECT_EQ(exit_code, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "done");  // the running job finished within the grace period
  EXPECT_EQ(late_status, 503);             // new work while draining
}

TEST(ServeAlone, VideoJobsGiveKilnGeneratesMp4) {
  const std::string wan = KILN_SOURCE_DIR "/tests/models/wan-tiny/diffusers";
  ServeProcess server({"--model", wan});
  ASSERT_GT(server.port(), 0);
  httplib::Client c = server.client();
  const json models = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["kind"], "video");
  post_json(c, "/v1/images/generations", {{"prompt", "x"}}, 400);  // a video model makes no images
  const std::string prompt = "A red fox runs through fresh snow in a quiet forest at dawn.";
  const json job =
      post_json(c, "/v1/jobs",
                {{"prompt", prompt}, {"seed", 42}, {"steps", 4}, {"frames", 9}, {"width", 96}, {"height", 64}}, 202);
  const std::string id = job["id"];
  std::vector<std::string> types;
  for (const auto& [type, data] : read_events(c, id)) types.push_back(type);
  EXPECT_EQ(types, (std::vector<std::string>{"queued", "started", "step", "step", "step", "step", "decoding",
                                             "decoding", "decoding", "done"}));
  auto content = c.Get(("/v1/jobs/" + id + "/content").c_str());
  ASSERT_EQ(content->status, 200);
  EXPECT_EQ(content->get_header_value("Content-Type"), "video/mp4");
  // kiln generate's file for the same request: the same bytes (its MP4s are deterministic).
  const fs::path out = fs::temp_directory_path() / fmt::format("kiln-serve-test-{}.mp4", getpid());
  const std::string command = fmt::format(
      "{} generate -q -m {} -p '{}' --seed 42 --steps 4 --frames 9 --width 96 "
      "--height 64 -o {}",
      KILN_BINARY, wan, prompt, out.string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream file(out, std::ios::binary);
  const std::string expected((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  fs::remove(out);
  EXPECT_GT(expected.size(), 1000u);
  EXPECT_TRUE(content->body == expected) << content->body.size() << " bytes against " << expected.size();
}

TEST(ServeAlone, AnotherAddressNeedsAnApiKey) {
  const std::string command = fmt::format("{} serve --host 0.0.0.0 --port 0 2>/dev/null", KILN_BINARY);
  EXPECT_EQ(WEXITSTATUS(std::system(command.c_str())), 2);
}

}  // namespace
}  // namespace kiln::serve
