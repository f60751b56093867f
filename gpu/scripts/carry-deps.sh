#!/usr/bin/env bash
# Builds qmx-sim on a GPU machine that has CUDA, CMake, a C++ compiler and Python but none of Debian's
# packages (gpu/README.md "Building on a GPU machine without Debian's packages"):
#   here (Debian 12, network):  bash gpu/scripts/carry-deps.sh download   # the -dev packages into build-deps/debs
#   there (no network):         bash gpu/scripts/carry-deps.sh unpack     # into build-deps/root, and build-deps/env.sh
#                               source build-deps/env.sh && cmake -S . -B build-gpu $QMX_DEPS_CMAKE ...
#   or, there, in one step:     bash gpu/scripts/carry-deps.sh build [TARGET ...]   # unpack, configure and build build-gpu
# `build` compiles the CPU library's SIMD kernels for the machine's own target only (HWY_COMPILE_ONLY_STATIC,
# -march=native, no FMA contraction): about 1 minute on 16 cores against 4 for every target; QMX_GPU_CMAKE adds CMake flags.
# build-deps/ is ignored by git (build-*/); carry it to the GPU machine with the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=build-deps
pkgs=(libhwy-dev libhwy1 libeigen3-dev libcli11-dev nlohmann-json3-dev libmpfr-dev libmpfr6 libgmp-dev libgmp10
      libgmpxx4ldbl catch2 pybind11-dev
      fortunes)  # the training study's corpus (notebooks-data/training): build-deps/root/usr/share/games/fortunes
case "${1:-}" in
  download)
    mkdir -p "$deps/debs"
    (cd "$deps/debs" && apt-get download "${pkgs[@]}")
    ls "$deps/debs"
    ;;
  unpack)
    [ -d "$deps/debs" ] || { echo "carry-deps: no $deps/debs here: run 'download' on a Debian machine and carry $deps" >&2; exit 2; }
    root="$PWD/$deps/root"
    rm -rf "$root" && mkdir -p "$root"
    for f in "$deps"/debs/*.deb; do dpkg-deb -x "$f" "$root"; done
    # pkg-config files name /usr; point them at the unpacked tree (MPFR is found through pkg-config).
    find "$root" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$root/usr|" {} +
    lib="$root/usr/lib/x86_64-linux-gnu"
    cat > "$deps/env.sh" <<EOF
export QMX_DEPS="$root"
export PKG_CONFIG_PATH="$lib/pkgconfig:$root/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
export CPATH="$root/usr/include/x86_64-linux-gnu\${CPATH:+:\$CPATH}"
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export QMX_DEPS_CMAKE="-DCMAKE_PREFIX_PATH=$root/usr -DCMAKE_INCLUDE_PATH=$root/usr/include"
EOF
    echo "unpacked ${#pkgs[@]} packages into $root; now: source $deps/env.sh"
    ;;
  build)
    shift
    bash gpu/scripts/carry-deps.sh unpack > /dev/null
    # shellcheck disable=SC1091
    source "$deps/env.sh"
    # shellcheck disable=SC2086
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQMX_PYTHON=OFF $QMX_DEPS_CMAKE \
      "-DCMAKE_CXX_FLAGS=-march=native -ffp-contract=off -DHWY_COMPILE_ONLY_STATIC=1" ${QMX_GPU_CMAKE:-} > build-gpu.cmake.log 2>&1 ||
      { tail -n 30 build-gpu.cmake.log; exit 1; }
    targets=("$@")
    ((${#targets[@]})) || targets=(qmx-sim qmx_tests)
    cmake --build build-gpu --target "${targets[@]}" > build-gpu.log 2>&1 || { grep -B2 -A12 'error' build-gpu.log | head -n 80; exit 1; }
    echo "built ${targets[*]} in build-gpu; run with: source $deps/env.sh"
    ;;
  *)
    echo "usage: bash gpu/scripts/carry-deps.sh download|unpack|build [TARGET ...]" >&2
    exit 2
    ;;
esac
