// The header is a Python dict literal; kiln reads the three keys numpy writes
// ('descr', 'fortran_order', 'shape') with a small strict parser and rejects
// anything else rather than guessing.
#include "npy/npy.h"

#include <fmt/ranges.h>

#include <cctype>
#include <cstring>

#include "core/mapped_file.h"

namespace kiln {

namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct Descr {
  const char* text;
  DType dtype;
};
// Little-endian ('<') or byte-order-free ('|') descriptors only.
constexpr Descr kDescrs[] = {
    {"<f4", DType::kF32}, {"<f8", DType::kF64}, {"<f2", DType::kF16}, {"<i8", DType::kI64},
    {"<i4", DType::kI32}, {"|i1", DType::kI8},  {"|u1", DType::kU8},  {"|b1", DType::kBool},
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& label) : s_(text), label_(label) {}

  Status parse(DType* dtype, Shape* shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    KILN_RETURN_IF_ERROR(expect('{'));
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key;
      KILN_RETURN_IF_ERROR(parse_string(&key));
      skip_space();
      KILN_RETURN_IF_ERROR(expect(':'));
      skip_space();
      if (key == "descr") {
        std::string d;
        KILN_RETURN_IF_ERROR(parse_string(&d));
        bool found = false;
        for (const Descr& e : kDescrs)
          if (d == e.text) {
            *dtype = e.dtype;
            found = true;
          }
        if (!found) return unsupported("{}: .npy dtype '{}' is not supported", label_, d);
        have_descr = true;
      } else if (key == "fortran_order") {
        if (s_.substr(pos_, 5) == "False") {
          pos_ += 5;
        } else if (s_.substr(pos_, 4) == "True") {
          return unsupported("{}: Fortran-order .npy arrays are not supported", label_);
        } else {
          return error("fortran_order must be True or False");
        }
        have_order = true;
      } else if (key == "shape") {
        KILN_RETURN_IF_ERROR(parse_shape(shape));
        have_shape = true;
      } else {
        return error(fmt::format("unexpected key '{}'", key));
      }
      skip_space();
      if (peek() == ',') ++pos_;
    }
    if (!have_descr || !have_order || !have_shape)
      return error("header lacks one of 'descr', 'fortran_order', 'shape'");
    return ok_status();
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n')) ++pos_;
  }
  Status error(std::string_view what) const {
    return invalid_argument("{}: malformed .npy header: {}", label_, what);
  }
  Status expect(char c) {
    if (peek() != c) return error(fmt::format("expected '{}' at offset {}", c, pos_));
    ++pos_;
    return ok_status();
  }
  Status parse_string(std::string* out) {
    char q = peek();
    if (q != '\'' && q != '"') return error("expected a quoted string");
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) return error("unterminated string");
    *out = std::string(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return ok_status();
  }
  Status parse_shape(Shape* shape) {
    KILN_RETURN_IF_ERROR(expect('('));
    shape->clear();
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return error("bad shape");
      int64_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (d > (int64_t(1) << 50)) return error("dimension too large");
        d = d * 10 + (s_[pos_++] - '0');
      }
      shape->push_back(d);
      if (shape->size() > 32) return error("more than 32 dimensions");
      skip_space();
      if (peek() == ',') ++pos_;
      else if (peek() != ')') return error("bad shape");
    }
    return ok_status();
  }

  std::string_view s_;
  const std::string& label_;
  size_t pos_ = 0;
};

std::string descr_of(DType d) {
  for (const Descr& e : kDescrs)
    if (e.dtype == d) return e.text;
  return "<u2";  // bf16 has no numpy dtype: stored as raw 16-bit patterns
}

}  // namespace

Result<Tensor> npy_parse(const void* data, size_t size, const std::string& label) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (size < 10 || std::memcmp(p, kMagic, 6) != 0)
    return invalid_argument("{}: not a .npy file (bad magic)", label);
  uint8_t major = p[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = size_t(p[8]) | size_t(p[9]) << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return invalid_argument("{}: truncated .npy header", label);
    header_len = size_t(p[8]) | size_t(p[9]) << 8 | size_t(p[10]) << 16 | size_t(p[11]) << 24;
    header_start = 12;
  } else {
    return unsupported("{}: .npy format version {} is not supported", label, int(major));
  }
  if (header_len > size - header_start) return invalid_argument("{}: truncated .npy header", label);
  std::string_view header(reinterpret_cast<const char*>(p + header_start), header_len);
  DType dtype = DType::kF32;
  Shape shape;
  KILN_RETURN_IF_ERROR(HeaderParser(header, label).parse(&dtype, &shape));
  auto n = shape_numel_checked(shape);
  if (!n.ok()) return n.status().with_context(label);
  size_t bytes = size_t(*n) * dtype_size(dtype);
  size_t offset = header_start + header_len;
  if (size - offset != bytes)
    return invalid_argument("{}: .npy data is {} bytes, shape {} of {} needs {}", label,
                            size - offset, shape_to_string(shape), dtype_name(dtype), bytes);
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, std::move(shape)));
  std::memcpy(t.raw(), p + offset, bytes);
  if (dtype == DType::kBool)
    for (int64_t i = 0; i < t.numel(); ++i)  // any nonzero byte is true; keep bools canonical
      t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  return t;
}

Result<Tensor> npy_read(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return npy_parse(file->data(), file->size(), path);
}

std::string npy_serialize(const Tensor& t) {
  // Python tuple syntax: "()", "(3,)", "(2, 3)".
  std::string shape = fmt::format("{}", fmt::join(t.shape(), ", "));
  if (t.rank() == 1) shape += ",";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   descr_of(t.dtype()), shape);
  // Pad so the data starts 64-byte aligned, as numpy does; end with '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, 6);
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

Status npy_write(const std::string& path, const Tensor& tensor) {
  return write_file(path, npy_serialize(tensor));
}

}  // namespace kiln
