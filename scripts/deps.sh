#!/usr/bin/env bash
# Installs kiln's build and test dependencies from Debian's packages (skips
# those already present). The CUDA toolkit, when present, is used as found.
set -euo pipefail
pkgs=(cmake ninja-build g++ libasmjit-dev libtbb-dev libopenblas-dev nlohmann-json3-dev
      libgtest-dev python3-torch libtorch-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
