#!/usr/bin/env bash
# Puts FlashInfer's CUDA headers (and the CUTLASS and CCCL its wheel ships,
# which its Hopper kernels are written against) under third_party/flashinfer.
# Only headers are used: tessera compiles one FlashInfer kernel, the sm_90a
# paged prefill attention (src/backend/cuda/attention_prefill_sm90.cu), and
# one CUTLASS kernel from the same headers, the sm_90a mixed-input GEMM for
# 4-bit weights (src/backend/cuda/w4a16_sm90.cu); no Python part of
# FlashInfer is installed or run. The wheel is pinned by
# version and checked against its sha256. Safe to run again: does nothing
# once the headers are there.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.7.4
sha256=a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32
dest=third_party/flashinfer
stamp="$dest/.version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ]; then
  exit 0
fi

python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetch_flashinfer: downloading flashinfer-python $version (headers only are kept)"
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$work" "flashinfer-python==$version"
wheel=$(ls "$work"/flashinfer_python-"$version"-*.whl)
echo "$sha256  $wheel" | sha256sum -c --quiet -
rm -rf "$dest"
mkdir -p "$dest"
# The headers, and the licences that travel with them.
"$python" - "$wheel" "$dest" "$version" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
keep = ("flashinfer/data/include/", "flashinfer/data/cutlass/include/",
        "flashinfer/data/cutlass/tools/util/include/", "flashinfer/data/cccl/",
        f"flashinfer_python-{sys.argv[3]}.dist-info/licenses/")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(keep) and not name.endswith("/"):
            z.extract(name, dest)
PY
echo "$version" > "$stamp"
echo "fetch_flashinfer: headers in $dest/flashinfer/data"
