#include "models/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "core/json_file.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxConfigBytes = size_t(1) << 20;
constexpr size_t kMaxIndexBytes = size_t(64) << 20;  // a shard index lists every tensor's name
constexpr size_t kMaxShards = 4096;

bool has_extension(const std::string& path, std::initializer_list<std::string_view> extensions) {
  const std::string ext = fs::path(path).extension().string();
  return std::any_of(extensions.begin(), extensions.end(), [&](std::string_view e) { return ext == e; });
}

Status pickle_refusal(const std::string& path) {
  return invalid_argument(
      "{}: a PyTorch pickle, which kiln does not load because unpickling runs whatever code the file carries; "
      "convert it once to .safetensors (in Python: safetensors.torch.save_file(torch.load(PATH, weights_only=True)"
      "[\"state_dict\"], \"model.safetensors\")) and give that file",
      path);
}

// A shard's file name as an index gives it: a plain name in the component's folder.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

// Whether `name` ends in a shard's "-00001-of-00002".
bool shard_suffix(std::string_view name) {
  const size_t of = name.rfind("-of-");
  const size_t dash = of == std::string_view::npos ? of : name.rfind('-', of - 1);
  if (dash == std::string_view::npos) return false;
  auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  return digits(name.substr(dash + 1, of - dash - 1)) && digits(name.substr(of + 4));
}

// The variants ("fp16", ...) of `stem` in `dir`: <stem>.<v>.safetensors or
// <stem>.safetensors.index.<v>.json (a shard's name is no variant).
std::set<std::string> variants_in(const fs::path& dir, const std::string& stem) {
  std::set<std::string> variants;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string plain_prefix = stem + ".", index_prefix = stem + ".safetensors.index.";
    if (name.starts_with(index_prefix) && name.ends_with(".json") && name.size() > index_prefix.size() + 5)
      variants.insert(name.substr(index_prefix.size(), name.size() - index_prefix.size() - 5));
    else if (name.starts_with(plain_prefix) && name.ends_with(".safetensors") &&
             name.size() > plain_prefix.size() + 12 && name.find(".safetensors") == name.size() - 12 &&
             !shard_suffix(name.substr(0, name.size() - 12)))
      variants.insert(name.substr(plain_prefix.size(), name.size() - plain_prefix.size() - 12));
  }
  return variants;
}

// The shards an index lists, read; each key the index names found in its shard.
Status read_sharded(const fs::path& dir, const fs::path& index_path, ComponentWeights& out) {
  KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_path.string(), kMaxIndexBytes, false));
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty())
    return invalid_argument("{}: no \"weight_map\" of tensor name -> shard file", index_path.string());
  std::map<std::string, std::set<std::string>> keys_of;  // shard -> the keys the index puts there
  for (const auto& [key, file] : map->items()) {
    if (!file.is_string() || !plain_file_name(file.get<std::string>()))
      return invalid_argument("{}: tensor '{}' is in {}, not a file of this folder", index_path.string(), key,
                              file.dump());
    keys_of[file.get<std::string>()].insert(key);
  }
  if (keys_of.size() > kMaxShards)
    return invalid_argument("{}: {} shards (at most {})", index_path.string(), keys_of.size(), kMaxShards);
  for (const auto& [file, keys] : keys_of) {
    const std::string path = (dir / file).string();
    KILN_ASSIGN_OR_RETURN(NamedTensorList tensors, safetensors_read(path));
    std::set<std::string> found;
    for (auto& named : tensors) {
      found.insert(named.first);
      out.tensors.push_back(std::move(named));
    }
    for (const std::string& key : keys)
      if (!found.count(key))
        return invalid_argument("{}: lists '{}' in {}, which does not hold it", index_path.string(), key, file);
    out.files.push_back(path);
  }
  return ok_status();
}

}  // namespace

const char* checkpoint_format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kSingleFile: return "single file";
    case CheckpointFormat::kDiffusersFolder: return "diffusers folder";
    case CheckpointFormat::kOnnxFolder: return "ONNX folder (optimum)";
  }
  return "?";
}

bool is_checkpoint_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "model_index.json", ec);
  return has_extension(path, {".safetensors", ".ckpt", ".pt", ".pth", ".bin"});
}

Result<CheckpointFormat> checkpoint_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (!fs::exists(dir / "model_index.json", ec))
      return not_found("{}: no such file, so {} is not a model folder (kiln reads diffusers folders and optimum's "
                       "ONNX export)",
                       (dir / "model_index.json").string(), path);
    // optimum's export names its VAE halves as components (and holds model.onnx files).
    KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file((dir / "model_index.json").string(), kMaxConfigBytes, false));
    if (index.contains("vae_decoder") || index.contains("vae_encoder") || fs::exists(dir / "unet" / "model.onnx", ec))
      return CheckpointFormat::kOnnxFolder;
    return CheckpointFormat::kDiffusersFolder;
  }
  if (!fs::exists(path, ec)) return not_found("{}: no such file or folder", path);
  if (has_extension(path, {".ckpt", ".pt", ".pth", ".bin"})) return pickle_refusal(path);
  if (has_extension(path, {".safetensors"})) return CheckpointFormat::kSingleFile;
  return invalid_argument("{}: not a checkpoint kiln reads (a .safetensors file, a diffusers folder or optimum's "
                          "ONNX folder)",
                          path);
}

Result<ComponentWeights> read_diffusers_component(const std::string& dir, const std::string& component,
                                                  const std::string& stem, const std::string& variant) {
  const fs::path folder = fs::path(dir) / component;
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    return not_found("{}: missing from the diffusers folder (it holds config.json and {}.safetensors)",
                     folder.string(), stem);
  ComponentWeights out;
  KILN_ASSIGN_OR_RETURN(out.config, read_json_file((folder / "config.json").string(), kMaxConfigBytes, true));
  auto plain_of = [&](const std::string& v) { return folder / (stem + (v.empty() ? "" : "." + v) + ".safetensors"); };
  auto index_of = [&](const std::string& v) {
    return folder / (stem + ".safetensors.index" + (v.empty() ? "" : "." + v) + ".json");
  };
  auto present = [&](const std::string& v) { return fs::exists(plain_of(v), ec) || fs::exists(index_of(v), ec); };

  std::string chosen = variant;
  if (chosen.empty() && !present("")) {
    const std::set<std::string> variants = variants_in(folder, stem);
    if (variants.size() == 1) {
      chosen = *variants.begin();  // the only weights there
    } else if (variants.empty()) {
      if (fs::exists(folder / (stem + ".bin"), ec)) return pickle_refusal((folder / (stem + ".bin")).string());
      return not_found("{}: no {}.safetensors, variant or shard index", folder.string(), stem);
    } else {
      return invalid_argument("{}: no plain weights but the variants {}; pick one with --variant", folder.string(),
                              fmt::join(variants, ", "));
    }
  } else if (!chosen.empty() && !present(chosen)) {
    const std::set<std::string> variants = variants_in(folder, stem);
    return not_found("{}: no {} variant ({}.{}.safetensors); it has {}", folder.string(), chosen, stem, chosen,
                     variants.empty() ? std::string("the plain weights only") : fmt::format("{}", fmt::join(variants, ", ")));
  }
  out.variant = chosen;
  if (fs::exists(plain_of(chosen), ec)) {
    KILN_ASSIGN_OR_RETURN(out.tensors, safetensors_read(plain_of(chosen).string()));
    out.files.push_back(plain_of(chosen).string());
  } else {
    KILN_RETURN_IF_ERROR(read_sharded(folder, index_of(chosen), out));
  }
  return out;
}

}  // namespace kiln
