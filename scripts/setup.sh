#!/usr/bin/env bash
# Installs the Debian packages troupe needs to build and test. Idempotent: when every package is
# already installed it does nothing (no apt-get update, no network). Prints one line saying what
# it did. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential g++ cmake
  libasio-dev libssl-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  pkg-config procps iproute2 nftables clang-format
  elfutils
  clang-14 libclang-rt-14-dev lld
  slurm-wlm slurmctld slurmd slurm-client munge
  libcpp-httplib-dev prometheus chromium
)
# The Python package (python/): build, tests, and `pip install --no-build-isolation .`.
packages+=(
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-torch python3-cloudpickle
  python3-pip python3-setuptools python3-wheel python3-venv
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != ii* ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed, nothing to do"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "setup: missing packages (${missing[*]}) and not root; run as root or install sudo" >&2
    exit 1
  fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "${sudo[@]}" apt-get update -q >"$log" 2>&1 ||
  ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${missing[@]}" </dev/null >>"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: FAILED to install: ${missing[*]}" >&2
  exit 1
fi
echo "setup: installed ${#missing[@]} package(s): ${missing[*]}"
