#!/usr/bin/env bash
# Run a Python script with an interpreter that can import h5py and matplotlib (Debian's python3-h5py
# and python3-matplotlib). Tries /usr/bin/python3, then python3 on PATH, then python3.11.
# Usage: experiments/plots/with_python.sh SCRIPT.py [ARGS...]   (SCRIPT.py may be - for standard input)
# PY_NEEDS: the modules to import instead (comma list, default "h5py, matplotlib"), e.g. PY_NEEDS=h5py for a
# script that only reads results.
# Exit 77 (the test suite's "skipped") when no such interpreter exists.
set -u
NEEDS=${PY_NEEDS:-"h5py, matplotlib"}
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null)" "$(command -v python3.11 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] || continue
  if "$py" -c "import $NEEDS" >/dev/null 2>&1; then
    exec "$py" "$@"
  fi
done
echo "with_python.sh: no python3 that imports $NEEDS (tried /usr/bin/python3, python3, python3.11);" \
     "install the Debian packages python3-<module>" >&2
exit 77
