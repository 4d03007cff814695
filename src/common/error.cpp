#include "common/error.hpp"

namespace finegemm {

Error::Error(Kind kind, std::string where, std::string message)
    : std::runtime_error("finegemm: " + where + ": " + message),
      kind_(kind),
      where_(std::move(where)),
      message_(std::move(message)) {}

}  // namespace finegemm
