#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs into one archive for a GPU machine that has neither this
# build's Debian packages nor a compiler for them: the built `cnlab`, `libcnlab-vgpu.so` and
# `cnlab-cuda-checkpoint`, this machine's CRIU when there is one, and every shared library they
# load except the C library's own. Each binary's RPATH is set to the bundle's lib/ (with patchelf,
# as DT_RPATH, so that it also covers the libraries' own dependencies), so nothing on the target
# machine is replaced and no LD_LIBRARY_PATH reaches the jobs. The preload library needs only the
# C library and is copied as it is.
#
#   scripts/gpu-bundle.sh [BUILD_DIR] ARCHIVE      (default BUILD_DIR: build; ARCHIVE: a .tar.xz)
#
# On the GPU machine: `mkdir -p B && tar -xJf ARCHIVE -C B`, copy B/sbin/criu to /usr/local/sbin
# if the machine has none, then `scripts/gpu-check.sh B/build` (a path relative to the checkout).
set -euo pipefail

if [ $# -eq 2 ]; then BUILD=$1; ARCHIVE=$2; elif [ $# -eq 1 ]; then BUILD=build; ARCHIVE=$1; else
  echo "usage: scripts/gpu-bundle.sh [BUILD_DIR] ARCHIVE" >&2; exit 2
fi
command -v patchelf >/dev/null || { echo "gpu-bundle: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
for f in cnlab libcnlab-vgpu.so; do
  [ -f "$BUILD/$f" ] || { echo "gpu-bundle: $BUILD/$f is not built (make build)" >&2; exit 2; }
done

STAGE=$(mktemp -d /tmp/cnlab-gpu-bundle.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/build" "$STAGE/lib" "$STAGE/sbin"

# The C library and the loader come from the target machine: a copy of them cannot be mixed with it.
libraries_of() {
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so[^/]*$' || true
}
bundle() {  # bundle BINARY DIR: the binary into STAGE/DIR, its libraries into STAGE/lib
  cp -L "$1" "$STAGE/$2/"
  for lib in $(libraries_of "$1"); do cp -Ln "$lib" "$STAGE/lib/" 2>/dev/null || true; done
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$STAGE/$2/$(basename "$1")"
}

bundle "$BUILD/cnlab" build
[ -f "$BUILD/cnlab-cuda-checkpoint" ] && bundle "$BUILD/cnlab-cuda-checkpoint" build
cp "$BUILD/libcnlab-vgpu.so" "$STAGE/build/"
CRIU=$(command -v criu || ls /usr/local/sbin/criu 2>/dev/null || true)
if [ -n "$CRIU" ]; then bundle "$CRIU" sbin; else echo "gpu-bundle: no criu here; the bundle has none"; fi

tar -cJf "$ARCHIVE" -C "$STAGE" .
echo "gpu-bundle: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): $(ls "$STAGE/build" "$STAGE/sbin" | grep -v : | xargs)," \
  "$(ls "$STAGE/lib" | wc -l) libraries"
