// The server's parts without a socket: base64 against RFC 4648's vectors,
// the request parsers against their limits, and a model worker's queue,
// cancel and events with a stand-in for the model.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include "pipeline/jpeg.h"
#include "serve/api_request.h"
#include "serve/base64.h"
#include "serve/model_worker.h"

namespace kiln::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(bytes_of(plain)), encoded);
    auto decoded = base64_decode(encoded, 100);
    ASSERT_TRUE(decoded.ok()) << encoded;
    EXPECT_EQ(*decoded, bytes_of(plain)) << encoded;
  }
}

TEST(Base64, DataUrlsUnpaddedAndWhitespace) {
  EXPECT_EQ(*base64_decode("data:image/png;base64,Zm9vYmE=", 100), bytes_of("fooba"));
  EXPECT_EQ(*base64_decode("Zm9vYmE", 100), bytes_of("fooba"));
  EXPECT_EQ(*base64_decode("Zm9v\nYmFy\r\n", 100), bytes_of("foobar"));
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[size_t(i)] = uint8_t(i);
  EXPECT_EQ(*base64_decode(base64_encode(all), 256), all);
}

TEST(Base64, RefusesWhatIsNotBase64) {
  for (const char* bad :
       {"Zm9v!", "Z", "Zm=v", "Zm9vY===", "data:image/png,Zm9v", "data:nocomma", "Zg==Zg==", "abcde\xc3\xa9"})
    EXPECT_FALSE(base64_decode(bad, 100).ok()) << bad;
  EXPECT_EQ(base64_decode("Zm9vYmFy", 5).status().code(), StatusCode::kInvalidArgument);  // 6 bytes over 5
  // A character outside the alphabet is named by its byte: half a UTF-8 sequence is no text.
  EXPECT_EQ(base64_decode("abcde\xc3\xa9", 100).status().message(), "not base64: the byte 0xc3 at 5");
}

// The field a refusal names, or "" when the body was accepted.
template <class T>
std::string refused_field(const Parsed<T>& parsed) {
  const auto* e = std::get_if<RequestError>(&parsed);
  return e ? (e->field.empty() ? "<body>" : e->field) : "";
}

TEST(ApiRequest, OpenAiImages) {
  Parsed<JobRequest> p = parse_openai_images(json{{"prompt", "a cat"},
                                                  {"n", 2},
                                                  {"size", "64x48"},
                                                  {"seed", 9},
                                                  {"steps", 4},
                                                  {"guidance_scale", 3.5},
                                                  {"negative_prompt", "dogs"},
                                                  {"scheduler", "ddim"},
                                                  {"model", "shapes"},
                                                  {"quality", "hd"},
                                                  {"user", "u"}},
                                             {});
  ASSERT_EQ(refused_field(p), "");
  const JobRequest& j = std::get<JobRequest>(p);
  EXPECT_EQ(j.model, "shapes");
  EXPECT_EQ(j.image.prompts, std::vector<std::string>{"a cat"});
  EXPECT_EQ(j.image.batch, 2);
  EXPECT_EQ(j.image.width, 64);
  EXPECT_EQ(j.image.height, 48);
  EXPECT_EQ(*j.image.seed, 9u);
  EXPECT_EQ(j.image.steps, 4);
  EXPECT_FLOAT_EQ(j.image.guidance_scale, 3.5f);
  EXPECT_EQ(j.image.negative_prompt, "dogs");
  EXPECT_EQ(j.image.scheduler, "ddim");
  EXPECT_EQ(j.response_format, "b64_json");
  // "auto" and nulls: the model's size, a random seed.
  const JobRequest auto_size =
      std::get<JobRequest>(parse_openai_images(json{{"prompt", "x"}, {"size", "auto"}, {"seed", nullptr}}, {}));
  EXPECT_EQ(auto_size.image.width, 0);
  EXPECT_FALSE(auto_size.image.seed);
}

TEST(ApiRequest, EveryViolationNamesItsField) {
  const ServeLimits limits{
      .max_prompt_bytes = 10, .max_images = 4, .max_steps = 50, .max_pixels = 256 * 256, .max_side = 512};
  const std::pair<json, const char*> cases[] = {
      {json::array({1, 2}), "<body>"},
      {json{{"n", 1}}, "prompt"},
      {json{{"prompt", 5}}, "prompt"},
      {json{{"prompt", "far too long a prompt"}}, "prompt"},
      {json{{"prompt", "x"}, {"n", 5}}, "n"},
      {json{{"prompt", "x"}, {"n", "2"}}, "n"},
      {json{{"prompt", "x"}, {"n", 1.5}}, "n"},
      {json{{"prompt", "x"}, {"steps", -3}}, "steps"},
      {json{{"prompt", "x"}, {"steps", 51}}, "steps"},
      {json{{"prompt", "x"}, {"steps", 1e300}}, "steps"},
      {json{{"prompt", "x"}, {"steps", 18446744073709551615ull}}, "steps"},
      {json{{"prompt", "x"}, {"size", "100000x100000"}}, "size"},
      {json{{"prompt", "x"}, {"size", "512x512"}}, "size"},
      {json{{"prompt", "x"}, {"size", "60x64"}}, "size"},
      {json{{"prompt", "x"}, {"size", "64"}}, "size"},
      {json{{"prompt", "x"}, {"size", "-64x64"}}, "size"},
      {json{{"prompt", "x"}, {"seed", "7"}}, "seed"},
      {json{{"prompt", "x"}, {"guidance_scale", "high"}}, "guidance_scale"},
      {json{{"prompt", "x"}, {"response_format", "jpeg"}}, "response_format"},
      {json{{"prompt", "x"}, {"output_format", "webp"}}, "output_format"},
  };
  for (const auto& [body, field] : cases)
    EXPECT_EQ(refused_field(parse_openai_images(body, limits)), field) << body.dump();
}

TEST(ApiRequest, A1111IgnoresUnknownFieldsAndMapsSamplers) {
  const json body = {{"prompt", "a cat"},
                     {"negative_prompt", "dogs"},
                     {"steps", 8},
                     {"cfg_scale", 6},
                     {"width", 64},
                     {"height", 64},
                     {"seed", -1},
                     {"batch_size", 2},
                     {"n_iter", 2},
                     {"sampler_name", "DPM++ 2M"},
                     {"scheduler", "karras"},
                     {"enable_hr", false},
                     {"override_settings", json::object()},
                     {"alwayson_scripts", json::object()},
                     {"restore_faces", false}};
  Parsed<JobRequest> p = parse_a1111(body, false, {});
  ASSERT_EQ(refused_field(p), "");
  const GenerationRequest& r = std::get<JobRequest>(p).image;
  EXPECT_EQ(r.scheduler, "dpmpp_2m_karras");
  EXPECT_EQ(r.batch, 4);
  EXPECT_FALSE(r.seed);  // -1: random
  EXPECT_FLOAT_EQ(r.guidance_scale, 6.0f);
  EXPECT_EQ(
      std::get<JobRequest>(parse_a1111(json{{"prompt", "x"}, {"sampler_name", "Euler a"}}, false, {})).image.scheduler,
      "euler_a");
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}, {"sampler_name", "LMS"}}, false, {})), "sampler_name");
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}, {"batch_size", 8}, {"n_iter", 8}}, false, {})), "n_iter");
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}}, true, {})), "init_images");
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}, {"init_images", {"not base64!"}}}, true, {})),
            "init_images");
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}, {"init_images", {"/9j/4AAQ"}}}, true, {})),
            "init_images");  // a JPEG
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}, {"init_images", {"Zm9vYmFy"}}}, true, {})),
            "init_images");  // not a PNG
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// tests/data/serve/squares.jpg (4:2:0, written by ffmpeg from its testsrc)
// against ffmpeg's own RGB of it (squares_by_ffmpeg.png).
TEST(ApiRequest, JpegUploads) {
  const std::string dir = KILN_SOURCE_DIR "/tests/data/serve/";
  const std::string jpeg = read_bytes(dir + "squares.jpg");
  ASSERT_FALSE(jpeg.empty());
  auto decoded = decode_jpeg(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), "squares.jpg", 4096);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  auto expected = read_png(dir + "squares_by_ffmpeg.png", 4096);
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(decoded->width, 64);
  ASSERT_EQ(decoded->rgb.size(), expected->rgb.size());
  int worst = 0;
  for (size_t i = 0; i < expected->rgb.size(); ++i)
    worst = std::max(worst, std::abs(int(decoded->rgb[i]) - int(expected->rgb[i])));
  EXPECT_LE(worst, 2);  // the same libswscale conversion ffmpeg makes (0 here), up to rounding
  // As an img2img upload: the picture's size is the request's.
  const std::string b64 = base64_encode(std::span(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size()));
  Parsed<JobRequest> p =
      parse_a1111(json{{"prompt", "x"}, {"init_images", {"data:image/jpeg;base64," + b64}}}, true, {});
  ASSERT_EQ(refused_field(p), "");
  EXPECT_EQ(std::get<JobRequest>(p).image.width, 64);
  // Cut short, or too large for the limit: refused, naming the field.
  const std::string cut = base64_encode(std::span(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size() / 3));
  EXPECT_EQ(refused_field(parse_a1111(json{{"prompt", "x"}, {"init_images", {cut}}}, true, {})), "init_images");
  EXPECT_EQ(refused_field(parse_job(json{{"prompt", "x"}, {"image", b64}}, JobKind::kImage, {.max_side = 32})),
            "image");
}

TEST(ApiRequest, VideoJobs) {
  Parsed<JobRequest> p = parse_job(json{{"prompt", "a cat"}, {"frames", 9}, {"width", 64}, {"height", 32}, {"fps", 8}},
                                   JobKind::kVideo, {});
  ASSERT_EQ(refused_field(p), "");
  const VideoGenerationRequest& v = std::get<JobRequest>(p).video;
  EXPECT_EQ(v.prompt, "a cat");
  EXPECT_EQ(v.frames, 9);
  EXPECT_EQ(v.width, 64);
  EXPECT_EQ(v.fps, 8);
  EXPECT_EQ(v.steps, 50);
  EXPECT_EQ(refused_field(parse_job(json{{"prompt", "x"}, {"frames", 8}, {"width", 64}, {"height", 64}},
                                    JobKind::kVideo, {})),
            "frames");
  EXPECT_EQ(refused_field(parse_job(json{{"prompt", "x"}, {"width", 48}, {"height", 64}}, JobKind::kVideo, {})),
            "width");
  EXPECT_EQ(refused_field(parse_job(json{{"prompt", "x"}, {"width", 64}}, JobKind::kVideo, {})), "width");
  // Wan's default 1280x704, against a smaller pixel budget.
  EXPECT_EQ(refused_field(parse_job(json{{"prompt", "x"}}, JobKind::kVideo, {.max_pixels = 512 * 512})), "width");
  EXPECT_EQ(refused_field(parse_job(json{{"prompt", "x"}}, JobKind::kVideo, {})), "");
}

// A stand-in model: `steps` steps of `step_ms` for the whole batch, asking
// for a cancel after each; each job's output is its batch's size. The sizes
// of the batches it ran go to `batches`.
JobRunner fake_model(int steps, int step_ms, std::vector<size_t>* batches = nullptr) {
  return [=](const std::vector<Job*>& jobs) {
    if (batches) batches->push_back(jobs.size());
    std::vector<PendingResult> results;
    for (int i = 0; i < steps; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      for (Job* job : jobs) job->step(i, steps);
      if (jobs[0]->cancel_requested) {
        results.assign(jobs.size(), [] { return JobResult(Status(StatusCode::kCancelled, "cancelled")); });
        return results;
      }
    }
    const uint8_t size = uint8_t(jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k)
      results.push_back([size] { return JobResult(std::vector<JobOutput>{{"image/png", {1, 2, size}, 7}}); });
    return results;
  };
}

std::shared_ptr<Job> new_job(int steps = 3) {
  JobRequest r;
  r.image.steps = steps;
  return std::make_shared<Job>(new_job_id(), "fake", std::move(r));
}

std::vector<std::string> event_types(const Job& job) {
  std::vector<std::string> types;
  for (const JobEvent& e : job.events_after(0, 0ms)) types.push_back(e.type);
  return types;
}

TEST(ModelWorker, RunsJobsInOrderWithTheirEvents) {
  ModelWorker worker("fake", fake_model(3, 1), {.capacity = 4});
  auto a = new_job(), b = new_job();
  ASSERT_TRUE(worker.submit(a).ok());
  ASSERT_TRUE(worker.submit(b).ok());
  ASSERT_TRUE(b->wait_final(10s));
  ASSERT_TRUE(a->wait_final(0ms));
  EXPECT_EQ(event_types(*a), (std::vector<std::string>{"queued", "started", "step", "step", "step", "done"}));
  EXPECT_EQ(a->snapshot().state, JobState::kDone);
  EXPECT_EQ(a->output(0).bytes, (std::vector<uint8_t>{1, 2, 1}));  // a batch of one
  const WorkerFigures f = worker.figures();
  EXPECT_EQ(f.done, 2);
  EXPECT_EQ(f.outputs, 2);
  EXPECT_EQ(f.steps_timed, 4);  // the first step of each job is not timed
}

TEST(ModelWorker, FullQueueAndCancel) {
  ModelWorker worker("fake", fake_model(1000, 2), {.capacity = 1});
  auto running = new_job(1000), waiting = new_job(), refused = new_job();
  ASSERT_TRUE(worker.submit(running).ok());
  while (running->snapshot().state != JobState::kRunning) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(worker.submit(waiting).ok());
  EXPECT_EQ(worker.position(*waiting), 1u);
  EXPECT_EQ(worker.submit(refused).code(), StatusCode::kResourceExhausted);
  // A queued job ends at once; a running one at its next step.
  EXPECT_TRUE(worker.cancel(*waiting));
  EXPECT_EQ(waiting->snapshot().state, JobState::kCancelled);
  while (running->snapshot().step < 3) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(worker.cancel(*running));
  const int step_at_cancel = running->snapshot().step;
  ASSERT_TRUE(running->wait_final(10s));
  EXPECT_EQ(running->snapshot().state, JobState::kCancelled);
  EXPECT_LE(running->snapshot().step, step_at_cancel + 1);
  EXPECT_FALSE(worker.cancel(*running));  // already ended
  EXPECT_EQ(event_types(*waiting).back(), "cancelled");
}

TEST(ModelWorker, QueuedJobsOfOneShapeRunAsOneBatch) {
  std::vector<size_t> batches;
  // The key: the steps; a batch holds up to 3 images.
  ModelWorker worker("fake", fake_model(30, 2, &batches),
                     {.capacity = 8, .batch_images = 3, .batch_key = [](const Job& j) {
                        return std::to_string(j.request.image.steps);
                      }});
  auto first = new_job(30);
  ASSERT_TRUE(worker.submit(first).ok());
  while (first->snapshot().state != JobState::kRunning) std::this_thread::sleep_for(1ms);
  // Behind it: four of one shape, one of another; the shape's first three run together, in queue order.
  std::vector<std::shared_ptr<Job>> same = {new_job(7), new_job(7), new_job(7), new_job(7)};
  auto other = new_job(5);
  ASSERT_TRUE(worker.submit(same[0]).ok());
  ASSERT_TRUE(worker.submit(other).ok());
  for (size_t i = 1; i < same.size(); ++i) ASSERT_TRUE(worker.submit(same[i]).ok());
  worker.close();
  worker.join();
  EXPECT_EQ(batches, (std::vector<size_t>{1, 3, 1, 1}));
  EXPECT_EQ(same[0]->output(0).bytes[2], 3);  // ran in the batch of 3
  EXPECT_EQ(same[2]->output(0).bytes[2], 3);
  EXPECT_EQ(other->output(0).bytes[2], 1);
  EXPECT_EQ(same[3]->output(0).bytes[2], 1);
  EXPECT_EQ(worker.figures().runs, 4);
  EXPECT_EQ(worker.figures().done, 6);
}

class ModelWorkerOverlap : public ::testing::TestWithParam<bool> {};

TEST_P(ModelWorkerOverlap, CloseRefusesNewJobsAndFinishesQueuedOnes) {
  ModelWorker worker("fake", fake_model(2, 5), {.capacity = 4, .overlap_encoding = GetParam()});
  auto a = new_job(), b = new_job();
  ASSERT_TRUE(worker.submit(a).ok());
  ASSERT_TRUE(worker.submit(b).ok());
  worker.close();
  EXPECT_EQ(worker.submit(new_job()).code(), StatusCode::kUnsupported);
  worker.join();
  EXPECT_EQ(a->snapshot().state, JobState::kDone);
  EXPECT_EQ(b->snapshot().state, JobState::kDone);
}

INSTANTIATE_TEST_SUITE_P(EncodingOnTheWorkerAndBeside, ModelWorkerOverlap, ::testing::Bool());

}  // namespace
}  // namespace kiln::serve
