#include "models/lora.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <map>
#include <optional>

#include "kernels/cpu/widen.h"
#include "safetensors/safetensors.h"

namespace kiln {

namespace {

enum class Part { kDown, kUp, kAlpha };

// One module's tensors, as the file names them.
struct Module {
  std::optional<Tensor> down, up, alpha;
  std::string key;  // one of its keys, for messages
};

// The layouts' key forms: a component prefix, then the module, then the part.
struct Prefix {
  std::string_view prefix, component;
  bool kohya;  // the module's dots written as _
};
constexpr Prefix kPrefixes[] = {
    {"lora_unet_", "unet", true},          {"lora_te1_", "text_encoder", true},  {"lora_te2_", "text_encoder_2", true},
    {"lora_te_", "text_encoder", true},    {"unet.", "unet", false},             {"text_encoder_2.", "text_encoder_2", false},
    {"text_encoder.", "text_encoder", false}};
constexpr std::pair<std::string_view, Part> kKohyaParts[] = {
    {".lora_down.weight", Part::kDown}, {".lora_up.weight", Part::kUp}, {".alpha", Part::kAlpha}};
constexpr std::pair<std::string_view, Part> kDiffusersParts[] = {
    {".lora_A.weight", Part::kDown},    {".lora_B.weight", Part::kUp},  {".lora.down.weight", Part::kDown},
    {".lora.up.weight", Part::kUp},     {".alpha", Part::kAlpha}};

// (component, module as the file writes it, part) of a LoRA key.
std::optional<std::tuple<std::string, std::string, Part>> parse_key(std::string_view key) {
  for (const Prefix& p : kPrefixes) {
    if (!key.starts_with(p.prefix)) continue;
    std::string_view rest = key.substr(p.prefix.size());
    using Parts = std::span<const std::pair<std::string_view, Part>>;
    for (const auto& [suffix, part] : p.kohya ? Parts(kKohyaParts) : Parts(kDiffusersParts))
      if (rest.ends_with(suffix) && rest.size() > suffix.size())
        return std::tuple{std::string(p.component), std::string(rest.substr(0, rest.size() - suffix.size())), part};
    return std::nullopt;
  }
  return std::nullopt;
}

std::string underscored(std::string_view dotted) {
  std::string s(dotted);
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

// Module names -> weight names for one network: the canonical module path
// dotted and underscored, and the target's second name underscored.
std::map<std::string, std::string> module_index(const LoraTarget& target) {
  std::map<std::string, std::string> index;
  constexpr std::string_view kWeight = ".weight";
  for (const std::string& name : target.weights->names()) {
    if (!name.ends_with(kWeight)) continue;
    const std::string_view module = std::string_view(name).substr(0, name.size() - kWeight.size());
    index.emplace(std::string(module), name);
    index.emplace(underscored(module), name);
    if (!target.also_named) continue;
    if (const std::optional<std::string> other = target.also_named(name); other && other->ends_with(kWeight))
      index.emplace(underscored(std::string_view(*other).substr(0, other->size() - kWeight.size())), name);
  }
  return index;
}

// Whether m's up and down make w's shape (a conv's [out, in, kh, kw] from
// down [r, in, kh, kw] and up [out, r, 1, 1]); the error names `where`.
Status check_fit(const Tensor& w, const Module& m, const std::string& where) {
  const Tensor &down = *m.down, &up = *m.up;
  const int64_t out = w.rank() >= 1 ? w.shape()[0] : 0, rank = down.rank() >= 2 ? down.shape()[0] : 0;
  if (rank < 1 || up.rank() < 2 || up.shape()[0] != out || up.numel() != out * rank ||
      out * (down.numel() / rank) != w.numel() || down.numel() % rank)
    return invalid_argument("{}: up {} and down {} do not make the weight's {} (a LoRA for another model?)", where,
                            shape_to_string(up.shape()), shape_to_string(down.shape()), shape_to_string(w.shape()));
  for (DType d : {w.dtype(), down.dtype(), up.dtype()})
    if (d != DType::kF32 && d != DType::kF16 && d != DType::kBF16)
      return invalid_argument("{}: a LoRA of {} onto {} weights; kiln merges f32, f16 and bf16 ones", where,
                              dtype_name(down.dtype()), dtype_name(w.dtype()));
  return ok_status();
}

// w + scale * up . down (check_fit's shapes), in w's dtype.
Result<Tensor> merged(const Tensor& w, const Module& m, double scale) {
  const Tensor &down = *m.down, &up = *m.up;
  const int64_t out = w.shape()[0], rank = down.shape()[0], inner = down.numel() / rank;
  KILN_ASSIGN_OR_RETURN(Tensor sum, widened_to_f32(w.view()));
  KILN_ASSIGN_OR_RETURN(const Tensor down_f32, widened_to_f32(down.view()));
  KILN_ASSIGN_OR_RETURN(const Tensor up_f32, widened_to_f32(up.view()));
  const float *d = down_f32.data<float>(), *u = up_f32.data<float>();
  for (int64_t o = 0; o < out; ++o) {
    float* row = sum.data<float>() + o * inner;
    for (int64_t r = 0; r < rank; ++r) {
      const float a = static_cast<float>(scale * u[o * rank + r]);
      const float* dr = d + r * inner;
      for (int64_t k = 0; k < inner; ++k) row[k] += a * dr[k];
    }
  }
  if (w.dtype() == DType::kF32) return sum;
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(w.dtype(), w.shape()));
  const float* f = sum.data<float>();
  for (int64_t i = 0; i < sum.numel(); ++i) {
    if (w.dtype() == DType::kF16) t.data<f16>()[i] = f32_to_f16(f[i]);
    else t.data<bf16>()[i] = f32_to_bf16(f[i]);
  }
  return t;
}

}  // namespace

Result<LoraSpec> parse_lora_spec(std::string_view text) {
  LoraSpec spec{.path = std::string(text)};
  if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    const std::string_view number = text.substr(colon + 1);
    float weight = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), weight);
    if (error == std::errc() && end == number.data() + number.size() && !number.empty()) {
      if (!std::isfinite(weight)) return invalid_argument("--lora {}: the weight must be a finite number", text);
      spec.path = std::string(text.substr(0, colon));
      spec.weight = weight;
    }
  }
  if (spec.path.empty()) return invalid_argument("--lora {}: no file named", text);
  return spec;
}

Result<LoraReport> apply_lora(const LoraSpec& spec, std::span<const LoraTarget> targets) {
  KILN_ASSIGN_OR_RETURN(NamedTensorList tensors, safetensors_read(spec.path));
  // The file's modules by (component, module).
  std::map<std::pair<std::string, std::string>, Module> modules;
  LoraReport report;
  for (const auto& [key, t] : tensors) {
    auto parsed = parse_key(key);
    if (!parsed) {
      report.unmatched.push_back(key);
      continue;
    }
    auto& [component, module, part] = *parsed;
    Module& m = modules[{component, module}];
    m.key = key;
    (part == Part::kDown ? m.down : part == Part::kUp ? m.up : m.alpha) = t;
  }
  if (modules.empty())
    return invalid_argument("{}: no LoRA keys in a layout kiln reads (kohya's lora_unet_* / lora_te*_*.lora_down/"
                            "lora_up, or diffusers' unet.* / text_encoder*.*.lora_A/lora_B), e.g. '{}'",
                            spec.path, tensors.empty() ? "" : tensors.front().first);
  std::map<std::string, std::map<std::string, std::string>> indexes;  // component -> module -> weight
  for (const LoraTarget& t : targets) indexes[t.component] = module_index(t);
  for (auto& [id, m] : modules) {
    const auto& [component, module] = id;
    const std::string where = fmt::format("{}: {}", spec.path, m.key);
    if (!m.down || !m.up) return invalid_argument("{}: the module has no {} matrix", where, m.down ? "up" : "down");
    const LoraTarget* target = nullptr;
    for (const LoraTarget& t : targets)
      if (t.component == component) target = &t;
    const auto& index = indexes[component];
    const auto hit = index.find(module);
    if (!target || hit == index.end()) {
      report.unmatched.push_back(fmt::format("{}.{}", component, module));
      continue;
    }
    const double rank = m.down->rank() >= 1 ? double(m.down->shape()[0]) : 0;
    double alpha = rank;
    if (m.alpha) {
      if (m.alpha->numel() != 1 || !dtype_is_float(m.alpha->dtype()))
        return invalid_argument("{}: alpha must be one number, got {} {}", where, dtype_name(m.alpha->dtype()),
                                shape_to_string(m.alpha->shape()));
      alpha = m.alpha->element_as_double(0);
      if (!std::isfinite(alpha)) return invalid_argument("{}: alpha is not a finite number", where);
    }
    const Tensor* w = target->weights->find(hit->second);
    // Checked at weight 0 too: a LoRA that does not fit is an error however little of it is asked for.
    KILN_RETURN_IF_ERROR(check_fit(*w, m, where));
    if (spec.weight != 0.0f) {
      KILN_ASSIGN_OR_RETURN(Tensor sum, merged(*w, m, spec.weight * alpha / rank));
      KILN_RETURN_IF_ERROR(target->weights->replace(hit->second, std::move(sum),
                                                    fmt::format("+ LoRA {} x {}", spec.path, spec.weight)));
    }
    ++report.merged;
  }
  if (report.merged == 0)
    return invalid_argument("{}: none of its {} modules is a weight of this model (a LoRA for another model?), "
                            "e.g. '{}'",
                            spec.path, modules.size(), modules.begin()->second.key);
  return report;
}

}  // namespace kiln
