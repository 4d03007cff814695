// The diff metric of DESIGN.md section 4 and the element-wise checks of bf16 and fp32 outputs.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/reference.hpp"

namespace finegemm::reference {

namespace {

constexpr double kBf16HalfUlpRelative = 0x1p-8;  // RNE to 8 significant bits errs by at most 2^-8 relative
constexpr double kF32HalfUlpRelative = 0x1p-24;  // RNE to 24 significant bits errs by at most 2^-24 relative
// fp32 outputs: the kernel's add of C after the product's error and the reference's own fp64 rounding (reference.hpp).
constexpr double kF32BoundSlack = 1.0 + 0x1p-23;

}  // namespace

double diff_metric(const double* x, const double* y, int64_t n) {
  if (n < 0 || (n > 0 && (x == nullptr || y == nullptr)))
    throw std::invalid_argument("finegemm::reference::diff_metric: bad arguments");
  double sum_sq_diff = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - y[i];
    sum_sq_diff += d * d;
    sum_sq += x[i] * x[i] + y[i] * y[i];
  }
  if (sum_sq == 0.0 && sum_sq_diff == 0.0) return 0.0;
  return sum_sq_diff / sum_sq;
}

namespace {

/// The element-wise check shared by the bf16 and fp32 outputs: `decode(i, j)` gives out[i, j] as a double, the bound
/// is slack * (rounding * |ref| + accum_tolerance * magnitude).
template <class Decode>
CheckResult check_output(const Decode& decode, const double* ref, const double* abs_sum, int64_t m, int64_t n,
                         double max_diff, double accum_tolerance, double rounding, double slack) {
  CheckResult result;
  result.n = n;
  double sum_sq_diff = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t idx = i * n + j;
      const double out = decode(i, j);
      const double r = ref[idx];
      const double err = std::fabs(out - r);
      sum_sq_diff += (out - r) * (out - r);
      sum_sq += out * out + r * r;
      bool bad = !std::isfinite(out);
      if (!bad) {
        const double magnitude = abs_sum != nullptr ? abs_sum[idx] : std::fabs(r);
        const double bound = slack * (rounding * std::fabs(r) + accum_tolerance * magnitude);
        bad = !(err <= bound);
        result.max_abs_err = std::max(result.max_abs_err, err);
        if (r != 0.0) result.max_rel_err = std::max(result.max_rel_err, err / std::fabs(r));
        const double ratio = bound > 0.0 ? err / bound : (err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
        result.max_err_ratio = std::max(result.max_err_ratio, ratio);
      }
      if (bad) {
        if (result.num_bad == 0) {
          result.first_bad = idx;
          result.first_out = out;
          result.first_ref = r;
        }
        ++result.num_bad;
      }
    }
  }
  result.diff = (sum_sq == 0.0 && sum_sq_diff == 0.0) ? 0.0 : sum_sq_diff / sum_sq;
  result.ok = result.num_bad == 0 && result.diff <= max_diff;
  return result;
}

void check_arguments(const void* out, int64_t ld_out, const double* ref, int64_t m, int64_t n, const char* fn) {
  if (m < 0 || n < 0 || ld_out < n || (m * n > 0 && (out == nullptr || ref == nullptr)))
    throw std::invalid_argument(std::string("finegemm::reference::") + fn + ": bad arguments (m=" + std::to_string(m) +
                                ", n=" + std::to_string(n) + ", ld_out=" + std::to_string(ld_out) + ")");
}

}  // namespace

CheckResult check_bf16_output(const uint16_t* out_bf16, int64_t ld_out, const double* ref, const double* abs_sum,
                              int64_t m, int64_t n, double max_diff, double accum_tolerance) {
  check_arguments(out_bf16, ld_out, ref, m, n, "check_bf16_output");
  const auto decode = [&](int64_t i, int64_t j) { return double(bf16_to_float(out_bf16[i * ld_out + j])); };
  return check_output(decode, ref, abs_sum, m, n, max_diff, accum_tolerance, kBf16HalfUlpRelative, 1.0);
}

CheckResult check_f32_output(const float* out, int64_t ld_out, const double* ref, const double* abs_sum, int64_t m,
                             int64_t n, double max_diff, double accum_tolerance) {
  check_arguments(out, ld_out, ref, m, n, "check_f32_output");
  const auto decode = [&](int64_t i, int64_t j) { return double(out[i * ld_out + j]); };
  return check_output(decode, ref, abs_sum, m, n, max_diff, accum_tolerance, kF32HalfUlpRelative,
                      kF32BoundSlack);
}

std::string CheckResult::summary() const {
  char buffer[512];
  if (num_bad == 0) {
    std::snprintf(buffer, sizeof(buffer), "%s: diff %.3e, max abs err %.3e, max rel err %.3e, max err/bound %.3f",
                  ok ? "ok" : "FAILED (diff too large)", diff, max_abs_err, max_rel_err, max_err_ratio);
  } else {
    const int64_t row = n > 0 ? first_bad / n : 0, col = n > 0 ? first_bad % n : 0;
    std::snprintf(buffer, sizeof(buffer),
                  "FAILED: %lld bad elements, first at (%lld, %lld): out %.9g, ref %.9g%s; diff %.3e, max abs err "
                  "%.3e, max err/bound %.3f",
                  static_cast<long long>(num_bad), static_cast<long long>(row), static_cast<long long>(col), first_out,
                  first_ref, std::isnan(first_out) ? " (NaN: unwritten or poisoned?)" : "", diff, max_abs_err,
                  max_err_ratio);
  }
  return buffer;
}

}  // namespace finegemm::reference
