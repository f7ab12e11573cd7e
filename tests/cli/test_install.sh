#!/usr/bin/env bash
# `cmake --install` puts the binaries, the presets and the plot scripts where the binaries find
# them: an installed `hebb margin-sweep --preset fig4-facts --dry-run` works from another folder with
# MEMCAP_PRESETS and MEMCAP_SRC unset, and share/memcap/plots holds the plot scripts and memcap.py.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
BUILD=$(dirname "$HEBB")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

if ! cmake --install "$BUILD" --prefix "$T/prefix" >"$T/install.log" 2>&1; then
  cat "$T/install.log"
  echo "FAIL: cmake --install $BUILD failed"
  exit 1
fi
P="$T/prefix"
check '[ -x "$P/bin/hebb" ]' "bin/hebb not installed"
check '[ -f "$P/share/memcap/presets/fig4-facts.toml" ]' "presets not installed under share/memcap/presets"
for f in fig2c.py fig4.py fig6.py kata_capacity.py memcap_plot.py memcap.py with_python.sh; do
  check '[ -f "$P/share/memcap/plots/$f" ]' "share/memcap/plots/$f missing"
done
check '[ -x "$P/share/memcap/plots/with_python.sh" ]' "with_python.sh not executable"

mkdir -p "$T/elsewhere"
out=$(cd "$T/elsewhere" && env -u MEMCAP_PRESETS -u MEMCAP_SRC "$P/bin/hebb" margin-sweep --preset fig4-facts \
      --dry-run --out x.h5 2>&1)
rc=$?
check '[ $rc -eq 0 ]' "installed hebb margin-sweep --preset fig4-facts --dry-run exited $rc: $out"
check '[ ! -e "$T/elsewhere/x.h5" ]' "dry run created a file"
[ $fail -eq 0 ] && echo "test_install: OK"
exit $fail
