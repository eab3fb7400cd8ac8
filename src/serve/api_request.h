// What a client's JSON body asks for, checked against the server's limits:
// the OpenAI Images body, A1111's txt2img/img2img body and kiln's own job
// body, each turned into a JobRequest or a RequestError naming the field
// at fault (the server answers it with a 400). Pure functions of the body:
// no model is touched, so the fuzzer and the tests call them directly.
//
//   Parsed<JobRequest> r = parse_openai_images(body, limits);
//   if (auto* e = std::get_if<RequestError>(&r)) return bad_request(e->field, e->message);
//
// Unknown fields are ignored (A1111 clients send their whole UI state);
// null counts as absent.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <variant>

#include "app/generator.h"
#include "app/video_generator.h"

namespace kiln::serve {

struct ServeLimits {
  size_t max_body_bytes = size_t(32) << 20;  // a request body (base64 uploads included)
  size_t max_prompt_bytes = 4000;            // a prompt or negative prompt
  int max_images = 8;                        // n, batch_size x n_iter
  int max_steps = 150;
  int64_t max_pixels = int64_t(1024) * 1024;   // width x height (a video's frame)
  int max_side = 2048;                         // width or height
  size_t max_upload_bytes = size_t(16) << 20;  // a decoded image upload
  int64_t max_frames = 121;                    // a video
};

enum class JobKind { kImage, kVideo };

struct JobRequest {
  JobKind kind = JobKind::kImage;
  std::string model;                         // as the client named it; empty: the server's current model
  GenerationRequest image;                   // kImage: one prompt, `batch` images
  VideoGenerationRequest video;              // kVideo (where it is written is the server's business)
  std::string response_format = "b64_json";  // OpenAI: b64_json, or url (a data: URL)
};

struct RequestError {
  std::string field;  // the body's field at fault ("" for the body itself)
  std::string message;
};

template <class T>
using Parsed = std::variant<T, RequestError>;

// POST /v1/images/generations: prompt, n, size "WxH" | "auto", model,
// response_format; kiln's seed, steps, guidance_scale, negative_prompt, scheduler.
Parsed<JobRequest> parse_openai_images(const nlohmann::json& body, const ServeLimits& limits);

// POST /sdapi/v1/txt2img and img2img (init_images[0], denoising_strength):
// prompt, negative_prompt, steps, cfg_scale, width, height, seed (-1:
// random), batch_size x n_iter images, sampler_name (+ scheduler "karras").
Parsed<JobRequest> parse_a1111(const nlohmann::json& body, bool img2img, const ServeLimits& limits);

// POST /v1/jobs on a model of `kind`: prompt, negative_prompt, seed, steps,
// guidance_scale, width, height, scheduler, and for images n, image (img2img)
// and strength; for video frames, fps and image (the first frame).
Parsed<JobRequest> parse_job(const nlohmann::json& body, JobKind kind, const ServeLimits& limits);

// The body's "model" field (a string; absent or null: ""), read before the
// model decides how the rest is parsed.
Parsed<std::string> parse_model_field(const nlohmann::json& body);

// A1111's sampler (and scheduler) names as kiln's scheduler names; the
// table the samplers endpoint lists.
struct A1111Sampler {
  const char* name;    // "DPM++ 2M"
  const char* kiln;    // "dpmpp_2m"
  const char* karras;  // with scheduler "karras": "dpmpp_2m_karras", or null
};
std::span<const A1111Sampler> a1111_samplers();

}  // namespace kiln::serve
