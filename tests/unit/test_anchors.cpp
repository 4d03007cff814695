// The bench's anchor figures (data/anchors/*.csv): which column each ratio divides by, for dense and grouped rows.
#include <gtest/gtest.h>

#include "../../tools/lib/shapes.hpp"

namespace ft = finegemm::tools;
using finegemm::GemmKind;

namespace {

ft::Anchors shipped() {
  ft::Anchors a;
  a.load_normal(std::string(FINEGEMM_SOURCE_DIR) + "/data/anchors/h100_normal.csv");
  a.load_grouped(std::string(FINEGEMM_SOURCE_DIR) + "/data/anchors/h100_grouped.csv");
  return a;
}

}  // namespace

TEST(Anchors, DenseRowsCarryBestCublasltAndDeepGemmColumns) {
  const ft::Anchors a = shipped();
  const ft::ProblemShape s{GemmKind::kNormal, 1, 4096, 7168, 16384};
  EXPECT_DOUBLE_EQ(a.best_tflops(s), 1520);
  EXPECT_DOUBLE_EQ(a.cublaslt_tflops(s), 1325);
  EXPECT_DOUBLE_EQ(a.deepgemm_h100_tflops(s), 1478);
  const ft::ProblemShape small{GemmKind::kNormal, 1, 64, 7168, 2048};
  EXPECT_DOUBLE_EQ(a.best_tflops(small), 295);  // DeepGEMM's published H800 figure
  EXPECT_DOUBLE_EQ(a.deepgemm_h100_tflops(small), 197);
}

TEST(Anchors, GroupedRowsHaveNoCublasltFigure) {
  const ft::Anchors a = shipped();
  const ft::ProblemShape contiguous{GemmKind::kGroupedContiguous, 4, 8192, 4096, 7168};
  EXPECT_DOUBLE_EQ(a.best_tflops(contiguous), 1406);
  EXPECT_DOUBLE_EQ(a.deepgemm_h100_tflops(contiguous), 1406);
  EXPECT_DOUBLE_EQ(a.cublaslt_tflops(contiguous), 0);
  const ft::ProblemShape masked{GemmKind::kGroupedMasked, 1, 1024, 4096, 7168};
  EXPECT_DOUBLE_EQ(a.best_tflops(masked), 1233);
  EXPECT_DOUBLE_EQ(a.deepgemm_h100_tflops(masked), 1112);
}

TEST(Anchors, ShapesNotListedHaveNoFigures) {
  const ft::Anchors a = shipped();
  const ft::ProblemShape s{GemmKind::kNormal, 1, 100, 7168, 2048};
  EXPECT_DOUBLE_EQ(a.best_tflops(s), 0);
  EXPECT_DOUBLE_EQ(a.deepgemm_h100_tflops(s), 0);
  const ft::ProblemShape wrong_kind{GemmKind::kGroupedMasked, 4, 8192, 4096, 7168};  // listed as contiguous only
  EXPECT_DOUBLE_EQ(a.best_tflops(wrong_kind), 0);
}
