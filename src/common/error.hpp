// Argument checks that throw finegemm::Error with a message a user can act on.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "finegemm/finegemm.hpp"

namespace finegemm {

namespace detail {
/// A part of a message; a TensorView is described here, when a message is built, so that a check that passes (a warm
/// call's) formats nothing: pass the view itself, not its describe().
inline void append(std::ostream& os, const TensorView& t) { os << t.describe(); }
template <typename T>
void append(std::ostream& os, const T& part) {
  os << part;
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (append(os, args), ...);
  return os.str();
}
}  // namespace detail

/// Throws Error(kind, where, message...) when `condition` is false.
template <typename... Args>
void check(bool condition, Error::Kind kind, const char* where, Args&&... message) {
  if (!condition) [[unlikely]]
    throw Error(kind, where, detail::concat(std::forward<Args>(message)...));
}

template <typename... Args>
void check_arg(bool condition, const char* where, Args&&... message) {
  check(condition, Error::Kind::kInvalidArgument, where, std::forward<Args>(message)...);
}

template <typename... Args>
[[noreturn]] void fail(Error::Kind kind, const char* where, Args&&... message) {
  throw Error(kind, where, detail::concat(std::forward<Args>(message)...));
}

}  // namespace finegemm
