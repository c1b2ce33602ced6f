#!/usr/bin/env bash
# Downloads (on a Debian 12 bookworm machine with apt) the .deb files that let an offline
# Ubuntu 24.04 GPU host build muloco: gRPC, protobuf, abseil, prometheus-cpp, xxhash, GoogleTest,
# Google Benchmark + their runtime libs, into .gpu-debs/. Unpack there with tests/gpu/unpack_debs.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.gpu-debs
PKGS=(
  # -dev packages, compilers and CMake configs (civetweb-targets.cmake checks that bin/civetweb exists)
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libcivetweb-dev civetweb libxxhash-dev libgtest-dev libgmock-dev googletest libbenchmark-dev
  # what gRPCConfig (ZLIB, OpenSSL, c-ares, re2) and prometheus-cpp-config (civetweb, ZLIB, CURL) look for
  libc-ares-dev libre2-dev libssl-dev zlib1g-dev libcurl4-openssl-dev
  # runtime libraries
  libgrpc++1.51 libgrpc29 libprotobuf32 libprotobuf-lite32 libprotoc32 libabsl20220623
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 libcivetweb1
  libxxhash0 libbenchmark1debian libc-ares2 libre2-9 libcurl4
  # pkg-config (find_package(PkgConfig REQUIRED)), in case the host lacks one
  pkgconf pkgconf-bin libpkgconf3
)
# Fallbacks, unpacked only where the host lacks libssl.so.3 / libz.so.1 (Ubuntu 24.04 normally has
# libssl3t64 and zlib1g: same sonames). Linking against the host's copy keeps one OpenSSL/zlib per process.
FALLBACK=(libssl3 zlib1g)
# Left out on purpose (apt's Depends closure minus the lists above):
#  - libc/toolchain, present with g++ on Ubuntu 24.04: libc6 libc6-dev libc-dev-bin linux-libc-dev libcrypt1
#    libcrypt-dev libnsl2 libnsl-dev libtirpc3 libtirpc-dev libtirpc-common rpcsvc-proto gcc-12-base
#    libgcc-s1 libstdc++6
#  - libcurl4's own dependencies (krb5, ldap, gnutls, nghttp2, ssh2, ...): libcurl is needed only by
#    libprometheus-cpp-push, which muloco does not link; libcurl4(-dev) ship only so that
#    prometheus-cpp-config's find_dependency(CURL) succeeds.
EXCLUDE="libc6 libc6-dev libc-dev-bin linux-libc-dev libcrypt1 libcrypt-dev libnsl2 libnsl-dev libtirpc3
  libtirpc-dev libtirpc-common rpcsvc-proto gcc-12-base libgcc-s1 libstdc++6 libbrotli1 libcom-err2
  libgssapi-krb5-2 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 libsasl2-2
  libsasl2-modules-db libdb5.3 libnghttp2-14 libidn2-0 libunistring2 libpsl5 librtmp1 libgnutls30
  libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libffi8 libssh2-1 libzstd1"

apt-cache show libgrpc++-dev >/dev/null 2>&1 || apt-get update
# Check the list against apt's recursive Depends closure: anything new must be listed or excluded.
missing=$(apt-cache depends --recurse --no-recommends --no-suggests --no-enhances --no-breaks \
    --no-conflicts --no-replaces "${PKGS[@]}" | grep -v '^ ' | grep -v '^<' | sort -u |
  grep -vxF -f <(printf '%s\n' "${PKGS[@]}" "${FALLBACK[@]}" $EXCLUDE) || true)
[ -z "$missing" ] || { echo "unaccounted dependencies: $missing" >&2; exit 1; }

rm -rf "$DEST" && mkdir -p "$DEST/fallback"
(cd "$DEST" && apt-get download -o APT::Sandbox::User=root "${PKGS[@]}")
(cd "$DEST/fallback" && apt-get download -o APT::Sandbox::User=root "${FALLBACK[@]}")
# The default corpus (Debian's fortunes package), which a GPU host does not have.
cp -r /usr/share/games/fortunes "$DEST/fortunes"
echo "$(ls "$DEST"/*.deb "$DEST"/fallback/*.deb | wc -l) packages and the fortunes corpus, total: $(du -sh "$DEST" | cut -f1)"
