"""The ``finegemm`` command that pip installs: runs the CLI bundled in the package (finegemm/bin/finegemm)."""

import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "finegemm")
    if not os.access(binary, os.X_OK):
        sys.exit(f"finegemm: the command-line tool {binary} is missing from the installed package; reinstall it with "
                 "pip install --no-build-isolation . from a finegemm checkout")
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
