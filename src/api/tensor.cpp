// TensorView helpers and small public queries.
#include <sstream>

#include "common/error.hpp"
#include "finegemm/finegemm.hpp"

namespace finegemm {

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat8E4M3: return 1;
    case DType::kBFloat16: return 2;
    case DType::kFloat32: return 4;
    case DType::kInt32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  check_arg(shape.size() >= 1 && shape.size() <= 3, "TensorView", "rank must be 1..3, got ", shape.size());
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = int(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides) {
  check_arg(shape.size() == strides.size(), "TensorView", "shape and strides must have the same rank");
  TensorView t = contiguous(data, dtype, shape);
  int i = 0;
  for (int64_t s : strides) t.strides[i++] = s;
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int d = 0; d < rank; ++d) os << (d ? ", " : "") << shape[d];
  os << "] strides {";
  for (int d = 0; d < rank; ++d) os << (d ? ", " : "") << strides[d];
  os << "}";
  return os.str();
}

int get_m_alignment_for_contiguous_layout() { return 128; }

int64_t get_tma_aligned_size(int64_t x, int element_size) {
  check_arg(element_size > 0 && 16 % element_size == 0, "get_tma_aligned_size",
            "element_size must divide 16, got ", element_size);
  const int64_t per = 16 / element_size;
  return (x + per - 1) / per * per;
}

const char* version() { return "0.1.0"; }

}  // namespace finegemm
