// Result<T>: a value or an Error, shaped like std::expected (which GCC 12 offers only in C++23).
#pragma once

#include <utility>
#include <variant>

#include "common/check.h"
#include "common/error.h"

namespace cnlab {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool has_value() const { return state_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    CNLAB_CHECK_MSG(has_value(), "Result::value() on an error: " + error().to_string());
    return std::get<0>(state_);
  }
  const T& value() const& {
    CNLAB_CHECK_MSG(has_value(), "Result::value() on an error: " + error().to_string());
    return std::get<0>(state_);
  }
  T&& value() && {
    CNLAB_CHECK_MSG(has_value(), "Result::value() on an error: " + error().to_string());
    return std::get<0>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    CNLAB_CHECK(!has_value());
    return std::get<1>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

// Success or an Error, for operations with no value to return.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  static Status ok() { return {}; }

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    CNLAB_CHECK(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace cnlab
