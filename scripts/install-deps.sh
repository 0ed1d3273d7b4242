#!/usr/bin/env bash
# Installs the system libraries ffn-rs builds against, when missing (Debian/Ubuntu, apt-get).
set -euo pipefail
packages=(libhdf5-dev libopenmpi-dev openmpi-bin libzmq3-dev pkg-config clang libclang-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
