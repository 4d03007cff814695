"""The package without a GPU: it imports (with or without PyTorch), and its queries answer from the C++ library."""

import pytest

import fgtest
from fgtest import finegemm


def test_layout_queries():
    assert finegemm.get_m_alignment_for_contiguous_layout() == 128
    # x rounded up so that x * element_size is a multiple of 16 bytes
    assert [finegemm.get_tma_aligned_size(x, 4) for x in (1, 4, 5, 63, 64, 65)] == [4, 4, 8, 64, 64, 68]
    assert finegemm.get_tma_aligned_size(7, 2) == 8
    assert finegemm.get_tma_aligned_size(17, 1) == 32


def test_bad_query_raises_value_error_with_the_cpp_message():
    with pytest.raises(ValueError, match="get_tma_aligned_size: element_size must divide 16, got 3"):
        finegemm.get_tma_aligned_size(10, 3)
    with pytest.raises(ValueError, match="num_sms must be >= 0"):
        finegemm.set_num_sms(-1)


def test_version_and_jit_stats():
    assert finegemm.__version__.count(".") == 2
    stats = finegemm.jit_stats()
    assert set(stats) == {"compiles", "disk_hits", "memory_hits", "compile_seconds"}


def test_api_names():
    for name in ("gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
                 "m_grouped_gemm_fp8_fp8_bf16_nt_masked", "set_num_sms", "get_num_sms", "set_pdl", "get_pdl",
                 "get_m_alignment_for_contiguous_layout", "get_tma_aligned_size", "get_col_major_tma_aligned_tensor",
                 "per_token_cast_to_fp8", "per_block_cast_to_fp8",
                 # DeepGEMM 2.x's names
                 "fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
                 "get_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_tensor",
                 "fp8_fp4_gemm_nt", "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
                 "fp8_m_grouped_gemm_nt_masked", "transform_sf_into_required_layout",
                 "set_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
                 "install_as_deep_gemm", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum"):
        assert callable(getattr(finegemm, name)), name
        assert name in finegemm.__all__
    assert finegemm.get_mk_alignment_for_contiguous_layout() == finegemm.get_m_alignment_for_contiguous_layout()


@pytest.mark.skipif(fgtest.TORCH_MISSING is None, reason="PyTorch is installed: the no-torch fallback is not in use")
def test_tensor_functions_without_torch_raise_import_error():
    with pytest.raises(ImportError, match="PyTorch"):
        finegemm.per_token_cast_to_fp8(None)


@pytest.mark.skipif(fgtest.GPU_MISSING is None, reason="a Hopper GPU is present")
def test_get_num_sms_without_a_usable_gpu_raises_runtime_error_or_value_error():
    # No driver: RuntimeError (kCuda). A driver without a Hopper GPU still counts that GPU's SMs.
    try:
        assert finegemm.get_num_sms() > 0
    except RuntimeError as error:
        assert "finegemm:" in str(error)


# ---- The extension's descriptor conversion and error translation, on fake (never dereferenced) addresses ----------

FP8, BF16, FP32, INT32 = 0, 1, 2, 3  # finegemm::DType codes


def descriptor(address, dtype, shape, strides=None):
    if strides is None:
        strides, step = [], 1
        for size in reversed(shape):
            strides.insert(0, step)
            step *= size
    return (address, dtype, tuple(shape), tuple(strides))


def dense_descriptors(m=64, n=256, k=512):
    return [descriptor(0x10000, FP8, (m, k)), descriptor(0x20000, FP32, (m, k // 128), (1, m)),
            descriptor(0x30000, FP8, (n, k)), descriptor(0x40000, FP32, (n // 128, k // 128)),
            descriptor(0x50000, BF16, (m, n))]


def test_cpp_validation_errors_become_python_exceptions():
    gemm = finegemm._C.gemm_fp8_fp8_bf16_nt
    d = dense_descriptors()
    bad_dtype = [descriptor(0x10000, BF16, (64, 512))] + d[1:]
    with pytest.raises(TypeError, match="finegemm: gemm_fp8_fp8_bf16_nt: A must be float8_e4m3fn"):
        gemm(*bad_dtype, 0)
    bad_n = d[:2] + [descriptor(0x30000, FP8, (250, 512)), d[3], descriptor(0x50000, BF16, (64, 250))]
    with pytest.raises(ValueError, match="N must be a positive multiple of 8"):
        gemm(*bad_n, 0)
    with pytest.raises(ValueError, match="per_token_cast_to_fp8: K must be a multiple of 8, got K=100"):
        finegemm._C.per_token_cast_to_fp8(descriptor(0x10000, FP32, (4, 100)), descriptor(0x20000, FP8, (4, 100)),
                                          descriptor(0x30000, FP32, (4, 1)), 0)


def test_malformed_descriptors_raise():
    gemm = finegemm._C.gemm_fp8_fp8_bf16_nt
    d = dense_descriptors()
    with pytest.raises(TypeError, match="lhs: expected a tensor descriptor"):
        gemm((1, 2, 3), *d[1:], 0)
    with pytest.raises(TypeError, match="out: expected a tensor descriptor"):
        gemm(*d[:4], descriptor(0x50000, 9, (64, 256)), 0)
    with pytest.raises(ValueError, match="lhs has rank 4"):
        gemm(descriptor(0x10000, FP8, (1, 1, 64, 512)), *d[1:], 0)


def test_valid_call_on_fake_addresses_fails_only_on_the_gpu_side():
    try:
        finegemm._C.gemm_fp8_fp8_bf16_nt(*dense_descriptors(), 0)
    except RuntimeError as error:  # no driver
        assert "finegemm:" in str(error)
    except ValueError as error:  # a driver: the fake addresses are not device memory (or the GPU is not a Hopper)
        assert "not device memory" in str(error) or "Hopper" in str(error)
    else:
        pytest.fail("a GEMM on fake addresses cannot succeed")
