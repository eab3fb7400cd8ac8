// Status: the cheap error value every kiln library function returns.
//
// Library code never throws; it returns a Status (or a Result<T>) whose message
// names what is wrong and where ("model.onnx: node 'conv1' (Conv): ...").
// Only the CLI turns a Status into a printed line and an exit code.
//
//   Result<Tensor> t = npy_read(path);
//   if (!t.ok()) return t.status();
//   KILN_ASSIGN_OR_RETURN(Tensor t2, npy_read(path));
//   KILN_RETURN_IF_ERROR(check_shape(t2));
#pragma once

#include <fmt/format.h>

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace kiln {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input: malformed file, wrong shape, bad flag
  kUnsupported,      // valid input that kiln does not implement (op, dtype, mode)
  kNotFound,         // missing file or name
  kResourceExhausted,  // a size past what the machine or the input justifies
  kCancelled,        // stopped on request (a server's cancel, between denoise steps)
  kInternal,         // a kiln bug
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : rep_(code == StatusCode::kOk ? nullptr
                                     : std::make_shared<Rep>(Rep{code, std::move(message)})) {}

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;

  // Prefixes context ("file.onnx: ") so errors read outermost-first.
  Status with_context(std::string_view context) const;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when ok: an ok Status costs one pointer
};

inline Status ok_status() { return Status(); }

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unsupported(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnsupported, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a T or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status status) : status_(std::move(status)) { assert(!status_.ok()); }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace kiln

#define KILN_CONCAT_IMPL(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_IMPL(a, b)

#define KILN_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::kiln::Status kiln_status_ = (expr);     \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(result, lhs, expr) \
  auto result = (expr);                               \
  if (!result.ok()) return result.status();           \
  lhs = std::move(result).value()

#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_result_, __LINE__), lhs, expr)

// Checks a condition on input data; on failure returns InvalidArgument.
#define KILN_CHECK_ARG(cond, ...)                              \
  do {                                                         \
    if (!(cond)) return ::kiln::invalid_argument(__VA_ARGS__); \
  } while (0)
