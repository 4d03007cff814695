"""Skips, with the reason shown in pytest's summary (-rs), what this machine cannot run.

Markers: ``torch`` (needs PyTorch, any device) and ``gpu`` (needs PyTorch and a Hopper GPU). Every test needs the
installed finegemm package.
"""

import pytest

import fgtest


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: needs PyTorch (CPU tensors are enough)")
    config.addinivalue_line("markers", "gpu: needs PyTorch and a Hopper GPU (sm_90)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = fgtest.FINEGEMM_MISSING
        if reason is None and "gpu" in item.keywords:
            reason = fgtest.GPU_MISSING
        if reason is None and "torch" in item.keywords:
            reason = fgtest.TORCH_MISSING
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
