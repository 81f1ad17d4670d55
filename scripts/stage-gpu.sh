#!/usr/bin/env bash
# Builds kiln and its test binaries here (release, no debug info) and stages them with the
# fixtures in .gpu/ (git-ignored), for `device run` with carry [".gpu"].
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/tests .gpu/fixtures
cargo build --release -p kiln-cli
cp target/release/kiln .gpu/
cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        name = m["target"]["name"] + ("-lib" if "lib" in m["target"]["kind"] else "")
        shutil.copy(m["executable"], os.path.join(".gpu/tests", name))
'
cp ../shared/fixtures/ops.json ../shared/fixtures/ops.safetensors .gpu/fixtures/
cp -r ../shared/fixtures/models .gpu/fixtures/ 2>/dev/null || true
[ -d bench ] && cp bench/*.py .gpu/ 2>/dev/null || true
strip .gpu/kiln .gpu/tests/* 2>/dev/null || true
cp scripts/gpu-test.sh .gpu/
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > .gpu/COMMIT
du -sh .gpu
ls .gpu/tests
