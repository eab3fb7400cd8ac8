#include "runtime/plan_file.h"

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <xxhash.h>

#include "core/mapped_file.h"
#include "kernels/cpu/simd_targets.h"

namespace kiln {

namespace {

using json = nlohmann::json;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'P', 'L', 'A', 'N'};
constexpr size_t kPrefixBytes = 8 + 4 + 8;  // magic, version, header length
constexpr size_t kAlign = 64;

// The checksum and the model hash: XXH3's 64 bits. (FNV-1a, a byte at a
// time, was a large share of a full-width SD UNet's load:
// docs/performance.md#plan-files.)
uint64_t hash64(const void* p, size_t n) { return XXH3_64bits(p, n); }

// A model's identity: a file's bytes; a folder's files (a checkpoint's
// shards and configs), each with its relative path, in name order.
Result<std::string> model_hash(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    KILN_ASSIGN_OR_RETURN(auto model, MappedFile::open(path));
    return fmt::format("{:016x}", hash64(model->data(), model->size()));
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(it->path());
  if (ec) return invalid_argument("{}: cannot list the folder: {}", path, ec.message());
  std::sort(files.begin(), files.end());
  XXH3_state_t* state = XXH3_createState();
  if (!state) return resource_exhausted("no memory for a hash state");
  XXH3_64bits_reset(state);
  for (const fs::path& file : files) {
    const std::string relative = fs::relative(file, path).string();
    auto mapped = MappedFile::open(file.string());
    if (!mapped.ok()) {
      XXH3_freeState(state);
      return mapped.status();
    }
    XXH3_64bits_update(state, relative.data(), relative.size() + 1);  // its terminating zero separates the name
    XXH3_64bits_update(state, (*mapped)->data(), (*mapped)->size());
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return fmt::format("{:016x}", h);
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Where each constant's bytes lie in the file's constant data: offsets
// assigned (64-byte aligned) as the header is built; the bytes are written
// afterwards straight from the tensors, never gathered into one buffer (a
// full-width SD UNet's 2.2 GB were copied twice in memory that way).
struct Blob {
  struct Part {
    uint64_t offset;
    const void* data;
    size_t bytes;
  };
  uint64_t size = 0;
  std::vector<Part> parts;
  uint64_t add(const Tensor& t) {
    size = (size + kAlign - 1) / kAlign * kAlign;
    parts.push_back({size, t.raw(), t.nbytes()});
    size += t.nbytes();
    return parts.back().offset;
  }
};

json attribute_to_json(const AttributeValue& value, Blob& blob) {
  return std::visit(
      [&](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) return {{"int", v}};
        else if constexpr (std::is_same_v<T, float>) return {{"float", v}};
        else if constexpr (std::is_same_v<T, std::string>) return {{"string", v}};
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return {{"ints", v}};
        else if constexpr (std::is_same_v<T, std::vector<float>>) return {{"floats", v}};
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) return {{"strings", v}};
        else return {{"tensor", {{"dtype", dtype_name(v.dtype())}, {"shape", v.shape()}, {"offset", blob.add(v)}}}};
      },
      value);
}

json tensor_ref(const Tensor& t, Blob& blob) {
  const uint64_t offset = blob.add(t);
  return {{"offset", offset}, {"bytes", t.nbytes()}};
}

// Writes a file front to back, hashing what it writes (the trailing
// checksum); into `path`.PID.tmp, renamed over `path` once whole, so a
// process that has the old file mapped never sees it cut short.
class FileWriter {
 public:
  explicit FileWriter(std::string path)
      : path_(std::move(path)),
        temp_(fmt::format("{}.{}.tmp", path_, getpid())),
        hash_(XXH3_createState(), XXH3_freeState) {
    if (!hash_ || XXH3_64bits_reset(hash_.get()) != XXH_OK) return;
    out_.open(temp_, std::ios::binary | std::ios::trunc);
  }
  ~FileWriter() {
    if (!done_) {
      out_.close();
      std::remove(temp_.c_str());
    }
  }
  void write(const void* data, size_t bytes) {
    XXH3_64bits_update(hash_.get(), data, bytes);
    out_.write(static_cast<const char*>(data), std::streamsize(bytes));
    written_ += bytes;
  }
  void pad_to(uint64_t offset) {
    static constexpr char kZeros[kAlign] = {};
    while (written_ < offset) write(kZeros, std::min<uint64_t>(kAlign, offset - written_));
  }
  uint64_t written() const { return written_; }
  // The checksum, then the rename.
  Status finish() {
    const uint64_t hash = XXH3_64bits_digest(hash_.get());
    write(&hash, sizeof(hash));
    out_.close();
    if (!out_) return invalid_argument("{}: write failed", temp_);
    if (std::rename(temp_.c_str(), path_.c_str()) != 0)
      return invalid_argument("{}: cannot rename to {}: {}", temp_, path_, std::strerror(errno));
    done_ = true;
    return ok_status();
  }
  bool opened() const { return out_.is_open(); }

 private:
  std::string path_, temp_;
  std::ofstream out_;
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash_;
  uint64_t written_ = 0;
  bool done_ = false;
};

json key_to_json(const PlanKey& k) {
  return {{"kiln_version", k.kiln_version}, {"isa", k.isa},
          {"precision", k.precision},       {"model_path", k.model_path},
          {"model_hash", k.model_hash},     {"signature", k.signature},
          {"dims", k.dims},                 {"precision_policy", k.precision_policy},
          {"disabled_passes", k.disabled_passes}, {"model_component", k.model_component},
          {"model_variant", k.model_variant}};
}

}  // namespace

void set_key_passes(PlanKey& key, const PassOptions& passes) {
  key.precision = passes.precision.compute == DType::kBF16 ? "bf16" : "f32";
  key.precision_policy = precision_policy_json(passes.precision);
  key.disabled_passes = passes.disabled;
}

Result<PassOptions> key_passes(const PlanKey& key) {
  PassOptions passes;
  passes.disabled = key.disabled_passes;
  KILN_ASSIGN_OR_RETURN(passes.precision, precision_policy(key.precision, ""));
  if (key.precision_policy.empty()) return passes;  // a file from before the key kept it
  KILN_ASSIGN_OR_RETURN(passes.precision,
                        parse_precision_policy(passes.precision, key.precision_policy, "the plan's precision policy"));
  return passes;
}

std::string current_isa() { return simd_targets::onednn_isa(); }

Result<PlanKey> plan_key_for(const std::string& model_path, const std::string& signature,
                             std::map<std::string, int64_t> dims) {
  KILN_ASSIGN_OR_RETURN(std::string hash, model_hash(model_path));
  return PlanKey{KILN_VERSION_STRING, current_isa(), "f32", model_path, hash, signature, std::move(dims)};
}

bool looks_like_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  return in.read(magic, 8) && std::memcmp(magic, kMagic, 8) == 0;
}

Status write_plan_file(const std::string& path, const Plan& plan, const PlanKey& key) {
  if (!plan.graph_whole())
    return internal_error("{}: the plan freed constants it packed: compile it with keep_constants to write it", path);
  const Graph& g = plan.graph();
  Blob blob;
  json values = json::array();
  for (const auto& v : g.values()) {
    json j = {{"name", v->name}, {"dtype", dtype_name(v->dtype)}};
    if (v->shape) {
      std::optional<Shape> shape = sym_shape_concrete(*v->shape);
      if (!shape) return internal_error("'{}' has a symbolic shape in a compiled plan", v->name);
      j["shape"] = *shape;
    }
    if (v->constant) j["constant"] = tensor_ref(*v->constant, blob);
    values.push_back(std::move(j));
  }
  auto ids = [](const std::vector<Value*>& vs) {
    json out = json::array();
    for (const Value* v : vs) out.push_back(v ? int64_t(v->id) : int64_t(-1));
    return out;
  };
  json nodes = json::array();
  for (const auto& n : g.nodes()) {
    json attrs = json::object();
    for (const auto& [name, value] : n->attrs.items()) attrs[name] = attribute_to_json(value, blob);
    nodes.push_back({{"op", op_name(n->op)}, {"name", n->name}, {"inputs", ids(n->inputs)},
                     {"outputs", ids(n->outputs)}, {"attrs", attrs}});
  }
  json fusions(plan.stats().passes.counts);
  const json header = {{"key", key_to_json(key)}, {"opset", g.opset},   {"values", values},
                       {"inputs", ids(g.inputs())}, {"outputs", ids(g.outputs())}, {"nodes", nodes},
                       {"fusions", fusions}};
  const std::string text = header.dump();

  FileWriter out(path);
  if (!out.opened()) return invalid_argument("{}: cannot open for writing", path);
  std::string prefix(kMagic, 8);
  put<uint32_t>(prefix, kPlanFormatVersion);
  put<uint64_t>(prefix, text.size());
  out.write(prefix.data(), prefix.size());
  out.write(text.data(), text.size());
  const uint64_t blob_begin = (out.written() + kAlign - 1) / kAlign * kAlign;  // constants stay 64-byte aligned
  for (const Blob::Part& part : blob.parts) {
    out.pad_to(blob_begin + part.offset);
    out.write(part.data, part.bytes);
  }
  out.pad_to(blob_begin + blob.size);
  return out.finish();
}

namespace {

Result<DType> dtype_named(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64, DType::kI32, DType::kI8,
                  DType::kU8, DType::kBool})
    if (name == dtype_name(d)) return d;
  return invalid_argument("unknown dtype '{}'", name);
}

struct Reader {
  std::shared_ptr<const MappedFile> file;
  size_t blob_begin, blob_end;

  // A tensor viewing the file's bytes (kept mapped while the tensor lives).
  Result<Tensor> tensor(DType dtype, const Shape& shape, uint64_t offset) const {
    KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel_checked(shape));
    const uint64_t bytes = uint64_t(n) * dtype_size(dtype);
    if (offset % kAlign || offset > blob_end - blob_begin || bytes > blob_end - blob_begin - offset)
      return invalid_argument("constant data [{}, +{}) lies outside the file", offset, bytes);
    void* data = const_cast<uint8_t*>(file->data() + blob_begin + offset);
    return Tensor(dtype, shape, data, file);
  }
};

Result<AttributeValue> attribute_from_json(const json& j, const Reader& r) {
  if (!j.is_object() || j.size() != 1) return invalid_argument("malformed attribute");
  const std::string kind = j.begin().key();
  const json& v = j.begin().value();
  if (kind == "int") return AttributeValue(v.get<int64_t>());
  if (kind == "float") return AttributeValue(v.get<float>());
  if (kind == "string") return AttributeValue(v.get<std::string>());
  if (kind == "ints") return AttributeValue(v.get<std::vector<int64_t>>());
  if (kind == "floats") return AttributeValue(v.get<std::vector<float>>());
  if (kind == "strings") return AttributeValue(v.get<std::vector<std::string>>());
  if (kind == "tensor") {
    KILN_ASSIGN_OR_RETURN(DType dtype, dtype_named(v.at("dtype").get<std::string>()));
    KILN_ASSIGN_OR_RETURN(Tensor t, r.tensor(dtype, v.at("shape").get<Shape>(), v.at("offset").get<uint64_t>()));
    return AttributeValue(std::move(t));
  }
  return invalid_argument("unknown attribute kind '{}'", kind);
}

Result<Value*> value_at(const Graph& g, const json& id) {
  const int64_t i = id.get<int64_t>();
  if (i < 0 || size_t(i) >= g.values().size()) return invalid_argument("value index {} out of range", i);
  return g.values()[size_t(i)].get();
}

Result<std::vector<Value*>> values_at(const Graph& g, const json& ids, bool optional) {
  std::vector<Value*> out;
  for (const json& id : ids) {
    if (optional && id.get<int64_t>() == -1) {
      out.push_back(nullptr);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Value * v, value_at(g, id));
    out.push_back(v);
  }
  return out;
}

Result<Graph> graph_from_header(const json& h, const Reader& r) {
  Graph g;
  g.opset = h.at("opset").get<int64_t>();
  std::set<int64_t> inputs;
  for (const json& id : h.at("inputs")) inputs.insert(id.get<int64_t>());
  int64_t index = 0;
  for (const json& j : h.at("values")) {
    KILN_ASSIGN_OR_RETURN(DType dtype, dtype_named(j.at("dtype").get<std::string>()));
    std::optional<SymShape> shape;
    if (j.contains("shape")) {
      const Shape dims = j.at("shape").get<Shape>();
      KILN_RETURN_IF_ERROR(shape_numel_checked(dims).status());
      shape = sym_shape_from(dims);
    }
    Value* v = nullptr;
    const std::string name = j.at("name").get<std::string>();
    if (j.contains("constant")) {
      if (!shape) return invalid_argument("constant '{}' has no shape", name);
      KILN_ASSIGN_OR_RETURN(Tensor t, r.tensor(dtype, *sym_shape_concrete(*shape), j.at("constant").at("offset").get<uint64_t>()));
      v = g.add_constant(name, std::move(t));
    } else if (inputs.count(index)) {
      v = g.add_input(name, dtype, shape);
    } else {
      v = g.add_value(name);
      v->dtype = dtype;
      v->shape = shape;
    }
    ++index;
  }
  for (const json& n : h.at("nodes")) {
    const std::string op = n.at("op").get<std::string>();
    std::optional<OpKind> kind = op_from_name(op);
    if (!kind) return invalid_argument("unknown op '{}'", op);
    KILN_ASSIGN_OR_RETURN(auto ins, values_at(g, n.at("inputs"), true));
    KILN_ASSIGN_OR_RETURN(auto outs, values_at(g, n.at("outputs"), true));
    Attributes attrs;
    for (const auto& [name, value] : n.at("attrs").items()) {
      KILN_ASSIGN_OR_RETURN(AttributeValue a, attribute_from_json(value, r));
      attrs.set(name, std::move(a));
    }
    for (Value* out : outs)
      if (out && (out->producer || out->constant || out->is_input))
        return invalid_argument("value '{}' is written twice", out->name);
    g.add_node(*kind, n.at("name").get<std::string>(), std::move(ins), std::move(outs), std::move(attrs));
  }
  KILN_ASSIGN_OR_RETURN(auto outputs, values_at(g, h.at("outputs"), false));
  for (Value* v : outputs) g.mark_output(v);
  KILN_RETURN_IF_ERROR(graph_verify(g));
  KILN_RETURN_IF_ERROR(graph_infer_shapes(g));
  return g;
}

Result<PlanKey> key_from_json(const json& k) {
  return PlanKey{k.at("kiln_version").get<std::string>(),
                 k.at("isa").get<std::string>(),
                 k.at("precision").get<std::string>(),
                 k.at("model_path").get<std::string>(),
                 k.at("model_hash").get<std::string>(),
                 k.at("signature").get<std::string>(),
                 k.at("dims").get<std::map<std::string, int64_t>>(),
                 k.value("precision_policy", std::string()),  // absent in older files
                 k.value("disabled_passes", std::set<std::string>()),
                 k.value("model_component", std::string()),  // absent in older files: an ONNX file
                 k.value("model_variant", std::string())};
}

// The header of a whole, uncorrupted file, and where its constants lie.
Result<std::pair<json, Reader>> open_plan(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  const uint8_t* p = file->data();
  const size_t size = file->size();
  if (size < 8 || std::memcmp(p, kMagic, 8) != 0) return invalid_argument("not a kiln plan file");
  if (size < kPrefixBytes + 8) return invalid_argument("truncated plan file ({} bytes)", size);
  if (uint32_t version = get<uint32_t>(p + 8); version != kPlanFormatVersion)
    return invalid_argument("plan file format {} (this kiln reads {}): compile it again", version,
                            kPlanFormatVersion);
  if (get<uint64_t>(p + size - 8) != hash64(p, size - 8))
    return invalid_argument("corrupt or truncated plan file (checksum mismatch)");
  const uint64_t header_bytes = get<uint64_t>(p + 12);
  if (header_bytes > size - kPrefixBytes - 8) return invalid_argument("plan header runs past the file's end");
  json header = json::parse(p + kPrefixBytes, p + kPrefixBytes + header_bytes, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return invalid_argument("plan header is not JSON");
  const size_t blob_begin = (kPrefixBytes + header_bytes + kAlign - 1) / kAlign * kAlign;
  if (blob_begin > size - 8) return invalid_argument("truncated plan file");
  return std::pair{std::move(header), Reader{file, blob_begin, size - 8}};
}

}  // namespace

Result<PlanKey> read_plan_key(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto opened, open_plan(path));
  try {
    return key_from_json(opened.first.at("key"));
  } catch (const json::exception& e) {
    return invalid_argument("{}: malformed plan header ({})", path, e.what());
  }
}

Result<LoadedPlan> read_plan_file(const std::string& path) {
  auto loaded = [&]() -> Result<LoadedPlan> {
    KILN_ASSIGN_OR_RETURN(auto opened, open_plan(path));
    const auto& [header, reader] = opened;
    try {
      KILN_ASSIGN_OR_RETURN(PlanKey key, key_from_json(header.at("key")));
      if (key.kiln_version != KILN_VERSION_STRING)
        return invalid_argument("compiled by kiln {}, this is kiln {}: compile it again", key.kiln_version,
                                KILN_VERSION_STRING);
      if (key.isa != current_isa())
        return invalid_argument("compiled for ISA {}, this CPU runs {}: compile it again", key.isa, current_isa());
      KILN_ASSIGN_OR_RETURN(Graph graph, graph_from_header(header, reader));
      PlanOptions options;
      for (const PassInfo& p : pass_pipeline()) options.passes.disabled.insert(p.name);  // already optimized
      KILN_ASSIGN_OR_RETURN(auto plan, Plan::compile(std::move(graph), options));
      plan->set_pass_counts(header.at("fusions").get<std::map<std::string, int64_t>>());
      return LoadedPlan{std::move(plan), std::move(key)};
    } catch (const json::exception& e) {
      return invalid_argument("malformed plan header ({})", e.what());
    }
  }();
  if (!loaded.ok()) return loaded.status().with_context(path);
  return loaded;
}

}  // namespace kiln

namespace kiln {

Result<std::unique_ptr<Plan>> load_plan_file(const std::string& path, const Recompile& recompile,
                                             const std::function<void(const std::string&)>& note) {
  auto loaded = read_plan_file(path);
  if (loaded.ok()) return std::move(loaded->plan);
  auto key = read_plan_key(path);
  if (!key.ok()) return loaded.status();
  auto now = plan_key_for(key->model_path, key->signature, key->dims);
  if (now.ok()) {
    now->model_component = key->model_component;
    now->model_variant = key->model_variant;
  }
  if (!now.ok() || now->model_hash != key->model_hash) return loaded.status();
  now->precision = key->precision;
  now->precision_policy = key->precision_policy;
  now->disabled_passes = key->disabled_passes;
  note(fmt::format("{}; recompiling from {}", loaded.status().message(), key->model_path));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, recompile(*key));
  KILN_RETURN_IF_ERROR(write_plan_file(path, *plan, *now));
  return plan;
}

}  // namespace kiln
