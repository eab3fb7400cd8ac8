#include "serve/api_request.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <optional>

#include "pipeline/jpeg.h"
#include "serve/base64.h"

namespace kiln::serve {

namespace {

using nlohmann::json;

constexpr std::array kSamplers = {
    A1111Sampler{"Euler", "euler", "euler_karras"}, A1111Sampler{"Euler a", "euler_a", nullptr},
    A1111Sampler{"DDIM", "ddim", nullptr},          A1111Sampler{"DPM++ 2M", "dpmpp_2m", "dpmpp_2m_karras"},
    A1111Sampler{"UniPC", "unipc", nullptr},        A1111Sampler{"LCM", "lcm", nullptr},
};

// Reads typed fields from a JSON object; the first error sticks and every
// later read returns its fallback, so a parser reads top to bottom and
// checks once at the end.
class FieldReader {
 public:
  explicit FieldReader(const json& body) : body_(body) {
    if (!body.is_object()) fail("", "the body must be a JSON object");
  }

  bool has(const char* key) const { return body_.is_object() && body_.contains(key) && !body_[key].is_null(); }
  const json& at(const char* key) const { return body_[key]; }

  std::string text(const char* key, std::string fallback, size_t max_bytes) {
    if (!ok() || !has(key)) return fallback;
    if (!at(key).is_string()) return fail(key, "must be a string"), fallback;
    const std::string& s = at(key).get_ref<const std::string&>();
    if (s.size() > max_bytes)
      return fail(key, fmt::format("is {} bytes, over the limit of {}", s.size(), max_bytes)), fallback;
    return s;
  }

  int64_t integer(const char* key, int64_t fallback, int64_t min, int64_t max) {
    if (!ok() || !has(key)) return fallback;
    const json& v = at(key);
    const std::string range = fmt::format("must be an integer from {} to {}", min, max);
    int64_t n = 0;
    if (v.is_number_float()) {  // 20.0 from a JavaScript client is 20; 20.5 is not an integer
      const double d = v.get<double>();
      if (!(d >= double(min) && d <= double(max)) || d != std::floor(d)) return fail(key, range), fallback;
      n = int64_t(d);
    } else if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(max))
        return fail(key, range + fmt::format(", got {}", v.get<uint64_t>())), fallback;
      n = int64_t(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      n = v.get<int64_t>();
    } else {
      return fail(key, range), fallback;
    }
    if (n < min || n > max) return fail(key, range + fmt::format(", got {}", n)), fallback;
    return n;
  }

  double number(const char* key, double fallback, double min, double max) {
    if (!ok() || !has(key)) return fallback;
    if (!at(key).is_number()) return fail(key, "must be a number"), fallback;
    const double x = at(key).get<double>();
    if (!(x >= min && x <= max)) return fail(key, fmt::format("must be from {} to {}, got {}", min, max, x)), fallback;
    return x;
  }

  // Seeds: absent, null or negative (A1111's -1): none, a random one.
  std::optional<uint64_t> seed(const char* key) {
    if (!ok() || !has(key)) return std::nullopt;
    const json& v = at(key);
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) return v.get<int64_t>() < 0 ? std::nullopt : std::optional<uint64_t>(v.get<int64_t>());
    return fail(key, "must be an integer (negative: a random seed)"), std::nullopt;
  }

  void fail(std::string field, std::string message) {
    if (ok()) error_ = RequestError{std::move(field), std::move(message)};
  }
  bool ok() const { return !error_; }
  const std::optional<RequestError>& error() const { return error_; }

 private:
  const json& body_;
  std::optional<RequestError> error_;
};

void check_size(FieldReader& f, const char* field, int64_t width, int64_t height, int multiple, const ServeLimits& l) {
  if (!f.ok() || (width == 0 && height == 0)) return;  // the model's own size
  if (width <= 0 || height <= 0 || width % multiple || height % multiple)
    return f.fail(field, fmt::format("{}x{}: both sides must be positive multiples of {}", width, height, multiple));
  if (width > l.max_side || height > l.max_side || width * height > l.max_pixels)
    f.fail(field, fmt::format("{}x{} is over the limit of {} pixels a side and {} pixels in all", width, height,
                              l.max_side, l.max_pixels));
}

// An uploaded picture: base64 (or a data: URL) of a PNG or a JPEG.
std::optional<RgbImage> read_image(FieldReader& f, const char* field, const json& value, const ServeLimits& l) {
  if (!f.ok()) return std::nullopt;
  if (!value.is_string()) return f.fail(field, "must be a base64 PNG or JPEG (or a data: URL of one)"), std::nullopt;
  auto bytes = base64_decode(value.get_ref<const std::string&>(), l.max_upload_bytes);
  if (!bytes.ok()) return f.fail(field, bytes.status().message()), std::nullopt;
  auto image = is_jpeg(bytes->data(), bytes->size())
                   ? decode_jpeg(bytes->data(), bytes->size(), "the JPEG", l.max_side)
                   : decode_png(bytes->data(), bytes->size(), "the image", l.max_side);
  if (!image.ok()) return f.fail(field, image.status().message()), std::nullopt;
  return std::move(*image);
}

// The fields every image body shares under kiln's names.
void read_common(FieldReader& f, GenerationRequest& r, const ServeLimits& l) {
  r.prompts = {f.text("prompt", "", l.max_prompt_bytes)};
  if (f.ok() && r.prompts[0].empty()) f.fail("prompt", "is required");
  r.negative_prompt = f.text("negative_prompt", "", l.max_prompt_bytes);
  r.seed = f.seed("seed");
  r.steps = int(f.integer("steps", 20, 1, l.max_steps));
  r.scheduler = f.text("scheduler", "", 64);
}

template <class T>
Parsed<T> done(const FieldReader& f, T value) {
  if (f.error()) return *f.error();
  return value;
}

}  // namespace

std::span<const A1111Sampler> a1111_samplers() { return kSamplers; }

Parsed<std::string> parse_model_field(const json& body) {
  FieldReader f(body);
  return done(f, f.text("model", "", 256));
}

Parsed<JobRequest> parse_openai_images(const json& body, const ServeLimits& l) {
  FieldReader f(body);
  JobRequest j;
  GenerationRequest& r = j.image;
  j.model = f.text("model", "", 256);
  read_common(f, r, l);
  r.guidance_scale = float(f.number("guidance_scale", r.guidance_scale, 0, 100));
  r.batch = int(f.integer("n", 1, 1, l.max_images));
  const std::string size = f.text("size", "auto", 32);
  if (f.ok() && size != "auto") {
    int w = 0, h = 0;
    const size_t x = size.find('x');
    const char* end = size.data() + size.size();
    if (x == std::string::npos || std::from_chars(size.data(), size.data() + x, w).ptr != size.data() + x ||
        std::from_chars(size.data() + x + 1, end, h).ptr != end)
      f.fail("size", fmt::format("'{}' is not WIDTHxHEIGHT (or auto)", size));
    r.width = w, r.height = h;
    check_size(f, "size", w, h, 8, l);
  }
  j.response_format = f.text("response_format", "b64_json", 16);
  if (f.ok() && j.response_format != "b64_json" && j.response_format != "url")
    f.fail("response_format", fmt::format("'{}': kiln returns b64_json or url (a data: URL)", j.response_format));
  const std::string format = f.text("output_format", "png", 16);
  if (f.ok() && format != "png") f.fail("output_format", fmt::format("'{}': kiln writes png", format));
  return done(f, std::move(j));
}

Parsed<JobRequest> parse_a1111(const json& body, bool img2img, const ServeLimits& l) {
  FieldReader f(body);
  JobRequest j;
  GenerationRequest& r = j.image;
  read_common(f, r, l);
  r.scheduler.clear();  // A1111's "scheduler" is the sigma spacing, read with the sampler
  r.guidance_scale = float(f.number("cfg_scale", 7.0, 0, 100));
  r.width = int(f.integer("width", 0, 0, l.max_side));  // absent: the model's own size
  r.height = int(f.integer("height", 0, 0, l.max_side));
  check_size(f, "width", r.width, r.height, 8, l);
  const int64_t batch = f.integer("batch_size", 1, 1, l.max_images),
                iterations = f.integer("n_iter", 1, 1, l.max_images);
  if (f.ok() && batch * iterations > l.max_images)
    f.fail("n_iter", fmt::format("batch_size x n_iter is {}, over the limit of {}", batch * iterations, l.max_images));
  r.batch = int(batch * iterations);
  const std::string sampler = f.text("sampler_name", f.text("sampler_index", "Euler", 64), 64);
  const std::string spacing = f.text("scheduler", "automatic", 64);
  bool found = false;
  for (const A1111Sampler& s : kSamplers) {
    if (sampler != s.name && sampler != s.kiln) continue;
    found = true;
    r.scheduler = s.kiln;
    if (spacing == "karras" || spacing == "Karras") {
      if (!s.karras) f.fail("scheduler", fmt::format("kiln has no Karras spacing for {}", s.name));
      else r.scheduler = s.karras;
    }
  }
  if (f.ok() && !found)
    f.fail("sampler_name", fmt::format("kiln has no sampler '{}' (see /sdapi/v1/samplers)", sampler));
  if (img2img) {
    if (f.ok() && (!f.has("init_images") || !f.at("init_images").is_array() || f.at("init_images").empty()))
      f.fail("init_images", "img2img needs one image in init_images");
    if (f.ok()) r.init_image = read_image(f, "init_images", f.at("init_images")[0], l);
    r.strength = float(f.number("denoising_strength", 0.75, 0.01, 1));
    if (r.init_image) r.width = r.init_image->width, r.height = r.init_image->height;
    r.init_image_name = "upload";
  }
  return done(f, std::move(j));
}

Parsed<JobRequest> parse_job(const json& body, JobKind kind, const ServeLimits& l) {
  FieldReader f(body);
  JobRequest j{.kind = kind};
  j.model = f.text("model", "", 256);
  GenerationRequest& r = j.image;
  read_common(f, r, l);
  if (kind == JobKind::kImage) {
    r.guidance_scale = float(f.number("guidance_scale", r.guidance_scale, 0, 100));
    r.width = int(f.integer("width", 0, 0, l.max_side));
    r.height = int(f.integer("height", 0, 0, l.max_side));
    check_size(f, "width", r.width, r.height, 8, l);
    r.batch = int(f.integer("n", 1, 1, l.max_images));
    if (f.has("image")) {
      r.init_image = read_image(f, "image", f.at("image"), l);
      r.init_image_name = "upload";
      if (r.init_image) r.width = r.init_image->width, r.height = r.init_image->height;
    }
    r.strength = float(f.number("strength", r.strength, 0.01, 1));
    return done(f, std::move(j));
  }
  VideoGenerationRequest& v = j.video;
  v.prompt = r.prompts[0];
  v.negative_prompt = r.negative_prompt;
  v.seed = r.seed;
  v.steps = int(f.integer("steps", 50, 1, l.max_steps));
  v.scheduler = r.scheduler;
  v.guidance_scale = float(f.number("guidance_scale", v.guidance_scale, 0, 100));
  v.width = f.integer("width", 0, 0, l.max_side);
  v.height = f.integer("height", 0, 0, l.max_side);
  if (f.ok() && (v.width == 0) != (v.height == 0)) f.fail("width", "give both width and height, or neither");
  check_size(f, "width", v.width, v.height, 32, l);
  if (f.ok() && v.width == 0 && int64_t(1280) * 704 > l.max_pixels)
    f.fail("width",
           fmt::format("Wan's default 1280x704 is over the limit of {} pixels; give a smaller size", l.max_pixels));
  v.frames = f.integer("frames", 17, 1, l.max_frames);
  if (f.ok() && v.frames % 4 != 1) f.fail("frames", fmt::format("must be 4k+1 (5, 9, 13, ...), got {}", v.frames));
  v.fps = int(f.integer("fps", 24, 1, 120));
  if (f.has("image")) {
    v.first_frame = read_image(f, "image", f.at("image"), l);
    v.first_frame_name = "upload";
  }
  return done(f, std::move(j));
}

}  // namespace kiln::serve
