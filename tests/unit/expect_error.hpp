// Shared by the validation tests: `f` must throw finegemm::Error of `kind` whose message contains `needle`.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "finegemm/finegemm.hpp"

namespace finegemm::test {

inline void expect_error(const std::function<void()>& f, Error::Kind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace finegemm::test
