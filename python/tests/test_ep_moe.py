"""examples/ep_moe.py under torchrun on two GPUs: the expert-parallel MoE layer matches the layer on one GPU and loses
no (token, expert) pair, in prefill and in its CUDA-graph decode step; a rank that fails ends the job within a minute,
with its message. Skipped, with the reason, on machines with fewer than two Hopper GPUs.
"""

import os
import subprocess
import sys
import time

import pytest

import fgtest
from fgtest import torch

pytestmark = pytest.mark.gpu

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ep_moe.py")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def torchrun(ranks, *args, timeout):
    """The example under torchrun on `ranks` GPUs: (exit code, output, seconds)."""
    env = dict(os.environ, **MULTICAST_OFF)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), EXAMPLE, *args]
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


@pytest.fixture(autouse=True)
def two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two GPUs, this machine has {torch.cuda.device_count()}")


def test_two_ranks_match_one_gpu_and_lose_no_pair():
    code, output, _ = torchrun(2, "--tokens", "1024", "--decode-tokens", "64", "--steps", "3", "--no-bf16",
                               timeout=600)
    assert code == 0 and "0 failed checks over 2 ranks" in output, output[-6000:]


def test_a_failing_rank_ends_the_job_within_a_minute():
    code, output, seconds = torchrun(2, "--tokens", "512", "--decode-tokens", "64", "--steps", "3", "--no-bf16",
                                     "--fail-rank", "1", "--timeout", "30", timeout=600)
    assert code != 0, output[-6000:]
    assert "[rank 1] exiting with an error mid-run" in output, output[-6000:]
    # The time from the failure on: the run up to it (weights, checks, compiles) is printed by the example first.
    assert seconds < 60 + setup_seconds(output), f"the job took {seconds:.0f} s to end:\n{output[-6000:]}"


def setup_seconds(output):
    """Seconds the example took before its rank failed on purpose (it prints them with the failure)."""
    for line in output.splitlines():
        if "exiting with an error mid-run" in line and "after" in line:
            return float(line.rsplit("after", 1)[1].split()[0])
    return 0.0
