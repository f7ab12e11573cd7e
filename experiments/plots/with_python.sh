#!/usr/bin/env bash
# Run a Python script with an interpreter that can import h5py and matplotlib (Debian's python3-h5py
# and python3-matplotlib). Tries /usr/bin/python3, then python3 on PATH, then python3.11.
# Usage: experiments/plots/with_python.sh SCRIPT.py [ARGS...]
# Exit 77 (the test suite's "skipped") when no such interpreter exists.
set -u
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null)" "$(command -v python3.11 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] || continue
  if "$py" -c 'import h5py, matplotlib' >/dev/null 2>&1; then
    exec "$py" "$@"
  fi
done
echo "with_python.sh: no python3 that imports h5py and matplotlib (tried /usr/bin/python3, python3, python3.11);" \
     "install python3-h5py python3-matplotlib" >&2
exit 77
