"""The `finegemm` command that pip installs: on PATH, and it runs the CLI bundled in the package."""

import os
import shutil
import subprocess

from fgtest import finegemm


def test_finegemm_command_is_on_path_and_prints_usage():
    command = shutil.which("finegemm")
    assert command, f"no finegemm command on PATH ({os.environ.get('PATH', '')})"
    result = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"finegemm --help exited {result.returncode}:\n{result.stdout}{result.stderr}"
    assert "usage: finegemm" in result.stdout + result.stderr


def test_bundled_cli_is_in_the_package():
    binary = os.path.join(os.path.dirname(finegemm.__file__), "bin", "finegemm")
    assert os.access(binary, os.X_OK), f"{binary} is missing or not executable"
