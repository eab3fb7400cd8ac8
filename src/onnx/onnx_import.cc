// Stages: parse the protobuf (size-limited) -> check opsets -> tensors
// (initializers, Constant nodes) -> graph inputs with dynamic axes -> nodes
// (op lookup, attributes) -> outputs -> verify, infer shapes.
#include "onnx/onnx_import.h"

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/mapped_file.h"
#include "ir/shape_inference.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

Result<DType> dtype_from_onnx(int32_t t, std::string_view what) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::DOUBLE: return DType::kF64;
    case onnx::TensorProto::FLOAT16: return DType::kF16;
    case onnx::TensorProto::BFLOAT16: return DType::kBF16;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::INT8: return DType::kI8;
    case onnx::TensorProto::UINT8: return DType::kU8;
    case onnx::TensorProto::BOOL: return DType::kBool;
    default:
      if (onnx::TensorProto::DataType_IsValid(t) && t != 0)
        return unsupported("{}: element type {} is not supported", what,
                           onnx::TensorProto::DataType_Name(t));
      return invalid_argument("{}: invalid element type {}", what, t);
  }
}

// Rejects dims a file could use to request a huge allocation or overflow.
Result<Shape> dims_from_proto(const onnx::TensorProto& t, std::string_view what) {
  Shape shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0) return invalid_argument("{}: negative dimension {}", what, d);
  auto n = shape_numel_checked(shape);
  if (!n.ok()) return n.status().with_context(what);
  return shape;
}

// Memory-maps each external data file once per import.
class ExternalFiles {
 public:
  explicit ExternalFiles(std::string base_dir) : base_dir_(std::move(base_dir)) {}

  Result<std::shared_ptr<const MappedFile>> get(const std::string& location, std::string_view what) {
    fs::path rel(location);
    if (location.empty() || rel.is_absolute())
      return invalid_argument("{}: external data location '{}' must be a relative path", what, location);
    for (const auto& part : rel)
      if (part == "..")
        return invalid_argument("{}: external data location '{}' leaves the model folder", what, location);
    auto it = files_.find(location);
    if (it != files_.end()) return it->second;
    if (base_dir_.empty())
      return invalid_argument("{}: external data '{}' but the model has no folder", what, location);
    auto file = MappedFile::open((fs::path(base_dir_) / rel).string());
    if (!file.ok()) return file.status().with_context(fmt::format("{}: external data", what));
    files_.emplace(location, *file);
    return *file;
  }

 private:
  std::string base_dir_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;
};

Result<uint64_t> parse_u64(const std::string& s, std::string_view what) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("{}: '{}' is not a valid external data offset/length", what, s);
  return std::stoull(s);
}

Result<Tensor> external_tensor(const onnx::TensorProto& t, DType dtype, Shape shape,
                               ExternalFiles* files, std::string_view what) {
  if (!files) return invalid_argument("{}: external data is not allowed here", what);
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") { KILN_ASSIGN_OR_RETURN(offset, parse_u64(kv.value(), what)); }
    else if (kv.key() == "length") { KILN_ASSIGN_OR_RETURN(length, parse_u64(kv.value(), what)); }
  }
  KILN_ASSIGN_OR_RETURN(auto file, files->get(location, what));
  uint64_t bytes = uint64_t(shape_numel(shape)) * dtype_size(dtype);
  if (length && *length != bytes)
    return invalid_argument("{}: external data length {} does not match shape {} ({} bytes)", what,
                            *length, shape_to_string(shape), bytes);
  if (offset > file->size() || bytes > file->size() - offset)
    return invalid_argument("{}: external data [{}, {}) lies past the end of '{}' ({} bytes)", what,
                            offset, offset + bytes, location, file->size());
  const uint8_t* p = file->data() + offset;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0) {
    // Zero copy: the tensor views the mapping and keeps the file mapped.
    return Tensor(dtype, std::move(shape), const_cast<uint8_t*>(p), file);
  }
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, std::move(shape)));  // misaligned: copy
  std::memcpy(out.raw(), p, bytes);
  return out;
}

template <typename Field>
Status check_count(const Field& field, int64_t n, std::string_view what, std::string_view name) {
  if (int64_t(field.size()) != n)
    return invalid_argument("{}: {} has {} values, shape needs {}", what, name, field.size(), n);
  return ok_status();
}

Result<Tensor> tensor_from_proto(const onnx::TensorProto& t, ExternalFiles* files,
                                 std::string_view what) {
  KILN_ASSIGN_OR_RETURN(DType dtype, dtype_from_onnx(t.data_type(), what));
  KILN_ASSIGN_OR_RETURN(Shape shape, dims_from_proto(t, what));
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return external_tensor(t, dtype, std::move(shape), files, what);
  int64_t n = shape_numel(shape);
  size_t bytes = size_t(n) * dtype_size(dtype);
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes)
      return invalid_argument("{}: raw_data has {} bytes, shape {} of {} needs {}", what,
                              t.raw_data().size(), shape_to_string(shape), dtype_name(dtype), bytes);
    KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, std::move(shape)));
    std::memcpy(out.raw(), t.raw_data().data(), bytes);
    return out;
  }
  // Count the typed values before allocating, so a tiny file cannot claim a
  // huge tensor.
  switch (dtype) {
    case DType::kF32: KILN_RETURN_IF_ERROR(check_count(t.float_data(), n, what, "float_data")); break;
    case DType::kF64: KILN_RETURN_IF_ERROR(check_count(t.double_data(), n, what, "double_data")); break;
    case DType::kI64: KILN_RETURN_IF_ERROR(check_count(t.int64_data(), n, what, "int64_data")); break;
    default: KILN_RETURN_IF_ERROR(check_count(t.int32_data(), n, what, "int32_data")); break;
  }
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, std::move(shape)));
  switch (dtype) {
    case DType::kF32: std::copy(t.float_data().begin(), t.float_data().end(), out.data<float>()); break;
    case DType::kF64: std::copy(t.double_data().begin(), t.double_data().end(), out.data<double>()); break;
    case DType::kI64: std::copy(t.int64_data().begin(), t.int64_data().end(), out.data<int64_t>()); break;
    default:
      // i32, i8, u8, bool and the 16-bit floats' bit patterns live in int32_data.
      for (int64_t i = 0; i < n; ++i) {
        int32_t v = t.int32_data(int(i));
        switch (dtype) {
          case DType::kI32: out.data<int32_t>()[i] = v; break;
          case DType::kI8: out.data<int8_t>()[i] = int8_t(v); break;
          case DType::kU8: out.data<uint8_t>()[i] = uint8_t(v); break;
          case DType::kBool: out.data<bool>()[i] = v != 0; break;
          case DType::kF16: out.data<f16>()[i] = f16{uint16_t(v)}; break;
          case DType::kBF16: out.data<bf16>()[i] = bf16{uint16_t(v)}; break;
          default: return internal_error("{}: unhandled dtype", what);
        }
      }
  }
  return out;
}

Result<AttributeValue> attribute_from_proto(const onnx::AttributeProto& a, std::string_view what) {
  switch (a.type()) {
    case onnx::AttributeProto::INT: return AttributeValue(int64_t(a.i()));
    case onnx::AttributeProto::FLOAT: return AttributeValue(a.f());
    case onnx::AttributeProto::STRING: return AttributeValue(a.s());
    case onnx::AttributeProto::INTS:
      return AttributeValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case onnx::AttributeProto::FLOATS:
      return AttributeValue(std::vector<float>(a.floats().begin(), a.floats().end()));
    case onnx::AttributeProto::STRINGS:
      return AttributeValue(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case onnx::AttributeProto::TENSOR: {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(a.t(), nullptr, what));
      return AttributeValue(std::move(t));
    }
    case onnx::AttributeProto::GRAPH:
    case onnx::AttributeProto::GRAPHS:
      return unsupported("{}: graph attributes (control flow) are not supported", what);
    default:
      return invalid_argument("{}: attribute '{}' has unsupported type {}", what, a.name(),
                              int(a.type()));
  }
}

// Ops whose older versions mean something else than the version kiln
// implements: a model using an older opset for them is Unsupported.
int64_t min_supported_version(OpKind op) {
  switch (op) {
    case OpKind::kSoftmax: return 13;  // before 13: coerced to 2-D
    case OpKind::kSlice: return 10;    // before 10: starts/ends as attributes
    case OpKind::kPad: return 11;      // before 11: pads as attribute
    case OpKind::kClip: return 11;     // before 11: min/max as attributes
    case OpKind::kResize: return 11;   // 10: scales only, different modes
    case OpKind::kReshape: return 5;   // before 5: shape attribute
    case OpKind::kConstantOfShape: return 9;
    default: return 1;
  }
}

Result<std::optional<SymShape>> shape_from_type(const onnx::TypeProto& type, std::string_view what) {
  if (!type.tensor_type().has_shape()) return std::optional<SymShape>();
  SymShape shape;
  for (const auto& d : type.tensor_type().shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return invalid_argument("{}: negative dimension {}", what, d.dim_value());
      shape.push_back(Dim(d.dim_value()));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      shape.push_back(Dim::named(d.dim_param()));
    } else {
      shape.push_back(Dim());
    }
  }
  Shape known;
  for (const Dim& d : shape)
    if (d.known()) known.push_back(d.value);
  if (auto n = shape_numel_checked(known); !n.ok()) return n.status().with_context(what);
  return std::optional<SymShape>(std::move(shape));
}

// Consumes the initializers' raw bytes as it copies them into tensors, so a
// model's weights are held about once, not twice, while it is imported.
Result<Graph> graph_from_model(onnx::ModelProto& model, const std::string& label, ExternalFiles* files) {
  Graph g;
  g.name = model.graph().name();
  bool has_default_domain = false;
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") {
      has_default_domain = true;
      g.opset = op.version();
    }
  }
  if (has_default_domain && (g.opset < kOnnxMinOpset || g.opset > kOnnxMaxOpset))
    return unsupported("{}: opset {} is not supported (kiln reads {}..{})", label, g.opset,
                       kOnnxMinOpset, kOnnxMaxOpset);

  const onnx::GraphProto& gp = model.graph();
  for (auto& init : *model.mutable_graph()->mutable_initializer()) {
    std::string what = fmt::format("initializer '{}'", init.name());
    if (init.name().empty()) return invalid_argument("{}: an initializer has no name", label);
    if (g.find_value(init.name())) return invalid_argument("{}: {} is defined twice", label, what);
    auto t = tensor_from_proto(init, files, what);
    if (!t.ok()) return t.status().with_context(label);
    g.add_constant(init.name(), std::move(t).value());
    std::string().swap(*init.mutable_raw_data());  // its copy is the tensor now
  }
  for (const auto& in : gp.input()) {
    if (g.find_value(in.name())) continue;  // old exporters list initializers as inputs too
    std::string what = fmt::format("input '{}'", in.name());
    if (in.name().empty()) return invalid_argument("{}: a graph input has no name", label);
    if (!in.type().has_tensor_type())
      return unsupported("{}: {} is not a tensor", label, what);
    auto dtype = dtype_from_onnx(in.type().tensor_type().elem_type(), what);
    if (!dtype.ok()) return dtype.status().with_context(label);
    auto shape = shape_from_type(in.type(), what);
    if (!shape.ok()) return shape.status().with_context(label);
    g.add_input(in.name(), *dtype, std::move(shape).value());
  }

  // ONNX requires nodes in topological order: a node reading a value that a
  // later node produces is an error (that is also how a cycle shows up).
  std::unordered_set<std::string_view> produced_later;
  for (const auto& np : gp.node())
    for (const auto& out_name : np.output()) produced_later.insert(out_name);
  int node_index = 0;
  for (const auto& np : gp.node()) {
    std::string name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), node_index) : np.name();
    ++node_index;
    std::string what = fmt::format("node '{}' ({})", name, np.op_type());
    if (!np.domain().empty() && np.domain() != "ai.onnx")
      return unsupported("{}: {}: op domain '{}' is not supported", label, what, np.domain());
    if (!has_default_domain)
      return invalid_argument("{}: {}: the model imports no default-domain opset", label, what);
    if (np.op_type() == "Constant") {
      if (np.output_size() != 1 || np.output(0).empty())
        return invalid_argument("{}: {}: needs exactly one output", label, what);
      if (g.find_value(np.output(0)))
        return invalid_argument("{}: {}: output '{}' is defined twice", label, what, np.output(0));
      if (np.attribute_size() != 1) return invalid_argument("{}: {}: needs exactly one attribute", label, what);
      const onnx::AttributeProto* value = &np.attribute(0);
      Result<Tensor> t = internal_error("unset");
      if (value->name() == "value") {
        t = tensor_from_proto(value->t(), nullptr, what);
      } else if (value->name() == "value_float") {
        t = Tensor::from_vector<float>({}, {value->f()});
      } else if (value->name() == "value_floats") {
        t = Tensor::from_vector<float>({int64_t(value->floats_size())},
                                       {value->floats().begin(), value->floats().end()});
      } else if (value->name() == "value_int") {
        t = Tensor::from_vector<int64_t>({}, {value->i()});
      } else if (value->name() == "value_ints") {
        t = Tensor::from_vector<int64_t>({int64_t(value->ints_size())},
                                         {value->ints().begin(), value->ints().end()});
      } else {
        return unsupported("{}: {}: attribute '{}' is not supported", label, what, value->name());
      }
      if (!t.ok()) return t.status().with_context(label);
      g.add_constant(np.output(0), std::move(t).value());
      continue;
    }
    std::optional<OpKind> op = op_from_onnx_name(np.op_type());
    if (!op) return unsupported("{}: {}: unknown op '{}'", label, what, np.op_type());
    if (g.opset < min_supported_version(*op))
      return unsupported("{}: {}: opset {} form of {} is not supported (needs opset >= {})", label,
                         what, g.opset, np.op_type(), min_supported_version(*op));
    std::vector<Value*> inputs;
    for (const auto& in_name : np.input()) {
      if (in_name.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      Value* v = g.find_value(in_name);
      if (!v && produced_later.count(in_name))
        return invalid_argument("{}: {}: input '{}' is produced by a later node (nodes must be in "
                                "topological order; is there a cycle?)", label, what, in_name);
      if (!v) return invalid_argument("{}: {}: input '{}' is not defined", label, what, in_name);
      inputs.push_back(v);
    }
    std::vector<Value*> outputs;
    for (const auto& out_name : np.output()) {
      if (out_name.empty()) {
        outputs.push_back(nullptr);
        continue;
      }
      if (g.find_value(out_name))
        return invalid_argument("{}: {}: output '{}' is defined twice", label, what, out_name);
      outputs.push_back(g.add_value(out_name));
    }
    Attributes attrs;
    for (const auto& a : np.attribute()) {
      auto v = attribute_from_proto(a, what);
      if (!v.ok()) return v.status().with_context(label);
      attrs.set(a.name(), std::move(v).value());
    }
    g.add_node(*op, name, std::move(inputs), std::move(outputs), std::move(attrs));
  }

  for (const auto& out : gp.output()) {
    Value* v = g.find_value(out.name());
    if (!v) return invalid_argument("{}: graph output '{}' is never produced", label, out.name());
    g.mark_output(v);
  }
  if (g.outputs().empty()) return invalid_argument("{}: graph has no outputs", label);

  if (Status s = graph_verify(g); !s.ok()) return s.with_context(label);
  if (Status s = graph_infer_shapes(g); !s.ok()) return s.with_context(label);
  return g;
}

Status check_model_size(size_t size, const std::string& label) {
  if (size > size_t(INT32_MAX))
    return invalid_argument("{}: {} bytes is past protobuf's 2 GB limit (use external data)", label, size);
  return ok_status();
}

Result<onnx::ModelProto> checked_model(onnx::ModelProto model, bool parsed, const std::string& label) {
  if (!parsed) return invalid_argument("{}: not a valid ONNX model (protobuf parse failed)", label);
  if (!model.has_graph()) return invalid_argument("{}: not a valid ONNX model (no graph)", label);
  return model;
}

Result<onnx::ModelProto> parse_model(const void* data, size_t size, const std::string& label) {
  KILN_RETURN_IF_ERROR(check_model_size(size, label));
  onnx::ModelProto model;
  const bool parsed = model.ParseFromArray(data, int(size));
  return checked_model(std::move(model), parsed, label);
}

// Read through a file descriptor rather than mapped: the file's pages then
// stay in the page cache, not in this process's resident memory next to the
// parsed copy.
Result<onnx::ModelProto> parse_model_file(const std::string& path) {
  size_t size = 0;
  KILN_ASSIGN_OR_RETURN(const int fd, open_regular_file(path, &size));
  if (Status s = check_model_size(size, path); !s.ok()) {
    ::close(fd);
    return s;
  }
  onnx::ModelProto model;
  bool parsed;
  {
    google::protobuf::io::FileInputStream in(fd);
    parsed = model.ParseFromZeroCopyStream(&in);
  }
  ::close(fd);
  return checked_model(std::move(model), parsed, path);
}

}  // namespace

Result<Graph> onnx_import_bytes(const void* data, size_t size, const std::string& label,
                                const std::string& base_dir) {
  KILN_ASSIGN_OR_RETURN(onnx::ModelProto model, parse_model(data, size, label));
  ExternalFiles files(base_dir);
  return graph_from_model(model, label, &files);
}

Result<Graph> onnx_import_file(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(onnx::ModelProto model, parse_model_file(path));
  const std::string base = fs::path(path).parent_path().string();
  ExternalFiles files(base.empty() ? "." : base);
  return graph_from_model(model, path, &files);
}

Result<Tensor> onnx_parse_tensor_bytes(const void* data, size_t size, const std::string& label) {
  if (size > size_t(INT32_MAX)) return invalid_argument("{}: file too large for a TensorProto", label);
  onnx::TensorProto t;
  if (!t.ParseFromArray(data, int(size)))
    return invalid_argument("{}: not a valid ONNX TensorProto", label);
  auto out = tensor_from_proto(t, nullptr, "tensor");
  if (!out.ok()) return out.status().with_context(label);
  return out;
}

Result<Tensor> onnx_read_tensor_file(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return onnx_parse_tensor_bytes(file->data(), file->size(), path);
}

}  // namespace kiln
