// The tests' own device headers (tests/device/*.cuh), embedded for the JIT as "finegemm/tests/<name>.cuh".
#pragma once

#include "jit/embedded_headers.hpp"

namespace finegemm::test {

const jit::HeaderSet& test_headers();

}  // namespace finegemm::test
