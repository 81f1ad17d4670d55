#!/usr/bin/env bash
# Builds kiln and its test binaries here (release, no debug info) and stages them with the
# fixtures in .gpu/ (git-ignored), for `device run` with carry [".gpu"]. Only the test binaries
# that touch the GPU go (gpu_*, both_* and kiln's unit tests; CI runs the others), packed with
# xz to fit the 64 MiB carry limit; gpu-test.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/.."
# Staged beside .gpu/ and swapped in at the end, so a GPU call can carry the old one meanwhile.
S=.gpu-next
rm -rf "$S" && mkdir -p "$S/tests" "$S/fixtures"
# One build: the test build makes the kiln binary too (kiln-cli's CLI tests run it), with
# the workspace's features, so a separate `cargo build -p kiln-cli` would compile kiln again.
T=${CARGO_TARGET_DIR:-target}
cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
  S="$S" python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        name = m["target"]["name"] + ("-lib" if "lib" in m["target"]["kind"] else "")
        shutil.copy(m["executable"], os.path.join(os.environ["S"], "tests", name))
'
cp "$T"/release/kiln "$S"/
cp -r fixtures/. "$S"/fixtures/
# The kernel families whose sources use shared memory: gpu-test.sh sanitize racechecks each.
grep -l "__shared__" crates/kiln/src/cuda/kernels/*.cu | xargs -n1 basename | sed 's/\.cu$//' > "$S"/shared_kernels.txt
[ -d bench ] && cp bench/*.py "$S"/ 2>/dev/null || true
find "$S"/tests -type f ! -name 'gpu_*' ! -name 'both_*' ! -name 'kiln-lib' -delete
strip "$S"/kiln "$S"/tests/* 2>/dev/null || true
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > "$S"/COMMIT
# Packed beside the folder, then moved in: tar fails on a folder that changes as it reads it.
tar cf - -C "$S" . | xz -T0 -6 > "$S.tar.xz"
find "$S" -mindepth 1 -delete
mv "$S.tar.xz" "$S"/bundle.tar.xz
cp scripts/gpu-test.sh "$S"/
rm -rf .gpu && mv "$S" .gpu
ls -la .gpu
