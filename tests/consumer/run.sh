#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds tests/consumer against it twice: through
# find_package(qmx) and through pkg-config's qmx.pc, and the C ABI's C program against libqmx_c.so (through
# find_package and with cc). Usage: run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$build/consumer-test
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" --component Unspecified > "$work.install.log" 2>&1 || { cat "$work.install.log"; exit 1; }
cmake -S "$src/tests/consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release
cmake --build "$work/cmake"
"$work/cmake/consumer"
"$work/cmake/consumer_c"
libdir=$(ls -d "$work"/prefix/lib*/pkgconfig | head -n 1)
export PKG_CONFIG_PATH=$libdir
c++ -std=c++17 -O1 "$src/tests/consumer/main.cc" -o "$work/consumer-pc" $(pkg-config --cflags --libs qmx)
"$work/consumer-pc"
# The C ABI with a plain C compiler, as a simulator's build would link it.
cc -std=c11 "$src/tests/c_abi/c_consumer.c" -I"$work/prefix/include" -L"$libdir/.." -lqmx_c -Wl,-rpath,"$libdir/.." \
  -o "$work/consumer-c-cc"
"$work/consumer-c-cc"
rm -rf "$work" "$work.install.log"
