#!/usr/bin/env bash
# Makes the Python environment of the interoperability tests (ffn-cli/tests/zarr_interop.rs,
# precomputed_interop.rs): a venv with the reference clients from PyPI (zarr, tensorstore), outside
# the tracked files. Prints the interpreter's path; point FFN_PYTHON at it:
#
#   export FFN_PYTHON=$(bash scripts/python-interop-env.sh)
#
# VENV (default target/py-interop) chooses the folder. Needs python3 with venv (Debian:
# python3-venv) and network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-target/py-interop}
packages=(numpy "zarr>=3.1,<4" numcodecs "tensorstore>=0.1.60")
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c "import zarr, numpy, numcodecs, tensorstore" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}" >&2
fi
"$venv/bin/python" -c "import zarr, numpy, tensorstore, sys; from importlib.metadata import version; print(f'zarr {zarr.__version__}, tensorstore {version(\"tensorstore\")}, numpy {numpy.__version__}', file=sys.stderr)"
echo "$(cd "$venv" && pwd)/bin/python"
