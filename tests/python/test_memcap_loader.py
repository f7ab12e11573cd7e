#!/usr/bin/env python3
"""experiments/memcap.py on files made by the real executables (tiny `hebb margin-sweep`, sharded
and merged; tiny `kata capacity-sweep`): summary() gives a DataFrame without bytes objects, every
/summary column has `units` and `long_name`, /summary/row is a dimension scale attached to every
column, grid() labels /grid arrays (kata capacity-sweep has /grid over map_id, dim, keys_id),
attrs() has the library versions and, for the merged file, /provenance/shard<i>. When xarray and
h5netcdf import, xarray.open_dataset(path, group="summary", engine="h5netcdf") must work (else that
part is skipped with a message). Exit 77 (skipped) without h5py/pandas."""
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import pandas as pd
except ImportError:
    print("SKIP: h5py/numpy/pandas not importable")
    sys.exit(77)

HEBB = os.environ.get("HEBB", "build/hebb")
KATA = os.environ.get("KATA", "build/kata")
SRC = os.environ.get("MEMCAP_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "experiments"))
import memcap  # noqa: E402

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(cmd):
    env = dict(os.environ, MEMCAP_PRESETS=os.path.join(SRC, "experiments", "presets"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")


def check_file(path, label):
    df = memcap.summary(path)
    check(len(df) > 0, f"{label}: empty summary")
    for c in df.columns:
        check(not any(isinstance(v, bytes) for v in df[c]), f"{label}: column {c} holds bytes")
        check(df[c].dtype != object or all(isinstance(v, str) for v in df[c]), f"{label}: column {c} not str")
    # pandas < 3 keeps str columns as object, pandas 3 as its str dtype: both are string columns.
    check(pd.api.types.is_string_dtype(df["job"]) and isinstance(df["job"].iloc[0], str), f"{label}: job is not str")
    check(np.issubdtype(df["wall_s"].dtype, np.floating), f"{label}: wall_s not float")
    check(np.issubdtype(df["seed"].dtype, np.integer), f"{label}: seed not integer")
    check(df.attrs["units"].get("wall_s") == "s", f"{label}: wall_s units {df.attrs['units'].get('wall_s')}")
    with h5py.File(path, "r") as f:
        s = f["summary"]
        row = s["row"]
        check(row.attrs.get("CLASS") == b"DIMENSION_SCALE", f"{label}: /summary/row is not a dimension scale")
        check(list(row[()]) == list(range(len(df))), f"{label}: /summary/row is not 0..n-1")
        for c in s.attrs["columns"].split(","):
            ds = s[c]
            check("units" in ds.attrs, f"{label}: /summary/{c} has no units")
            check(isinstance(ds.attrs.get("long_name"), str) and ds.attrs["long_name"],
                  f"{label}: /summary/{c} has no long_name (str)")
            check(len(ds.dims[0]) == 1 and ds.dims[0][0].name == "/summary/row",
                  f"{label}: /summary/{c} has no row scale attached")
        for k in ("hdf5_version", "eigen_version", "openblas_version", "compiler", "tool"):
            check(isinstance(f.attrs.get(k), str) and f.attrs[k], f"{label}: root attribute {k} missing or not str")
    a = memcap.attrs(path)
    check(isinstance(a.get("config"), dict), f"{label}: attrs() has no parsed config")
    try:
        import xarray as xr
        import h5netcdf  # noqa: F401
    except ImportError:
        print(f"SKIP ({label}): xarray/h5netcdf not importable; xarray.open_dataset(engine='h5netcdf') not checked")
    else:
        ds = xr.open_dataset(path, group="summary", engine="h5netcdf")
        check("row" in ds.dims and ds.sizes["row"] == len(df), f"{label}: xarray summary has no row dimension")
        check(ds["wall_s"].attrs.get("units") == "s", f"{label}: xarray lost units")
        ds.close()
    return df


with tempfile.TemporaryDirectory() as tmp:
    # hebb margin-sweep, two shards merged.
    base = [HEBB, "margin-sweep", "--progress", "none", "--dim", "16", "--facts", "32", "--widths", "32,64",
            "--seeds", "2"]
    p0, p1, merged = (os.path.join(tmp, n) for n in ("w.shard0of2.h5", "w.shard1of2.h5", "merged.h5"))
    run(base + ["--shard", "0/2", "--out", os.path.join(tmp, "w.h5")])
    run(base + ["--shard", "1/2", "--out", os.path.join(tmp, "w.h5")])
    run([HEBB, "merge", "--out", merged, p0, p1])
    df = check_file(merged, "hebb merged")
    check(len(df) == 4, f"merged summary has {len(df)} rows, expected 4")
    a = memcap.attrs(merged)
    prov = a.get("provenance", {})
    check(sorted(prov) == ["shard0", "shard1"], f"merged file provenance groups: {sorted(prov)}")
    for k, g in prov.items():
        for key in ("hostname", "start_utc", "end_utc", "threads", "sweep_shard", "hdf5_version"):
            check(key in g, f"/provenance/{k} lacks {key}")
    g = memcap.grid(merged, "min_margin")
    if isinstance(g, tuple):
        values, coords = g
        check("width" in coords and list(coords["width"]) == [32, 64], f"grid coords {coords}")
    else:
        check("width" in g.dims and list(g["width"].values) == [32, 64], f"grid dims {g.dims}")
    r = memcap.runs(merged)
    check(len(r) == 4, f"runs() found {len(r)} jobs, expected 4")
    res = memcap.load(merged)
    check(len(res["summary"]) == 4, "load()['summary'] wrong")

    # kata capacity-sweep: /grid over (map_id, dim, keys_id).
    cap = os.path.join(tmp, "cap.h5")
    run([KATA, "capacity-sweep", "--progress", "none", "--maps", "linear,m1", "--dims", "8,16", "--keys", "random",
         "--k-max", "64", "--trials", "2", "--device", "cpu", "--out", cap])
    df = check_file(cap, "kata capacity-sweep")
    check(len(df) == 4, f"kata sweep has {len(df)} rows")
    check(sorted(set(df["map_id"])) == [0, 1], f"map_id values {sorted(set(df['map_id']))}")
    with h5py.File(cap, "r") as f:
        check("grid" in f and "k_star_psnr" in f["grid"], "kata capacity-sweep has no /grid/k_star_psnr")
        if "grid" in f and "k_star_psnr" in f["grid"]:
            q = f["grid/k_star_psnr"]
            check(q.shape == (2, 2, 1), f"/grid/k_star_psnr shape {q.shape}")
            check([q.dims[k][0].name for k in range(3)] == ["/grid/map_id", "/grid/dim", "/grid/keys_id"],
                  "kata grid scales")
            check("units" in q.attrs, "/grid/k_star_psnr has no units")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("test_memcap_loader: OK")
