#!/usr/bin/env bash
# Installs the Debian packages muloco needs to build, test and run its demo. Idempotent and
# fast when everything is present (one dpkg query); run as root (or with sudo available).
set -euo pipefail
PKGS=(build-essential cmake pkg-config ccache
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
      libtorch-dev libxxhash-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev pybind11-dev python3-dev libsentencepiece-dev
      prometheus python3-torch python3-grpcio python3-protobuf python3-xxhash fortunes openssl docker-compose python3-yaml gnuplot-nox)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
