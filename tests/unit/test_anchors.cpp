// The bench's anchor figures (data/anchors/*.csv): which column each ratio divides by, for dense and grouped rows; and
// the shapes it sets aside because no kernel configuration fits them.
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

TEST(Shapes, UnsupportedShapesAreSetAsideWithTheirReason) {
  std::vector<ft::ProblemShape> shapes = ft::parse_shapes(
      "kind,groups,m,n,k\n"
      "normal,1,64,7168,2048\n"
      "normal,1,64,1001,2048\n"    // N not a multiple of 8
      "masked,4,256,4096,7168\n"
      "normal,1,128,4096,100\n",   // K not a multiple of 16
      "test");
  const std::vector<ft::UnsupportedShape> removed = ft::remove_unsupported(shapes, false);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].n, 7168);
  EXPECT_EQ(shapes[1].kind, GemmKind::kGroupedMasked);
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(removed[0].shape.n, 1001);
  EXPECT_NE(removed[0].reason.find("N must be a positive multiple of 8"), std::string::npos) << removed[0].reason;
  EXPECT_EQ(removed[1].shape.k, 100);
  EXPECT_NE(removed[1].reason.find("K"), std::string::npos) << removed[1].reason;
  // Every seed shape fits without a forced configuration.
  std::vector<ft::ProblemShape> seed =
      ft::read_shape_file(std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3.csv");
  const size_t count = seed.size();
  EXPECT_TRUE(ft::remove_unsupported(seed, false).empty());
  EXPECT_TRUE(ft::remove_unsupported(seed, true).empty());
  EXPECT_EQ(seed.size(), count);
}
