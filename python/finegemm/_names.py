"""The names of the tensor functions, importable without PyTorch (the package's fallback lists them too)."""

TENSOR_FUNCTIONS = (
    "gemm_fp8_fp8_bf16_nt",
    "gemm_fp8_fp8_nt",
    "k_grouped_gemm_fp8_fp8_f32_nt",
    "k_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "get_col_major_tma_aligned_tensor",
    # DeepGEMM 2.x's names for the same functions (finegemm.ops).
    "fp8_gemm_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "get_mn_major_tma_aligned_tensor",
    "fp8_fp4_gemm_nt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked",
    "transform_sf_into_required_layout",
)
