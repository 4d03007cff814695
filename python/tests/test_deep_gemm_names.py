"""finegemm.deep_gemm: DeepGEMM 2.6.1's Python names and signatures, ``install_as_deep_gemm()``, every ValueError
for what finegemm has no kernel for (the output left untouched), ``transform_sf_into_required_layout`` on worked
examples, and on a Hopper GPU the calls vLLM, SGLang and transformers make, against the dequantized fp64 reference."""

import inspect
import json
import re
import subprocess
import sys
import textwrap

import pytest

import fgtest
from fgtest import finegemm, torch

if fgtest.TORCH_MISSING is None and fgtest.FINEGEMM_MISSING is None:
    from finegemm import deep_gemm as dg
else:  # every test below is skipped, with the reason
    dg = None

EMPTY = inspect.Parameter.empty
GEMM_NT = [("a", EMPTY), ("b", EMPTY), ("d", EMPTY), ("c", None), ("recipe", None), ("recipe_a", None),
           ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False)]
CONTIGUOUS = [("a", EMPTY), ("b", EMPTY), ("d", EMPTY), ("grouped_layout", EMPTY), ("recipe", None),
              ("recipe_a", None), ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False),
              ("use_psum_layout", False), ("ensure_zero_padding", True), ("expected_m_for_psum_layout", None)]
MASKED = [("a", EMPTY), ("b", EMPTY), ("d", EMPTY), ("masked_m", EMPTY), ("expected_m", EMPTY), ("recipe", None),
          ("recipe_a", None), ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False)]

# DeepGEMM 2.6.1's signatures (its pybind11 declarations in csrc/apis and its deep_gemm/utils), by name.
SIGNATURES = {
    "fp8_fp4_gemm_nt": GEMM_NT,
    "fp8_gemm_nt": GEMM_NT,
    "m_grouped_fp8_fp4_gemm_nt_contiguous": CONTIGUOUS,
    "m_grouped_fp8_gemm_nt_contiguous": CONTIGUOUS,
    "m_grouped_fp8_fp4_gemm_nt_masked": MASKED,
    "m_grouped_fp8_gemm_nt_masked": MASKED,
    "fp8_m_grouped_gemm_nt_masked": MASKED,
    "transform_sf_into_required_layout": [("sf", EMPTY), ("mn", EMPTY), ("k", EMPTY), ("recipe", EMPTY),
                                          ("num_groups", None), ("is_sfa", None), ("disable_ue8m0_cast", False),
                                          ("psum_layout", None)],
    "get_theoretical_mk_alignment_for_contiguous_layout": [("expected_m", None)],
    "per_token_cast_to_fp8": [("x", EMPTY), ("use_ue8m0", EMPTY), ("gran_k", 128), ("use_packed_ue8m0", False)],
    "per_block_cast_to_fp8": [("x", EMPTY), ("use_ue8m0", EMPTY), ("gran_k", 128)],
    "ceil_div": [("x", EMPTY), ("y", EMPTY)],
    "align": [("x", EMPTY), ("y", EMPTY)],
    "ceil_to_ue8m0": [("x", EMPTY)],
}
# Names taking one positional argument, or none, in DeepGEMM (its settings and layout queries).
ONE_ARGUMENT = ["set_num_sms", "set_pdl", "set_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_tensor"]
NO_ARGUMENT = ["get_num_sms", "get_pdl", "get_mk_alignment_for_contiguous_layout",
               "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout"]
UTILS = ["get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "set_mk_alignment_for_contiguous_layout",
         "get_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
         "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout", "ceil_div", "align",
         "ceil_to_ue8m0", "per_token_cast_to_fp8", "per_block_cast_to_fp8"]
ALIASES = [("fp8_gemm_nt", "fp8_fp4_gemm_nt"),
           ("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_contiguous"),
           ("m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked"),
           ("fp8_m_grouped_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked")]


def run_python(tmp_path, script):
    """Runs `script` in a fresh interpreter (so sys.modules holds no deep_gemm) from `tmp_path`, where no source
    tree shadows the installed package; returns its stdout, failing the test with its stderr when it fails."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"the script failed:\n{result.stderr}"
    return result.stdout


# ---- Names, signatures and install_as_deep_gemm(), in fresh interpreters (CPU PyTorch is enough) -------------------


@pytest.mark.torch
def test_install_makes_import_deep_gemm_resolve_every_name(tmp_path):
    names = sorted(set(SIGNATURES) | set(ONE_ARGUMENT) | set(NO_ARGUMENT) | set(UTILS))
    out = run_python(tmp_path, f"""
        import inspect, json, sys
        import finegemm
        assert "deep_gemm" not in sys.modules
        installed = finegemm.install_as_deep_gemm()
        import deep_gemm
        import deep_gemm.utils
        from deep_gemm.utils import per_token_cast_to_fp8
        assert deep_gemm is installed and deep_gemm is finegemm.deep_gemm and finegemm.install_as_deep_gemm() is deep_gemm
        assert deep_gemm.utils is installed.utils and per_token_cast_to_fp8 is deep_gemm.per_token_cast_to_fp8

        def describe(f):
            try:
                parameters = inspect.signature(f).parameters.values()
            except (TypeError, ValueError):  # an extension function: its arity is checked by calling it
                return "builtin"
            return [[p.name, "required" if p.default is p.empty else repr(p.default)] for p in parameters]

        report = {{"top": {{}}, "utils": {{}}}}
        for name in {names!r}:
            f = getattr(deep_gemm, name, None)
            report["top"][name] = describe(f) if callable(f) else None
            if hasattr(deep_gemm.utils, name):
                report["utils"][name] = getattr(deep_gemm.utils, name) is f
        report["aliases"] = [getattr(deep_gemm, a) is getattr(deep_gemm, b) for a, b in {ALIASES!r}]
        report["version"] = deep_gemm.__version__
        report["absent"] = [hasattr(deep_gemm, n) for n in ("bf16_gemm_nt", "fp8_gemm_nn", "k_grouped_fp8_gemm_tn_contiguous")]
        try:
            deep_gemm.fp8_gemm_nn
        except AttributeError as error:
            report["absent_message"] = str(error)
        report["alignment"] = [deep_gemm.get_mk_alignment_for_contiguous_layout(),
                               deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(),
                               deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(4096),
                               deep_gemm.utils.get_k_alignment_for_contiguous_layout()]
        print(json.dumps(report))
    """)
    report = json.loads(out)
    missing = [name for name, signature in report["top"].items() if signature is None]
    assert not missing, f"deep_gemm lacks {missing}"
    for name, expected in SIGNATURES.items():
        want = [[p, "required" if d is EMPTY else repr(d)] for p, d in expected]
        assert report["top"][name] == want, f"deep_gemm.{name}: signature {report['top'][name]}, DeepGEMM's is {want}"
    assert sorted(report["utils"]) == sorted(UTILS) and all(report["utils"].values()), report["utils"]
    assert all(report["aliases"]), "DeepGEMM's FP8 names are its FP8/FP4 functions themselves"
    assert report["version"] == f"2.6.1+finegemm.{finegemm.__version__}"
    assert report["absent"] == [False, False, False]
    assert "finegemm provides DeepGEMM's FP8 NT GEMMs" in report["absent_message"]
    assert report["alignment"] == [128, 128, 128, 128]


@pytest.mark.torch
def test_settings_and_queries_take_deepgemm_arguments():
    for name in ONE_ARGUMENT + NO_ARGUMENT:
        assert callable(getattr(dg, name)), name
    assert dg.get_mk_alignment_for_contiguous_layout() == 128
    assert dg.get_pdl() in (False, True)
    dg.set_mk_alignment_for_contiguous_layout(128)  # the default: accepted, nothing changes
    assert dg.utils.ceil_div(129, 128) == 2 and dg.utils.align(129, 128) == 256 and dg.get_tma_aligned_size(5, 4) == 8


@pytest.mark.torch
def test_install_refuses_when_another_deep_gemm_is_imported(tmp_path):
    package = tmp_path / "deep_gemm"
    package.mkdir()
    (package / "__init__.py").write_text("ORIGIN = 'another deep_gemm'\n")
    out = run_python(tmp_path, """
        import deep_gemm  # the package in the working directory
        import finegemm
        try:
            finegemm.install_as_deep_gemm()
        except RuntimeError as error:
            print(error)
        import sys
        assert sys.modules["deep_gemm"].ORIGIN == "another deep_gemm"
    """)
    assert "deep_gemm is already imported in this process" in out and str(package) in out


@pytest.mark.torch
def test_install_takes_precedence_over_an_installed_deep_gemm_not_yet_imported(tmp_path):
    package = tmp_path / "deep_gemm"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('this deep_gemm must not be imported')\n")
    out = run_python(tmp_path, """
        import finegemm
        finegemm.install_as_deep_gemm()
        import deep_gemm
        print(deep_gemm.__name__)
    """)
    assert out.strip() == "finegemm.deep_gemm"


# ---- What finegemm has no kernel for: ValueError before anything runs, the output untouched -----------------------


def dense(device, m=64, n=256, k=512):
    a = (torch.zeros(m, k, dtype=torch.float8_e4m3fn, device=device),
         finegemm.get_mn_major_tma_aligned_tensor(torch.ones(m, k // 128, device=device)))
    b = (torch.zeros(n, k, dtype=torch.float8_e4m3fn, device=device), torch.ones(n // 128, k // 128, device=device))
    return a, b, fgtest.poisoned_bf16(m, n, device=device)


def grouped(pair, groups=2):
    return tuple(t.unsqueeze(0).expand(groups, *t.shape).contiguous() for t in pair)


def expect_untouched(call, out, message):
    before = out.clone()
    with pytest.raises(ValueError, match=message):
        call()
    assert torch.equal(out.view(torch.int16), before.view(torch.int16)), "a refused call wrote its output"


REFUSED = ["2D2D recipe", "recipe_a alone", "recipe and recipe_a", "FP4 recipe_b", "FP4 a", "FP4 b",
           "UE8M0 scales", "psum expected_m", "contiguous recipe", "contiguous FP4", "masked recipe",
           "masked FP4"]


def refused_calls(device):
    """{case: (call, output, message)} for every ValueError of the DeepGEMM names."""
    a, b, d = dense(device)
    ga, gb = (a[0].view(2, 32, 512), finegemm.get_mn_major_tma_aligned_tensor(a[1].view(2, 32, 4))), grouped(b)
    gd = d.view(2, 32, 256)
    m_indices = torch.zeros(64, dtype=torch.int32, device=device)
    masked_m = torch.full((2,), 32, dtype=torch.int32, device=device)
    fp4 = (a[0].view(torch.int8), a[1])
    ue8m0 = (b[0], b[1].view(torch.int32))
    cases = [
        ("2D2D recipe", lambda: dg.fp8_gemm_nt(a, b, d, recipe=(128, 128, 128)), d,
         r"recipe \(128, 128, 128\) is not supported: .*\(1, 128, 128\).*\(1, 1, 128\)"),
        ("recipe_a alone", lambda: dg.fp8_fp4_gemm_nt(a, b, d, recipe_a=(1, 128)), d, "go together"),
        ("recipe and recipe_a", lambda: dg.fp8_gemm_nt(a, b, d, recipe=(1, 128, 128), recipe_a=(1, 128),
                                                       recipe_b=(128, 128)), d, "not both"),
        ("FP4 recipe_b", lambda: dg.fp8_fp4_gemm_nt(a, b, d, recipe_a=(1, 128), recipe_b=(1, 32)), d,
         r"recipe_a=\(1, 128\), recipe_b=\(1, 32\) is not supported: .*recipe_b=\(128, 128\).*recipe_b=\(1, 128\)"),
        ("FP4 a", lambda: dg.fp8_fp4_gemm_nt(fp4, b, d), d, "a holds packed FP4 values"),
        ("FP4 b", lambda: dg.fp8_fp4_gemm_nt(a, (b[0].view(torch.int8), b[1]), d), d, "b holds packed FP4 values"),
        ("UE8M0 scales", lambda: dg.fp8_gemm_nt(a, ue8m0, d), d, "b's scales are torch.int32 .UE8M0"),
        ("psum expected_m", lambda: dg.m_grouped_fp8_fp4_gemm_nt_contiguous(a, gb, d, m_indices,
                                                                            expected_m_for_psum_layout=64), d,
         "expected_m_for_psum_layout goes with use_psum_layout=True"),
        ("contiguous recipe", lambda: dg.m_grouped_fp8_gemm_nt_contiguous(a, gb, d, m_indices, recipe=(128, 128, 128)),
         d, r"recipe \(128, 128, 128\) is not supported"),
        ("contiguous FP4", lambda: dg.m_grouped_fp8_fp4_gemm_nt_contiguous(fp4, gb, d, m_indices), d,
         "a holds packed FP4 values"),
        ("masked recipe", lambda: dg.fp8_m_grouped_gemm_nt_masked(ga, gb, gd, masked_m, 32, recipe=(1, 128, 1)), gd,
         r"recipe \(1, 128, 1\) is not supported"),
        ("masked FP4", lambda: dg.m_grouped_fp8_fp4_gemm_nt_masked((ga[0].view(torch.int8), ga[1]), gb, gd,
                                                                   masked_m, 32), gd, "a holds packed FP4 values"),
    ]
    assert [case[0] for case in cases] == REFUSED
    return {what: (call, out, message) for what, call, out, message in cases}


@pytest.mark.torch
@pytest.mark.parametrize("case", REFUSED)
def test_refused_arguments_raise_value_error_and_leave_the_output_untouched(case):
    call, out, message = refused_calls("cpu")[case]
    expect_untouched(call, out, message)


@pytest.mark.torch
def test_psum_layout_reaches_the_gemm():
    """use_psum_layout=True runs finegemm's psum GEMM: on CPU tensors the call passes the Python checks and stops at
    the GEMM's device check."""
    a, b, d = dense("cpu")
    ends = torch.tensor([32, 64], dtype=torch.int32)
    for kwargs in ({}, {"expected_m_for_psum_layout": 32}):
        with pytest.raises(ValueError, match="must be a CUDA tensor"):
            dg.m_grouped_fp8_gemm_nt_contiguous(a, grouped(b), d, ends, use_psum_layout=True, **kwargs)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, grouped(b), d, ends, 32)


@pytest.mark.torch
def test_accepted_recipes_reach_the_gemm():
    a, b, d = dense("cpu")
    for kwargs in ({}, {"recipe": (1, 128, 128)}, {"recipe_a": (1, 128), "recipe_b": (128, 128)},
                   {"compiled_dims": "mnk", "disable_ue8m0_cast": True}):
        with pytest.raises(ValueError, match="lhs must be a CUDA tensor"):  # past the checks, at the GEMM
            dg.fp8_gemm_nt(a, b, d, **kwargs)
    with pytest.raises(TypeError, match="lhs has dtype torch.float16"):  # not a Blackwell format: the TypeError stays
        dg.fp8_gemm_nt((a[0].half(), a[1]), b, d)


@pytest.fixture
def default_alignment_after():
    """The process-wide alignment setting back to its default once the test is done, whatever it did."""
    yield
    finegemm.set_mk_alignment_for_contiguous_layout(128)


def test_alignment_setting_accepts_128_64_and_32(default_alignment_after):
    """DeepGEMM's process-wide setting: 128 (the default), 64 and 32 are kept and read back by every getter's name;
    any other value raises ValueError saying what runs, and leaves the setting as it was."""
    getters = [finegemm.get_mk_alignment_for_contiguous_layout, finegemm.get_m_alignment_for_contiguous_layout]
    assert [get() for get in getters] == [128, 128]
    for value in (64, 32, 128, 32):
        finegemm.set_mk_alignment_for_contiguous_layout(value)
        assert [get() for get in getters] == [value, value]
    for value in (256, 0, 96, 16, -64, 64.0, "64", True, None):
        with pytest.raises(ValueError, match=re.escape("start each group's rows at a multiple of 128, 64 or 32 rows "
                                                       f"(32: the psum layout only), got {value!r}")):
            finegemm.set_mk_alignment_for_contiguous_layout(value)
        assert finegemm.get_mk_alignment_for_contiguous_layout() == 32
    # The smallest alignment both layouts run well: one 64-row tile per group for at most 64 rows, 128 otherwise (32
    # runs with the psum layout only, so it is never the answer).
    expected_ms = (None, 0, 1, 40, 64, 65, 100, 4096)
    assert [finegemm.get_theoretical_mk_alignment_for_contiguous_layout(m) for m in expected_ms] == \
        [128, 64, 64, 64, 64, 128, 128, 128]


@pytest.mark.torch
def test_alignment_setting_is_deepgemms_under_every_name(default_alignment_after):
    """deep_gemm's names and deep_gemm.utils' share finegemm's setting (get_k_alignment_for_contiguous_layout too, as
    in DeepGEMM; finegemm's K-grouped GEMM takes multiples of 128 whatever it says, as DeepGEMM's SM90 one does)."""
    getters = [dg.get_mk_alignment_for_contiguous_layout, dg.get_m_alignment_for_contiguous_layout,
               dg.get_k_alignment_for_contiguous_layout, dg.utils.get_mk_alignment_for_contiguous_layout,
               finegemm.get_mk_alignment_for_contiguous_layout]
    for value in (64, 32, 128):
        dg.set_mk_alignment_for_contiguous_layout(value)
        assert [get() for get in getters] == [value] * len(getters)
    dg.utils.set_mk_alignment_for_contiguous_layout(64)
    assert finegemm.get_mk_alignment_for_contiguous_layout() == 64
    assert dg.get_theoretical_mk_alignment_for_contiguous_layout(32) == 64


def cpu_views(*tensors):
    """finegemm._C's tensor descriptors of CPU tensors (the C++ validation reads no memory)."""
    codes = {torch.float8_e4m3fn: 0, torch.bfloat16: 1, torch.float32: 2, torch.int32: 3}
    return [(t.data_ptr(), codes[t.dtype], tuple(t.shape), t.stride()) for t in tensors]


@pytest.mark.torch
def test_alignment_argument_is_checked_by_the_library():
    """The C++ calls take the alignment explicitly and check it first: the m_indices layout refuses 32 (naming what
    runs it), both refuse values other than 128, 64 and 32; ValueError with the library's message."""
    a, b, d = dense("cpu")
    gb = grouped(b)
    m_indices = torch.zeros(64, dtype=torch.int32)
    ends = torch.tensor([32, 64], dtype=torch.int32)
    with pytest.raises(ValueError, match="got 32; 32-row alignment runs with the psum layout"):
        finegemm._C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(*cpu_views(*a, *gb, d, m_indices), 32, 0)
    for bad in (0, 96, 256):
        with pytest.raises(ValueError, match=f"must be 128, 64 or 32, got {bad}"):
            finegemm._C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(*cpu_views(*a, *gb, d, m_indices), bad, 0)
        with pytest.raises(ValueError, match=f"must be 128, 64 or 32, got {bad}"):
            finegemm._C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(*cpu_views(*a, *gb, d, ends), 0, bad, 0)


@pytest.mark.torch
@pytest.mark.parametrize("fast_path", [False, True])
def test_contiguous_calls_pass_the_alignment_setting(monkeypatch, default_alignment_after, fast_path):
    """Every contiguous GEMM called from Python (finegemm's names and DeepGEMM's, m_indices and group ends) hands the
    process-wide alignment to the C++ call, through the descriptor path and the fast path (recorded here in place of
    the extension's functions)."""
    from finegemm import ops

    recorded = []
    names = ("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum")
    for name in names:
        # Descriptor path: (..., [expected_m,] alignment, stream); fast path: (..., [expected_m,] alignment).
        monkeypatch.setattr(ops._C, name, lambda *args, name=name: recorded.append((name, args[-2])))
        monkeypatch.setitem(ops._FAST, name,
                            (lambda *args, name=name: recorded.append((name, args[-1]))) if fast_path else None)
    monkeypatch.setattr(ops, "_stream", lambda: 0)
    a, b, d = dense("cpu")
    gb = grouped(b)
    m_indices = torch.zeros(64, dtype=torch.int32)
    ends = torch.tensor([32, 64], dtype=torch.int32)
    for alignment in (64, 32, 128):
        finegemm.set_mk_alignment_for_contiguous_layout(alignment)
        recorded.clear()
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, gb, d, m_indices)
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, gb, d, ends, 32)
        dg.m_grouped_fp8_gemm_nt_contiguous(a, gb, d, m_indices)
        dg.m_grouped_fp8_fp4_gemm_nt_contiguous(a, gb, d, ends, use_psum_layout=True, expected_m_for_psum_layout=32)
        assert recorded == [(names[0], alignment), (names[1], alignment), (names[0], alignment),
                            (names[1], alignment)], recorded


@pytest.mark.skipif(fgtest.TORCH_MISSING is None, reason="PyTorch is installed: install_as_deep_gemm works")
def test_install_without_torch_raises_import_error():
    with pytest.raises(ImportError, match="install_as_deep_gemm needs PyTorch"):
        finegemm.install_as_deep_gemm()


def test_masked_scales_expert_token_block_pass_validation_when_tokens_are_a_multiple_of_4():
    """[E, T, G] scales with strides (T*G, 1, T) are finegemm's MN-major layout with M_pad = T: the C++ validation
    accepts them when T % 4 == 0 (the call then fails only at the GPU, on these fake addresses) and otherwise names the
    TMA rule. Descriptors: (address, dtype code, shape, strides); nothing is dereferenced."""
    fp8, bf16, fp32, int32 = 0, 1, 2, 3
    groups, n, k = 4, 256, 512

    def call(tokens):
        finegemm._C.m_grouped_gemm_fp8_fp8_bf16_nt_masked(
            (0x10000, fp8, (groups, tokens, k), (tokens * k, k, 1)),
            (0x20000, fp32, (groups, tokens, 4), (tokens * 4, 1, tokens)),
            (0x30000, fp8, (groups, n, k), (n * k, k, 1)),
            (0x40000, fp32, (groups, 2, 4), (8, 4, 1)),
            (0x50000, bf16, (groups, tokens, n), (tokens * n, n, 1)),
            (0x60000, int32, (groups,), (1,)), 16, 0)

    try:
        call(64)
    except RuntimeError as error:  # no driver
        assert "finegemm:" in str(error)
    except ValueError as error:  # a driver: the fake addresses are not device memory (or the GPU is not a Hopper)
        assert "not device memory" in str(error) or "Hopper" in str(error), error
    else:
        pytest.fail("a GEMM on fake addresses cannot succeed")
    with pytest.raises(ValueError, match=r"K-block stride M_pad=6 is not a multiple of 4 .*M_max % 4 == 0"):
        call(6)


@pytest.mark.torch
def test_quantizer_arguments_finegemm_does_not_run_raise_value_error():
    x = torch.randn(4, 256)
    with pytest.raises(ValueError, match=r"gran_k=32 is not supported: .*gran_k=128"):
        dg.utils.per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32)
    with pytest.raises(ValueError, match="use_packed_ue8m0=True is not supported"):
        dg.utils.per_token_cast_to_fp8(x, use_ue8m0=True, use_packed_ue8m0=True)
    with pytest.raises(ValueError, match="gran_k=64 is not supported"):
        dg.utils.per_block_cast_to_fp8(x, False, 64)
    with pytest.raises(ValueError, match=r"x must have rank 2, got shape \(2, 4, 256\)"):
        dg.utils.per_token_cast_to_fp8(x.view(2, 4, 128).repeat(1, 1, 2), False)
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        dg.utils.per_block_cast_to_fp8(x, False)


# ---- transform_sf_into_required_layout and ceil_to_ue8m0 on worked examples (CPU tensors) --------------------------


@pytest.mark.torch
@pytest.mark.parametrize("disable_ue8m0_cast", [False, True])
def test_transform_sfa_to_mn_major_tma_aligned_without_rounding(disable_ue8m0_cast):
    # a's scales for M=5, K=384: 5 x 3 values that are not powers of two, K-major.
    sf = torch.tensor([[0.3, 1.5, 3 * 2.0**-10], [7.0, 0.1, 2.5], [1.0, 0.75, 6.0], [0.2, 0.4, 0.6],
                       [9.0, 0.01, 0.125]])
    for recipe, is_sfa in (((1, 128, 128), True), ((1, 128), None)):
        out = dg.transform_sf_into_required_layout(sf, 5, 384, recipe, is_sfa=is_sfa,
                                                   disable_ue8m0_cast=disable_ue8m0_cast)
        # MN-major and TMA-aligned: element (m, kb) at kb * 8 + m (M_pad = 8, the 16-byte multiple above 5 floats).
        assert out.shape == (5, 3) and out.stride() == (1, 8)
        storage = torch.as_strided(out, (3 * 8,), (1,))
        for m in range(5):
            for kb in range(3):
                assert storage[kb * 8 + m].item() == sf[m, kb].item()  # the same fp32 values: no UE8M0 rounding
        assert dg.transform_sf_into_required_layout(out, 5, 384, recipe, is_sfa=is_sfa) is out
    # Grouped (masked) a's scales [G, M, KB]: each group MN-major.
    grouped_sf = torch.stack([sf, 2 * sf])
    out = dg.transform_sf_into_required_layout(grouped_sf, 5, 384, (1, 128, 128), num_groups=2, is_sfa=True)
    assert out.stride() == (24, 1, 8) and torch.equal(out, grouped_sf)


@pytest.mark.torch
def test_transform_sfb_keeps_row_major_scales_and_copies_transposed_ones():
    # b's scales for N=256, K=384 (2 x 3 blocks of 128 x 128), one and two groups, as vLLM passes them at load time.
    sf = torch.tensor([[0.3, 1.5, 0.7], [2.5, 0.1, 3.0]])
    assert dg.transform_sf_into_required_layout(sf=sf, mn=256, k=384, recipe=(1, 128, 128), is_sfa=False) is sf
    assert dg.transform_sf_into_required_layout(sf, 256, 384, (128, 128)) is sf
    grouped_sf = torch.stack([sf, 4 * sf])
    assert dg.transform_sf_into_required_layout(grouped_sf, 256, 384, (1, 128, 128), 2, False, True) is grouped_sf
    transposed = sf.t().contiguous().t()  # MN-major: contiguous after transposing the last two dimensions
    out = dg.transform_sf_into_required_layout(transposed, 256, 384, (1, 128, 128), is_sfa=False)
    assert out.stride() == (3, 1) and torch.equal(out, sf)
    with pytest.raises(ValueError, match="b's scales must be contiguous"):
        dg.transform_sf_into_required_layout(torch.ones(2, 6)[:, ::2], 256, 384, (1, 128, 128), is_sfa=False)


@pytest.mark.torch
def test_transform_refuses_what_finegemm_does_not_run():
    sf = torch.ones(2, 3)
    transform = dg.transform_sf_into_required_layout
    with pytest.raises(ValueError, match="a 3-element recipe needs is_sfa"):
        transform(sf, 256, 384, (1, 128, 128))
    with pytest.raises(ValueError, match="takes no is_sfa"):
        transform(sf, 256, 384, (128, 128), is_sfa=False)
    with pytest.raises(ValueError, match="recipe must have 2 or 3 elements"):
        transform(sf, 256, 384, (128,))
    with pytest.raises(ValueError, match=r"sf must have shape \[2, 2, 3\] .* got \[2, 3\]"):
        transform(sf, 256, 384, (1, 128, 128), num_groups=2, is_sfa=False)
    with pytest.raises(ValueError, match=r"128x32 scales are not supported: finegemm runs a's scales per 1x128"):
        transform(torch.ones(2, 12), 256, 384, (128, 32))
    with pytest.raises(ValueError, match="packed UE8M0"):
        transform(sf.to(torch.int32), 256, 384, (128, 128))
    with pytest.raises(TypeError, match="must be torch.float32 scales"):
        transform(sf.double(), 256, 384, (128, 128))


@pytest.mark.torch
def test_ceil_to_ue8m0_worked_values():
    x = torch.tensor([0.3, 1.0, 1.5, -3.0, 448.0, 2.0**-130, 0.0, 3 * 2.0**100, 2.0**-126])
    want = torch.tensor([0.5, 1.0, 2.0, 4.0, 512.0, 2.0**-126, 2.0**-126, 2.0**102, 2.0**-126])
    assert torch.equal(dg.utils.ceil_to_ue8m0(x), want)


# ---- On a Hopper GPU: the calls engines make, against the dequantized fp64 reference ------------------------------


def stack(tensors):
    """torch.stack, also for fp8 tensors (stacked as bytes)."""
    if tensors[0].dtype != torch.float8_e4m3fn:
        return torch.stack(tensors)
    return torch.stack([t.view(torch.uint8) for t in tensors]).view(torch.float8_e4m3fn)


def quantized_weights(num_groups, n, k, use_ue8m0):
    """Weights quantized per 128x128 block as engines load them (power-of-two scales with use_ue8m0), through
    deep_gemm.utils.per_block_cast_to_fp8 and transform_sf_into_required_layout."""
    w = fgtest.weights(n, k, lead=(num_groups,))
    values, scales = zip(*(dg.utils.per_block_cast_to_fp8(w[g], use_ue8m0=use_ue8m0) for g in range(num_groups)))
    values, scales = stack(values), stack(scales)
    scales = dg.transform_sf_into_required_layout(sf=scales, mn=n, k=k, recipe=(1, 128, 128), num_groups=num_groups,
                                                  is_sfa=False)
    return values, scales


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(7, 2112, 7168), (129, 576, 1024), (256, 7168, 2048)])
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_vllm_dense_linear(m, n, k, use_ue8m0):
    """vLLM's block-FP8 linear: weights transformed at load time, activations with MN-major TMA-aligned scales,
    fp8_gemm_nt with disable_ue8m0_cast passed through."""
    seed = fgtest.seed()
    b, sb = quantized_weights(1, n, k, use_ue8m0)
    b, sb = b[0], sb[0]
    a, sa = dg.utils.per_token_cast_to_fp8(fgtest.activations(m, k), use_ue8m0=use_ue8m0)
    sa = dg.get_mn_major_tma_aligned_tensor(sa)
    out = fgtest.poisoned_bf16(m, n)
    dg.fp8_gemm_nt((a, sa), (b, sb), out, disable_ue8m0_cast=not use_ue8m0)
    ref, abs_sum = fgtest.reference_gemm(a, sa, b, sb)
    fgtest.check_output(out, ref, abs_sum, f"vLLM fp8_gemm_nt M={m} N={n} K={k} ue8m0={use_ue8m0} (seed {seed})")


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_vllm_contiguous_moe(use_ue8m0):
    """vLLM's DeepGemmExperts: tokens sorted by expert into 128-aligned segments, m_indices -1 on padding rows."""
    seed = fgtest.seed()
    num_groups, n, k = 8, 4096, 7168
    counts = torch.randint(1, 300, (num_groups,)).tolist()
    counts[3] = 0
    alignment = dg.get_mk_alignment_for_contiguous_layout()
    m_indices, segments = [], []
    for g, count in enumerate(counts):
        begin = len(m_indices)
        m_indices += [g] * count + [-1] * (dg.utils.align(count, alignment) - count)
        segments.append((begin, begin + count))
    m_indices = torch.tensor(m_indices, dtype=torch.int32, device="cuda")
    a, sa = dg.utils.per_token_cast_to_fp8(fgtest.activations(m_indices.numel(), k), use_ue8m0)
    sa = dg.get_mn_major_tma_aligned_tensor(sa)
    b, sb = quantized_weights(num_groups, n, k, use_ue8m0)
    out = fgtest.poisoned_bf16(m_indices.numel(), n)
    dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), out, m_indices, disable_ue8m0_cast=not use_ue8m0)
    for g, (begin, end) in enumerate(segments):
        if end > begin:
            ref, abs_sum = fgtest.reference_gemm(a[begin:end], sa[begin:end], b[g], sb[g])
            fgtest.check_output(out[begin:end], ref, abs_sum, f"vLLM contiguous, expert {g} (seed {seed})")
    assert fgtest.is_poison(out[m_indices == -1]).all(), "padding rows were written"


def expert_token_block_scales(values):
    """Activations [E, T, K] quantized, the scales laid out [E, T, G] with strides (T*G, 1, T) as vLLM's and
    SGLang's fused quantization kernels and DeepEP's low-latency dispatch write them."""
    e, t, k = values.shape
    blocks = (k + 127) // 128
    q, s = zip(*(dg.utils.per_token_cast_to_fp8(values[i], False) for i in range(e)))
    scales = torch.empty_strided((e, t, blocks), (t * blocks, 1, t), dtype=torch.float32, device=values.device)
    scales.copy_(stack(s))
    return stack(q), scales


@pytest.mark.gpu
@pytest.mark.parametrize("num_groups,tokens,n,k,expected_m", [(4, 64, 4096, 7168, 32), (8, 128, 7168, 2048, 96),
                                                               (6, 4, 2112, 576, 2)])
def test_vllm_sglang_masked_moe(num_groups, tokens, n, k, expected_m):
    """The masked GEMM under its legacy name fp8_m_grouped_gemm_nt_masked, with [E, T, G] scales of strides
    (T*G, 1, T) and per-expert token counts on the GPU."""
    seed = fgtest.seed()
    a, sa = expert_token_block_scales(fgtest.activations(tokens, k, lead=(num_groups,)))
    assert sa.stride() == (tokens * sa.shape[2], 1, tokens)
    b, sb = quantized_weights(num_groups, n, k, False)
    masked_m = torch.randint(0, tokens + 1, (num_groups,), dtype=torch.int32)
    masked_m[0], masked_m[-1] = tokens, 0
    masked_m = masked_m.cuda()
    out = fgtest.poisoned_bf16(num_groups, tokens, n)
    dg.fp8_m_grouped_gemm_nt_masked((a, sa), (b, sb), out, masked_m, expected_m, disable_ue8m0_cast=True)
    for g, rows in enumerate(masked_m.tolist()):
        if rows > 0:
            ref, abs_sum = fgtest.reference_gemm(a[g, :rows], sa[g, :rows], b[g], sb[g])
            fgtest.check_output(out[g, :rows], ref, abs_sum, f"masked, expert {g} (seed {seed})")
        assert fgtest.is_poison(out[g, rows:]).all(), f"expert {g}: rows >= masked_m were written"


@pytest.mark.gpu
def test_masked_scales_with_tokens_not_a_multiple_of_4_raise_and_leave_the_output_untouched():
    a, sa = expert_token_block_scales(fgtest.activations(6, 1024, lead=(2,)))
    b, sb = quantized_weights(2, 256, 1024, False)
    out = fgtest.poisoned_bf16(2, 6, 256)
    masked_m = torch.tensor([6, 3], dtype=torch.int32, device="cuda")
    expect_untouched(lambda: dg.fp8_m_grouped_gemm_nt_masked((a, sa), (b, sb), out, masked_m, 4), out,
                     r"K-block stride M_pad=6 is not a multiple of 4 .*M_max % 4 == 0")


@pytest.mark.gpu
def test_transformers_fp8_linear_and_experts():
    """transformers' DeepGEMM path: deep_gemm.utils.per_token_cast_to_fp8(x, use_ue8m0=False, gran_k=128) (K-major
    scales) into fp8_fp4_gemm_nt, and m_grouped_fp8_fp4_gemm_nt_contiguous with a -1-padded grouped_layout."""
    seed = fgtest.seed()
    m, n, k = 65, 2112, 7168
    w, ws = quantized_weights(1, n, k, False)
    x, xs = dg.per_token_cast_to_fp8(fgtest.activations(m, k), use_ue8m0=False, gran_k=128)
    assert xs.shape == (m, k // 128) and xs.stride() == (k // 128, 1)  # K-major, as DeepGEMM's utils return
    out = fgtest.poisoned_bf16(m, n)
    dg.fp8_fp4_gemm_nt((x, xs), (w[0], ws[0]), out)
    ref, abs_sum = fgtest.reference_gemm(x, xs, w[0], ws[0])
    fgtest.check_output(out, ref, abs_sum, f"transformers fp8_fp4_gemm_nt (seed {seed})")

    grouped_layout = torch.tensor([0] * 100 + [-1] * 28 + [1] * 128 + [2] * 5 + [-1] * 123, dtype=torch.int32,
                                  device="cuda")
    w, ws = quantized_weights(3, 576, 1024, False)
    x, xs = dg.per_token_cast_to_fp8(fgtest.activations(grouped_layout.numel(), 1024), False)
    out = fgtest.poisoned_bf16(grouped_layout.numel(), 576)
    dg.m_grouped_fp8_fp4_gemm_nt_contiguous((x, xs), (w, ws), out, grouped_layout, use_psum_layout=False)
    for g, (begin, end) in enumerate([(0, 100), (128, 256), (256, 261)]):
        ref, abs_sum = fgtest.reference_gemm(x[begin:end], xs[begin:end], w[g], ws[g])
        fgtest.check_output(out[begin:end], ref, abs_sum, f"transformers contiguous, expert {g} (seed {seed})")
    assert fgtest.is_poison(out[grouped_layout == -1]).all(), "padding rows were written"


def psum_rows(ends, num_rows, alignment=128):
    """Each row's group in a psum layout (-1: no group), row by row: group g holds [align(end[g-1]), end[g])."""
    out, start = [-1] * num_rows, 0
    for g, end in enumerate(ends):
        for r in range(start, min(end, num_rows)):
            out[r] = g
        start = (end + alignment - 1) // alignment * alignment
    return out


def psum_ends(counts, alignment=128):
    """DeepEP v2's psum layout of groups with these row counts: each end is the previous end rounded up, plus the
    group's rows (an empty group's end is its start)."""
    ends, start = [], 0
    for count in counts:
        ends.append(start + count)
        start = (start + count + alignment - 1) // alignment * alignment
    return ends


@pytest.mark.gpu
@pytest.mark.parametrize("counts,n,k", [([100, 0, 172, 5, 128], 576, 1024), ([1000, 3000, 0, 2500], 4096, 7168),
                                        ([40] * 64, 2112, 512)])
def test_deepep_psum_layout_in_a_cuda_graph(counts, n, k):
    """DeepEP v2 / training's psum layout: each group's end row, groups at the aligned end of the one before, empty
    groups included; rows past a group's end untouched; the same bits replayed from a CUDA graph."""
    seed = fgtest.seed()
    ends = psum_ends(counts)
    rows = (ends[-1] + 127) // 128 * 128 + 128  # a worst-case allocation's unused tail too
    w, ws = quantized_weights(len(counts), n, k, False)
    x, xs = finegemm.per_token_cast_to_fp8(fgtest.activations(rows, k))
    grouped_layout = torch.tensor(ends, dtype=torch.int32, device="cuda")
    out = fgtest.poisoned_bf16(rows, n)
    call = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((x, xs), (w, ws), out, grouped_layout, use_psum_layout=True,
                                                        expected_m_for_psum_layout=sum(counts) // len(counts))
    finegemm.reset_device_error_flags()
    call()
    row_groups = psum_rows(ends, rows)
    for g in range(len(counts)):
        begin, end = ends[g] - counts[g], ends[g]
        assert row_groups[begin:end] == [g] * counts[g]
        if end > begin:
            ref, abs_sum = fgtest.reference_gemm(x[begin:end], xs[begin:end], w[g], ws[g])
            fgtest.check_output(out[begin:end], ref, abs_sum, f"psum layout, group {g} (seed {seed})")
    owned = torch.tensor(row_groups, device="cuda") >= 0
    assert fgtest.is_poison(out[~owned]).all(), "rows past a group's end were written"
    assert finegemm.device_error_flags() == 0
    eager = out.clone()
    graph = fgtest.capture_graph(call)
    out.view(torch.int16).fill_(fgtest.BF16_POISON)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[owned].view(torch.int16), eager[owned].view(torch.int16)), "the graph's replay differs"
    assert fgtest.is_poison(out[~owned]).all(), "the graph's replay wrote rows past a group's end"
    # New ends written on the device between replays: the graph computes the new groups.
    new_counts = [0] * (len(counts) - 1) + [min(rows, 300)]
    grouped_layout.copy_(torch.tensor(psum_ends(new_counts), dtype=torch.int32))
    out.view(torch.int16).fill_(fgtest.BF16_POISON)
    graph.replay()
    torch.cuda.synchronize()
    last = len(counts) - 1
    ref, abs_sum = fgtest.reference_gemm(x[:new_counts[-1]], xs[:new_counts[-1]], w[last], ws[last])
    fgtest.check_output(out[:new_counts[-1]], ref, abs_sum, f"psum layout replayed with new ends (seed {seed})")
    assert fgtest.is_poison(out[new_counts[-1]:]).all(), "the replay wrote rows of no group"


@pytest.mark.gpu
@pytest.mark.parametrize("alignment", [64, 32])
def test_psum_layout_with_64_and_32_row_alignment(alignment, default_alignment_after):
    """set_mk_alignment_for_contiguous_layout(64 or 32), then the psum layout as DeepEP v2 writes it for that
    alignment: each group starts at the previous end rounded up to it (so off the 128-row boundaries), empty groups and
    groups of a few rows included; rows of no group keep their poison, and no device error is flagged."""
    seed = fgtest.seed()
    dg.set_mk_alignment_for_contiguous_layout(alignment)
    counts, n, k = [100, 0, 172, 5, 31, 33, 64, 1, 0, 250], 576, 1024
    ends = psum_ends(counts, alignment)
    rows = dg.utils.align(ends[-1], alignment) + alignment
    w, ws = quantized_weights(len(counts), n, k, False)
    x, xs = finegemm.per_token_cast_to_fp8(fgtest.activations(rows, k))
    out = fgtest.poisoned_bf16(rows, n)
    finegemm.reset_device_error_flags()
    dg.m_grouped_fp8_gemm_nt_contiguous((x, xs), (w, ws), out, torch.tensor(ends, dtype=torch.int32, device="cuda"),
                                        use_psum_layout=True)
    row_groups = psum_rows(ends, rows, alignment)
    for g in range(len(counts)):
        begin, end = ends[g] - counts[g], ends[g]
        assert begin % alignment == 0 and row_groups[begin:end] == [g] * counts[g]
        if end > begin:
            ref, abs_sum = fgtest.reference_gemm(x[begin:end], xs[begin:end], w[g], ws[g])
            fgtest.check_output(out[begin:end], ref, abs_sum,
                                f"psum, {alignment}-row alignment, group {g} (seed {seed})")
    owned = torch.tensor(row_groups, device="cuda") >= 0
    assert fgtest.is_poison(out[~owned]).all(), "rows of no group were written"
    assert finegemm.device_error_flags() == 0


@pytest.mark.gpu
def test_contiguous_m_indices_aligned_to_64_rows(default_alignment_after):
    """set_mk_alignment_for_contiguous_layout(64): experts' rows padded to 64 (-1 in m_indices), computed by both the
    DeepGEMM name and finegemm's (64-row tiles), padding rows untouched, no device error. With 32 the m_indices call
    raises ValueError naming what runs and writes nothing."""
    seed = fgtest.seed()
    dg.set_mk_alignment_for_contiguous_layout(64)
    num_groups, n, k = 8, 2112, 2048
    counts = torch.randint(1, 200, (num_groups,)).tolist()
    counts[1], counts[4], counts[6] = 0, 64, 65
    alignment = dg.get_mk_alignment_for_contiguous_layout()
    m_indices, segments = [], []
    for g, count in enumerate(counts):
        begin = len(m_indices)
        m_indices += [g] * count + [-1] * (dg.utils.align(count, alignment) - count)
        segments.append((begin, begin + count))
    m_indices = torch.tensor(m_indices, dtype=torch.int32, device="cuda")
    a, sa = finegemm.per_token_cast_to_fp8(fgtest.activations(m_indices.numel(), k))
    b, sb = quantized_weights(num_groups, n, k, False)
    for call in (lambda out: dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), out, m_indices),
                 lambda out: finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sa), (b, sb), out, m_indices)):
        out = fgtest.poisoned_bf16(m_indices.numel(), n)
        finegemm.reset_device_error_flags()
        call(out)
        for g, (begin, end) in enumerate(segments):
            if end > begin:
                ref, abs_sum = fgtest.reference_gemm(a[begin:end], sa[begin:end], b[g], sb[g])
                fgtest.check_output(out[begin:end], ref, abs_sum,
                                    f"contiguous, 64-row alignment, expert {g} (seed {seed})")
        assert fgtest.is_poison(out[m_indices == -1]).all(), "padding rows were written"
        assert finegemm.device_error_flags() == 0
    dg.set_mk_alignment_for_contiguous_layout(32)
    out = fgtest.poisoned_bf16(m_indices.numel(), n)
    expect_untouched(lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), out, m_indices), out,
                     "32-row alignment runs with the psum layout")


@pytest.mark.gpu
def test_psum_layout_bad_arguments_and_bad_ends():
    """A grouped_layout that is not int32 [G] raises ValueError with the library's message and writes nothing; ends
    that contradict each other or pass the rows are clamped on the device and flagged."""
    n, k, rows = 576, 512, 512
    w, ws = quantized_weights(2, n, k, False)
    x, xs = finegemm.per_token_cast_to_fp8(fgtest.activations(rows, k))
    out = fgtest.poisoned_bf16(rows, n)
    for bad in (torch.tensor([32, 64, 64], dtype=torch.int32, device="cuda"),
                torch.zeros(rows, dtype=torch.int32, device="cuda")):
        expect_untouched(lambda: dg.m_grouped_fp8_gemm_nt_contiguous((x, xs), (w, ws), out, bad, use_psum_layout=True),
                         out, r"group_ends must be a contiguous int32 \[G\] holding the end row of each of B's G=2 groups")
    with pytest.raises(TypeError, match="group_ends must be int32"):
        dg.m_grouped_fp8_gemm_nt_contiguous((x, xs), (w, ws), out, torch.tensor([32.0, 64.0], device="cuda"),
                                            use_psum_layout=True)
    assert fgtest.is_poison(out).all()
    finegemm.reset_device_error_flags()
    ends = torch.tensor([100, 50], dtype=torch.int32, device="cuda")  # group 1 would start at 128
    dg.m_grouped_fp8_gemm_nt_contiguous((x, xs), (w, ws), out, ends, use_psum_layout=True)
    flags = finegemm.device_error_flags()
    assert flags == finegemm._C.kDeviceErrorGroupEndInvalid, flags
    ref, abs_sum = fgtest.reference_gemm(x[:100], xs[:100], w[0], ws[0])
    fgtest.check_output(out[:100], ref, abs_sum, "psum layout, the valid group beside an invalid one")
    assert fgtest.is_poison(out[100:]).all(), "rows of no group were written"
    finegemm.reset_device_error_flags()


@pytest.mark.gpu
def test_refused_arguments_on_the_gpu_leave_the_output_untouched():
    for call, out, message in refused_calls("cuda").values():
        expect_untouched(call, out, message)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("m,k", [(1, 128), (65, 576), (300, 7168)])
def test_utils_quantizers_match_their_formula(m, k):
    """deep_gemm.utils' quantizers: K-major scales equal to finegemm's, and with use_ue8m0 the power of two at or
    above them, x divided by it (exactly) and rounded to e4m3."""
    fgtest.seed()
    x = fgtest.activations(m, k)
    values, scales = finegemm.per_token_cast_to_fp8(x)
    q, s = dg.utils.per_token_cast_to_fp8(x, use_ue8m0=False)
    assert s.stride() == (s.shape[1], 1) and torch.equal(s, scales)
    assert torch.equal(q.view(torch.uint8), values.view(torch.uint8))
    q, s = dg.utils.per_token_cast_to_fp8(x, use_ue8m0=True)
    assert torch.equal(s, dg.utils.ceil_to_ue8m0(scales))
    assert torch.equal(torch.frexp(s)[0], torch.full_like(s, 0.5)), "UE8M0 scales must be powers of two"
    want = (x.float().cpu() / s.cpu().repeat_interleave(128, dim=1)[:, :k]).to(torch.float8_e4m3fn)
    assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))

    w = fgtest.weights(m, k)
    values, scales = finegemm.per_block_cast_to_fp8(w)
    q, s = dg.utils.per_block_cast_to_fp8(w, use_ue8m0=False)
    assert torch.equal(s, scales) and torch.equal(q.view(torch.uint8), values.view(torch.uint8))
    q, s = dg.utils.per_block_cast_to_fp8(w, True, 128)
    assert torch.equal(s, dg.utils.ceil_to_ue8m0(scales))
    expanded = s.cpu().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:m, :k]
    want = (w.float().cpu() / expanded).to(torch.float8_e4m3fn)
    assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))


@pytest.mark.gpu
def test_engine_settings():
    """vLLM's start-up calls: the SM count read and set back, PDL on for the run and off after."""
    sms = dg.get_num_sms()
    assert sms > 0
    try:
        dg.set_num_sms(sms)
        dg.set_pdl(True)
        assert dg.get_pdl()
        a, b, d = dense("cuda")
        dg.fp8_gemm_nt(a, b, d)
        torch.cuda.synchronize()
        assert torch.count_nonzero(d) == 0  # zeros in, zeros out, every element written
    finally:
        dg.set_num_sms(0)
        dg.set_pdl(False)
