#!/usr/bin/env bash
# Installs CRIU 4.1.1, the checkpoint/restore engine the agent uses, when the machine's own `criu`
# cannot checkpoint here. Debian 12's criu 3.17 cannot dump on newer kernels, so this builds
# 4.1.1 from Debian trixie's source package (the upstream tarball Debian ships; its .dsc is not
# fetchable from the snapshot, so the build uses the orig tarball alone) with build dependencies
# from bookworm, and installs the binary as /usr/local/sbin/criu. Nothing is fetched from anywhere
# but Debian's archive. Idempotent: does nothing when `criu check` already passes.
#
# CRIU_FAULT=130 makes CRIU take its no-hardware-breakpoint path; virtual machines whose debug
# registers never fire hang in `criu dump` without it (the agent sets it the same way).
set -euo pipefail

version=4.1.1
prefix=/usr/local/sbin

if command -v criu >/dev/null 2>&1 && CRIU_FAULT=130 timeout 60 criu check >/dev/null 2>&1; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-criu: the system's criu is missing or fails 'criu check'; building CRIU $version from Debian trixie's source"

build_deps=(
  build-essential pkg-config libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler
  python3-protobuf libnl-3-dev libnet1-dev libcap-dev libgnutls28-dev libnftables-dev libbsd-dev
  uuid-dev libaio-dev dpkg-dev xz-utils
)
sources=/etc/apt/sources.list.d/cnlab-trixie-src.sources
if [ ! -f "$sources" ]; then
  # Source packages only (Types: deb-src): nothing installed from trixie, the same archive and keyring.
  $sudo tee "$sources" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${build_deps[@]}" >/dev/null

work=$(mktemp -d /tmp/cnlab-criu.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
# Fetches criu_<version>.orig.tar.xz, then fails on the .dsc and the Debian tarball; only the
# orig tarball is needed.
apt-get source --download-only "criu=$version-*" >/dev/null 2>&1 || apt-get source --download-only criu >/dev/null 2>&1 || true
tarball=$(ls criu_"$version".orig.tar.* 2>/dev/null | head -n1 || true)
if [ -z "$tarball" ]; then
  echo "install-criu: criu_$version.orig.tar.* was not fetched from Debian's trixie sources" >&2
  exit 1
fi
mkdir src
tar -xf "$tarball" -C src --strip-components=1
make -C src -j"$(nproc)" criu >build.log 2>&1 || { tail -n 40 build.log >&2; exit 1; }
$sudo install -m 0755 src/criu/criu "$prefix/criu"
if CRIU_FAULT=130 timeout 60 "$prefix/criu" check >/dev/null 2>&1; then
  echo "install-criu: installed CRIU $version as $prefix/criu ('criu check' passes)"
else
  echo "install-criu: CRIU $version installed as $prefix/criu, but 'criu check' fails here; jobs fall back to application checkpoints" >&2
  CRIU_FAULT=130 timeout 60 "$prefix/criu" check 2>&1 | tail -n 5 >&2 || true
fi
