#!/usr/bin/env bash
# The SmolLM2 GGUF (~94 MiB) is larger than one device call may carry (64 MiB). Split it into
# two ignored folders, .carry1 and .carry2, each carried by one of two calls made back to back
# (the machine keeps /tmp for 30 s after a call):
#   here:    bash tests/gpu/carry-model.sh
#   call 1:  carry [".carry1"]:          STAGES=carry1 bash tests/gpu/run.sh   (copies part 1 to /tmp)
#   call 2:  carry [".debs", ".carry2"]: STAGES="build smollm2" bash tests/gpu/run.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
model=$("$top/launcher/fetch-model.sh")
cd "$top"
for d in .carry1 .carry2; do
    grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude
    rm -rf "$d" && mkdir -p "$d"
done
split -b 50M -d "$model" .carry1/smollm2.part
mv .carry1/smollm2.part01 .carry2/
ls -l .carry1 .carry2
