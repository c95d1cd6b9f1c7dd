#!/usr/bin/env bash
# Installs the Debian 12 packages CNLab builds against. Idempotent and quiet when all are present;
# uses sudo when not run as root. `prometheus` is the real server the metrics test scrapes with.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang-format
  nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost1.74-dev libssl-dev openssl libsqlite3-dev libarchive-dev
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -ne 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# CRIU, the agent's checkpoint engine: built from Debian's trixie source where the system's fails.
"$(dirname "$0")/install-criu.sh"
