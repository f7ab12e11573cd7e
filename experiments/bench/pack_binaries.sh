#!/usr/bin/env bash
# Packs binaries built here (Debian 12, CUDA 13, sm_90a) into one tar.xz for the device tool's carry (64 MiB with the
# working tree), so that a GPU call runs them without a build on the machine (device_queue.sh PREBUILT=DIR).
#   bash experiments/bench/pack_binaries.sh [BUILD_DIR] [OUT.tar.xz] [NAME ...]
# Default NAMEs: the kata, hebb and ramnet executables and every tests/gpu_test_* binary of BUILD_DIR (build). Every
# binary links the same kernels' device code, so the archive is compressed with a dictionary larger than the whole
# tar (256 MiB): the copies after the first cost almost nothing (the whole GPU suite with the three executables,
# ~250 MB, packs to ~25 MB; xz's default 8 MiB dictionary gives ~70 MB). Takes a few minutes on 2 cores.
# On the device: mkdir -p build && tar -C build -xJf .deps/bin/all.tar.xz (xz is there, zstd is not), then
# PREBUILT=build bash experiments/bench/device_queue.sh ...
set -euo pipefail
BUILD=${1:-build}
OUTF=${2:-.deps/bin/all.tar.xz}
shift $(( $# > 2 ? 2 : $# ))
[ -d "$BUILD" ] || { echo "pack_binaries.sh: no build folder '$BUILD'" >&2; exit 2; }
cd "$BUILD"
if [ $# -gt 0 ]; then
  names=("$@")
else
  names=()
  for b in kata hebb ramnet tests/gpu_test_*; do [ -x "$b" ] && names+=("$b"); done
fi
[ ${#names[@]} -gt 0 ] || { echo "pack_binaries.sh: no binaries in '$BUILD'" >&2; exit 2; }
for b in "${names[@]}"; do
  [ -f "$b" ] && [ -x "$b" ] || { echo "pack_binaries.sh: '$BUILD/$b' is not an executable" >&2; exit 2; }
done
cd - > /dev/null
mkdir -p "$(dirname "$OUTF")"
tmp="$OUTF.tmp"
trap 'rm -f "$tmp"' EXIT
tar cf - -C "$BUILD" "${names[@]}" | xz --lzma2=preset=6,dict=256MiB > "$tmp"
mv "$tmp" "$OUTF"
bytes=$(stat -c %s "$OUTF")
echo "packed ${#names[@]} binaries into $OUTF ($(( bytes / 1024 / 1024 )) MiB)"
if [ "$bytes" -gt $(( 60 * 1024 * 1024 )) ]; then
  echo "warning: over 60 MiB: with the working tree it may not fit the device tool's 64 MiB carry" >&2
fi
