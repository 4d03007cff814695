// Argument checks that throw finegemm::Error with a message a user can act on.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "finegemm/finegemm.hpp"

namespace finegemm {

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
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
