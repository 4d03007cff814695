"""The names of the tensor functions, importable without PyTorch (the package's fallback lists them too)."""

TENSOR_FUNCTIONS = (
    "gemm_fp8_fp8_bf16_nt",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "get_col_major_tma_aligned_tensor",
)
