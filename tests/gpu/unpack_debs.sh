#!/usr/bin/env bash
# Unpacks .gpu-debs/ (from tests/gpu/fetch_debs.sh) into a private PREFIX (never /), fixes symlinks and
# .pc files for that location, and writes PREFIX/env.sh (source it) + PREFIX/gpu-deps.cmake (cmake -C).
# Usage: tests/gpu/unpack_debs.sh PREFIX   then: . PREFIX/env.sh && cmake -C PREFIX/gpu-deps.cmake -S . -B ...
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] && [ "$1" != / ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
mkdir -p "$1" && P=$(cd "$1" && pwd) && L=$P/usr/lib/x86_64-linux-gnu
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$P"; done
# Fallbacks only where the host lacks the soname.
LDC=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p)
host_has() { grep -q "^[[:space:]]*$1 (libc6,x86-64)" <<<"$LDC"; }
host_has libssl.so.3 && host_has libcrypto.so.3 || dpkg -x .gpu-debs/fallback/libssl3_*.deb "$P"
host_has libz.so.1 || dpkg -x .gpu-debs/fallback/zlib1g_*.deb "$P"
# Absolute symlinks -> relative ones inside PREFIX.
find "$P" -type l -lname '/*' | while read -r l; do
  ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$P$(readlink "$l")")" "$l"; done
# Dangling dev links (libssl.so, libz.so, ... whose runtime package was not unpacked) -> host's soname.
find "$L" -maxdepth 1 -xtype l -name '*.so' | while read -r l; do
  so=$(readlink "$l" | sed -E 's/(\.so\.[0-9]+).*/\1/'); so=${so##*/}
  h=$(awk -v s="$so" '$1 == s && /x86-64/ {print $NF; exit}' <<<"$LDC")
  if [ -n "$h" ]; then ln -sfn "$h" "$l"; else echo "WARNING: $l dangles, host has no $so" >&2; fi; done
# pkg-config files say prefix=/usr (or libdir=/usr/...): point them at PREFIX.
sed -i -E "s#^([a-z_]+)=/usr#\1=$P/usr#" "$L"/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc 2>/dev/null || true
# CMake configs compute their prefix from their own location; anything absolute left would be a bug.
if grep -rn '"/usr' "$L/cmake" | grep -v '/usr move\|_realOrig\|PACKAGE_PREFIX_DIR "/usr"\|_IMPORT_PREFIX "/usr'; then
  echo "WARNING: absolute /usr paths in CMake configs above" >&2; fi
# Runtime libs whose dependencies the host lacks (libcurl's are expected: only prometheus-cpp-push uses it).
for f in "$L"/*.so.*[0-9] "$P"/usr/bin/*; do
  [ -L "$f" ] && continue; n=$(LD_LIBRARY_PATH=$L ldd "$f" 2>/dev/null | grep -c 'not found' || true)
  [ "$n" = 0 ] || echo "note: $(basename "$f") needs $n libs that neither PREFIX nor the host has"
done | grep -v 'libcurl\|prometheus-cpp-push' >&2 || true
cat > "$P/env.sh" <<EOF
export MULOCO_DEPS_PREFIX=$P
export CMAKE_PREFIX_PATH=$P/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}
export PKG_CONFIG_PATH=$L/pkgconfig:$P/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}
export PATH=$P/usr/bin:\$PATH
export LD_LIBRARY_PATH=$L\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
cat > "$P/gpu-deps.cmake" <<EOF
# cmake -C $P/gpu-deps.cmake: find the unpacked bookworm packages first, and give the programs an rpath.
set(CMAKE_PREFIX_PATH "$P/usr" CACHE STRING "")
set(PKG_CONFIG_EXECUTABLE "$P/usr/bin/pkgconf" CACHE FILEPATH "")
set(Protobuf_PROTOC_EXECUTABLE "$P/usr/bin/protoc" CACHE FILEPATH "")
set(GRPC_CPP_PLUGIN "$P/usr/bin/grpc_cpp_plugin" CACHE FILEPATH "")
set(CMAKE_BUILD_RPATH "$L" CACHE STRING "")
# DT_RPATH (unlike RUNPATH) also serves the libs' own deps (libgrpc++ -> libgrpc -> libabsl_*): the
# built programs then run without LD_LIBRARY_PATH. protoc and grpc_cpp_plugin still need env.sh's.
set(CMAKE_EXE_LINKER_FLAGS "-Wl,--disable-new-dtags" CACHE STRING "")
# -DMULOCO_DEPS_STRICT=ON: never look in /usr for packages (Torch then needs Torch_DIR).
if(MULOCO_DEPS_STRICT)
  set(CMAKE_IGNORE_PREFIX_PATH "/usr;/;/usr/local" CACHE STRING "")
  # civetweb-config's FindLibDl/FindLibRt want libc6-dev's libdl.a/librt.a (empty since glibc 2.34).
  set(LIBDL_LIBRARIES /usr/lib/x86_64-linux-gnu/libdl.a CACHE FILEPATH "")
  set(LIBRT_LIBRARIES /usr/lib/x86_64-linux-gnu/librt.a CACHE FILEPATH "")
  set(LIBDL_INCLUDE_DIRS /usr/include CACHE PATH "")
  set(LIBRT_INCLUDE_DIRS /usr/include CACHE PATH "")
endif()
EOF
echo "unpacked into $P; now: . $P/env.sh && cmake -C $P/gpu-deps.cmake ..."
