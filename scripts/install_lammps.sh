#!/usr/bin/env bash
# Build LAMMPS with ML-IAP + Python coupling (pair_style mliap unified) and KSPACE (Ewald and
# PPPM, the reference of nvdd's long-range electrostatics) from source and install it into a
# Python virtual environment:
#   * the `lammps` Python package (a wheel that carries liblammps.so),
#   * `<venv>/bin/lmp`, a wrapper around the real binary that needs no exported variables.
#
# Usage: scripts/install_lammps.sh [PYTHON]      (PYTHON: the venv's python; default `python`)
#
# The build result is cached in ${NVDD_CACHE_DIR:-$HOME/.cache/nvdd}/lammps-<version>-<cpXY>-<packages>/;
# with a valid cache nothing is downloaded or compiled (a changed package list builds anew). NVDD_BUILD_JOBS sets ninja's -j.
#
# The source is Debian trixie's LAMMPS source archive, fetched with apt through a private
# configuration (own sources list and state dirs in the build's work dir); the system's apt
# setup is not touched. Missing build tools (mpicc, cmake, ninja, g++) are apt-get installed (root).
set -euo pipefail

START_TIME=$(date +%s)

LAMMPS_DEB_VERSION="20250204+dfsg.1"   # upstream "4 Feb 2025"
LAMMPS_VERSION="${LAMMPS_DEB_VERSION%%+*}"
DEB_SUITE="trixie"
# Bump when the recipe below changes in a way that needs a rebuild of cached builds.
RECIPE_REVISION=1

# The LAMMPS packages built in; they name the cache entry, so adding one rebuilds once.
PACKAGES=(KSPACE ML-IAP ML-SNAP PYTHON)
CMAKE_OPTIONS=(
    -D CMAKE_BUILD_TYPE=Release
    -D BUILD_SHARED_LIBS=ON
    -D BUILD_MPI=ON
    -D BUILD_OMP=OFF
    -D BUILD_TOOLS=OFF
    -D MLIAP_ENABLE_PYTHON=ON
    -D FFT=KISS   # KSPACE's FFTs: KISS FFT, built in (no FFTW dependency)
    -D WITH_JPEG=OFF
    -D WITH_PNG=OFF
    -D WITH_GZIP=OFF
    -D WITH_FFMPEG=OFF
    -D DOWNLOAD_POTENTIALS=OFF
    # lmp gets RUNPATH $ORIGIN: it finds liblammps next to itself once copied out of the build.
    -D CMAKE_BUILD_RPATH_USE_ORIGIN=ON
)
for package in "${PACKAGES[@]}"; do
    CMAKE_OPTIONS+=(-D "PKG_$package=ON")
done

log() { printf '[install_lammps +%3ds] %s\n' "$(( $(date +%s) - START_TIME ))" "$*"; }
die() { printf '[install_lammps] ERROR: %s\n' "$*" >&2; exit 1; }
finish() {
    local elapsed=$(( $(date +%s) - START_TIME ))
    log "done: total time $((elapsed / 60)) min $((elapsed % 60)) s"
}

# ---------------------------------------------------------------------------------------------
# The target Python
# ---------------------------------------------------------------------------------------------
PY_ARG="${1:-python}"
command -v "$PY_ARG" >/dev/null || die "python '$PY_ARG' not found"

# PY becomes sys.executable: the venv's own python (not its realpath, which would leave the
# venv), and the real interpreter behind a pyenv shim.
eval "$("$PY_ARG" - <<'EOF'
import shlex, sys, sysconfig
if sys.implementation.name != "cpython":
    sys.exit("only CPython is supported")
values = {
    "PY": sys.executable,
    "PY_TAG": f"cp{sys.version_info[0]}{sys.version_info[1]}",
    "PY_PREFIX": sys.prefix,
    "PY_IN_VENV": int(sys.prefix != sys.base_prefix),
    "PY_BIN": sysconfig.get_path("scripts"),
    "PY_SITE": sysconfig.get_path("platlib"),
    "PY_LIBDIR": sysconfig.get_config_var("LIBDIR"),
    "PY_SHARED": int(bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))),
}
for name, value in values.items():
    print(f"{name}={shlex.quote(str(value))}")
EOF
)"
[[ "$PY_SHARED" == 1 ]] || die "$PY is not built with a shared libpython (--enable-shared);" \
    "LAMMPS' embedded Python needs one"
[[ "$PY_IN_VENV" == 1 ]] || log "warning: $PY is not in a virtual environment; installing into $PY_PREFIX"
log "target python: $PY ($PY_TAG, prefix $PY_PREFIX)"

CACHE_ROOT="${NVDD_CACHE_DIR:-$HOME/.cache/nvdd}"
PACKAGE_TAG=$(IFS=-; echo "${PACKAGES[*]}")
CACHE_DIR="$CACHE_ROOT/lammps-$LAMMPS_VERSION-$PY_TAG-$PACKAGE_TAG"
STAMP="$CACHE_DIR/STAMP"
FINGERPRINT="lammps=$LAMMPS_DEB_VERSION recipe=$RECIPE_REVISION $PY_TAG cmake:$(printf ' %s' "${CMAKE_OPTIONS[@]}")"
mkdir -p "$CACHE_ROOT"

# Serialise concurrent runs that share this cache entry.
exec 9>"$CACHE_ROOT/.lock-lammps-$LAMMPS_VERSION-$PY_TAG-$PACKAGE_TAG"
flock 9

cache_valid() {
    [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$FINGERPRINT" ]] \
        && [[ -x "$CACHE_DIR/bin/lmp" ]] && [[ -s "$CACHE_DIR/liblammps-soname" ]] \
        && compgen -G "$CACHE_DIR/lammps-*.whl" >/dev/null
}

# ---------------------------------------------------------------------------------------------
# Build steps (only when the cache is not valid)
# ---------------------------------------------------------------------------------------------
ensure_system_packages() {
    local missing=()
    command -v mpicc >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
    command -v mpirun >/dev/null || missing+=(openmpi-bin)
    command -v cmake >/dev/null || missing+=(cmake)
    command -v ninja >/dev/null || missing+=(ninja-build)
    command -v g++ >/dev/null || missing+=(g++)
    command -v xz >/dev/null || missing+=(xz-utils)
    command -v readelf >/dev/null || missing+=(binutils)
    ((${#missing[@]} == 0)) && return
    [[ $(id -u) == 0 ]] || die "missing system packages (${missing[*]}); install them as root"
    log "apt-get install ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

debian_mirror() {
    local uri=""
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
    fi
    if [[ -z "$uri" && -f /etc/apt/sources.list ]]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
            /etc/apt/sources.list)
    fi
    [[ -n "$uri" ]] || die "cannot find the Debian mirror in /etc/apt/sources.list{,.d/debian.sources}"
    echo "$uri"
}

# Prints the path of the verified orig tarball (kept in $CACHE_ROOT/src for later rebuilds).
fetch_source() {
    local tarball="lammps_${LAMMPS_DEB_VERSION}.orig.tar.xz"
    local dest="$CACHE_ROOT/src/$tarball"
    if [[ -f "$dest" ]]; then
        log "source archive already downloaded: $dest" >&2
        echo "$dest"
        return
    fi
    local apt_dir="$WORK_DIR/apt" mirror
    mirror=$(debian_mirror)
    mkdir -p "$apt_dir"/{sources.list.d,preferences.d,lists/partial,cache/archives/partial}
    local apt_opts=(
        -o "Dir::Etc::SourceList=$apt_dir/sources.list"
        -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
        -o "Dir::Etc::Preferences=$apt_dir/preferences"
        -o "Dir::Etc::PreferencesParts=$apt_dir/preferences.d"
        -o "Dir::State=$apt_dir"
        -o "Dir::State::Lists=$apt_dir/lists"
        -o "Dir::State::status=/var/lib/dpkg/status"
        -o "Dir::Cache=$apt_dir/cache"
        -o "APT::Sandbox::User=root"
    )
    log "fetching the $DEB_SUITE source index from $mirror (private apt configuration)" >&2
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $DEB_SUITE main" \
        >"$apt_dir/sources.list"
    if ! apt-get "${apt_opts[@]}" -q update >&2; then
        log "signed update failed; retrying with [trusted=yes] for this private source only" >&2
        echo "deb-src [trusted=yes] $mirror $DEB_SUITE main" >"$apt_dir/sources.list"
        apt-get "${apt_opts[@]}" -q update >&2
    fi
    # The .dsc can be missing on some mirrors, so only the orig tarball is downloaded, by its
    # URI and SHA256 from the (signed) source index.
    local line uri sha
    line=$(apt-get "${apt_opts[@]}" source --print-uris lammps 2>/dev/null \
        | grep -F " $tarball " || true)
    [[ -n "$line" ]] || die "Debian $DEB_SUITE no longer lists $tarball (apt-get source --print-uris lammps)"
    uri=$(awk '{ gsub(/\x27/, "", $1); print $1 }' <<<"$line")
    sha=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^SHA256:/) print $i }' <<<"$line")
    [[ -n "$sha" ]] || die "no SHA256 for $tarball in the source index"
    log "downloading $tarball ($(awk '{ printf "%.0f MB", $3 / 1e6 }' <<<"$line"))" >&2
    mkdir -p "$CACHE_ROOT/src"
    /usr/lib/apt/apt-helper "${apt_opts[@]}" download-file "$uri" "$dest.part" "$sha" >&2
    mv "$dest.part" "$dest"
    echo "$dest"
}

build_into_cache() {
    ensure_system_packages
    # cythonize imports distutils: on Python >= 3.12 only setuptools provides it.
    log "pip install numpy cython setuptools mpi4py (build requirements) into $PY_PREFIX"
    "$PY" -m pip install -q numpy cython setuptools mpi4py
    [[ -x "$PY_BIN/cythonize" ]] || die "cythonize not found in $PY_BIN after installing cython"

    local tarball src build stage
    tarball=$(fetch_source)
    log "extracting $(basename "$tarball")"
    src="$WORK_DIR/src"
    mkdir -p "$src"
    tar -xJf "$tarball" -C "$src" --strip-components=1
    build="$WORK_DIR/build"

    log "configuring (cmake, Ninja)"
    cmake -S "$src/cmake" -B "$build" -G Ninja "${CMAKE_OPTIONS[@]}" \
        -D Python_EXECUTABLE="$PY" -D Cythonize_EXECUTABLE="$PY_BIN/cythonize" \
        >"$WORK_DIR/cmake.log" 2>&1 || { tail -n 40 "$WORK_DIR/cmake.log"; die "cmake failed"; }

    # nproc honours OMP_NUM_THREADS, which the Makefile sets to 1 for the tests.
    local jobs="${NVDD_BUILD_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}"
    log "compiling with ninja -j$jobs (5-20 min on 2 cores; progress every 100 steps)"
    if ! ninja -C "$build" -j "$jobs" 2>&1 | tee "$WORK_DIR/build.log" \
        | awk '/^\[[0-9]+\/[0-9]+\]/ && ++n % 100 == 0 { print "  ninja " $1; fflush() }'; then
        grep -n -m 20 -E 'error|Error' "$WORK_DIR/build.log" || true
        tail -n 30 "$WORK_DIR/build.log"
        cp "$WORK_DIR/build.log" "$CACHE_ROOT/lammps-build-failed.log"
        die "compilation failed (full log: $CACHE_ROOT/lammps-build-failed.log)"
    fi

    log "building the lammps wheel (python/install.py)"
    stage="$CACHE_DIR.partial"
    rm -rf "$stage"
    mkdir -p "$stage/bin"
    (cd "$WORK_DIR" && "$PY" "$src/python/install.py" -n -w "$stage" \
        -p "$src/python/lammps" -l "$build/liblammps.so" -v "$src/src/version.h") \
        >"$WORK_DIR/wheel.log" 2>&1 || true   # install.py ignores errors of its own steps
    compgen -G "$stage/lammps-*.whl" >/dev/null \
        || { tail -n 30 "$WORK_DIR/wheel.log"; die "python/install.py made no wheel"; }

    cp "$build/lmp" "$stage/bin/lmp"
    readelf -d "$build/liblammps.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p' >"$stage/liblammps-soname"
    cp "$WORK_DIR/cmake.log" "$WORK_DIR/build.log" "$stage/"
    echo "$FINGERPRINT" >"$stage/STAMP"   # written last: marks the entry complete
    rm -rf "$CACHE_DIR" "$CACHE_ROOT/lammps-build-failed.log"
    mv "$stage" "$CACHE_DIR"
    log "cached in $CACHE_DIR"
}

# ---------------------------------------------------------------------------------------------
# Install from the cache into the venv
# ---------------------------------------------------------------------------------------------
install_from_cache() {
    if ! "$PY" -c "import numpy, mpi4py" 2>/dev/null; then
        log "pip install numpy mpi4py (runtime requirements)"
        "$PY" -m pip install -q numpy mpi4py
    fi
    local wheel
    wheel=$(compgen -G "$CACHE_DIR/lammps-*.whl" | head -n 1)
    log "pip install $(basename "$wheel")"
    "$PY" -m pip install -q --no-deps --force-reinstall "$wheel"

    # The real binary lives in <prefix>/lib/lammps next to a link to the wheel's liblammps
    # (lmp's RUNPATH is $ORIGIN), so the Python module and lmp load the same library file.
    local libexec="$PY_PREFIX/lib/lammps" soname
    soname=$(cat "$CACHE_DIR/liblammps-soname")
    mkdir -p "$libexec"
    cp -f "$CACHE_DIR/bin/lmp" "$libexec/lmp.tmp"
    mv -f "$libexec/lmp.tmp" "$libexec/lmp"
    ln -sfn "$PY_SITE/lammps/liblammps.so" "$libexec/$soname"

    # PATH: LAMMPS' embedded interpreter locates its prefix through `python3` on PATH, so the
    # venv's bin/ must come first for it to see the venv's site-packages (and .pth files).
    # LD_LIBRARY_PATH: libpython of the Python this venv was made from.
    mkdir -p "$PY_BIN"
    cat >"$PY_BIN/lmp.tmp" <<EOF
#!/bin/sh
# LAMMPS $LAMMPS_VERSION (ML-IAP + Python) for this environment; written by nvdd's
# scripts/install_lammps.sh. The real binary is $libexec/lmp.
export PATH="$PY_BIN\${PATH:+:\$PATH}"
export LD_LIBRARY_PATH="$PY_LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$libexec/lmp" "\$@"
EOF
    chmod +x "$PY_BIN/lmp.tmp"
    mv -f "$PY_BIN/lmp.tmp" "$PY_BIN/lmp"
    log "installed $PY_BIN/lmp"
}

verify() {
    log "checking the installation"
    (cd / && "$PY" - <<'EOF') || die "the lammps Python module does not work"
import lammps
from lammps import mliap
from lammps.mliap.mliap_unified_abc import MLIAPUnified
lmp = lammps.lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
missing = {"KSPACE", "ML-IAP", "ML-SNAP", "PYTHON"} - set(lmp.installed_packages)
assert not missing, f"LAMMPS lacks packages {missing}"
from mpi4py import MPI
comm = lmp.get_mpi_comm()
assert comm is not None and comm.Get_size() == 1, (
    "mpi4py cannot wrap LAMMPS' communicator: mpi4py uses "
    f"{MPI.Get_library_version().splitlines()[0]!r}; LAMMPS needs the MPI it was built with "
    "(do not install the mpich wheel into this environment)")
print(f"  python: lammps {lmp.version()} from {lammps.__file__}, packages and mpi4py ok")
lmp.close()
EOF
    local out
    out=$(cd / && "$PY_BIN/lmp" -nocite -log none -h 2>&1) || die "$PY_BIN/lmp -h failed: $out"
    grep -q "ML-IAP" <<<"$out" || die "$PY_BIN/lmp lacks the ML-IAP package"
    log "  lmp: $(grep -m 1 'Large-scale' <<<"$out" || echo ok)"
}

if cache_valid; then
    log "using cached build $CACHE_DIR"
else
    log "no valid cache at $CACHE_DIR: downloading and building LAMMPS $LAMMPS_VERSION"
    # Fixed names, under the lock: leftovers of an interrupted run are simply replaced.
    WORK_DIR="$CACHE_DIR.work"
    rm -rf "$WORK_DIR" "$CACHE_DIR.partial"
    mkdir -p "$WORK_DIR"
    trap 'rm -rf "$WORK_DIR" "$CACHE_DIR.partial"' EXIT
    build_into_cache
fi
install_from_cache
verify
finish
