#!/usr/bin/env bash
# docs/reproduce.md and docs/hdf5-schema.md name only files that exist: every experiments/..., apps/...,
# tests/..., docs/... and src/... path they mention is checked against the source tree.
set -u
: "${MEMCAP_SRC:?set MEMCAP_SRC to the repository root}"
cd "$MEMCAP_SRC" || exit 1
fail=0
for doc in docs/reproduce.md docs/hdf5-schema.md; do
  [ -f "$doc" ] || { echo "FAIL: $doc missing"; fail=1; continue; }
  for p in $(grep -oE '(experiments|apps|tests|docs|src)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*]' "$doc" | sort -u); do
    case "$p" in *'*'*|*'<'*) continue ;; esac   # patterns, not files
    if [ ! -e "$p" ]; then
      echo "FAIL: $doc names '$p', which does not exist"
      fail=1
    fi
  done
done
[ $fail -eq 0 ] && echo "test_docs_paths: OK"
exit $fail
