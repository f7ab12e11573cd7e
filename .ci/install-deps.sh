#!/usr/bin/env bash
# Installs everything memcap needs on Debian 12 (run as root). Idempotent; quiet unless it fails.
# Why each package: docs/dependencies.md. The CUDA toolkit is optional (kernels build when nvcc is found).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  cmake g++ make git pkg-config
  libeigen3-dev libopenblas-dev libcli11-dev libfmt-dev libhdf5-dev doctest-dev
  librandom123-dev nlohmann-json3-dev libboost-math-dev libtomlplusplus-dev
  python3 python3-h5py python3-matplotlib python3-numpy python3-pandas python3-xarray python3-h5netcdf
  slurm-wlm   # tests/cli/test_slurm_array.sh: a local single-node slurmctld/slurmd (auth/none)
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all dependencies present" >&2
