"""Small loader for memcap HDF5 results (docs/hdf5-schema.md), so a result reads without the docs open.

    import memcap                      # experiments/ on sys.path (or copy this file)
    df = memcap.summary("cap.h5")      # pandas DataFrame, one row per job, strings as str
    da = memcap.grid("cap.h5", "m_star")  # xarray.DataArray over the /grid axes (numpy + coords without xarray)
    runs = memcap.runs("cap.h5")       # {job: {array name: numpy array}} from /runs/<job>/
    meta = memcap.attrs("cap.h5")      # root provenance attributes + parsed /config
    r = memcap.load("cap.h5")          # all of the above, lazily, as one dict-like object

h5py 3 returns variable-length string *datasets* as bytes unless read with .asstr(); every function
here decodes them. Needs h5py and numpy; pandas for summary(); xarray optional for grid().
"""
import json

import h5py
import numpy as np

__all__ = ["load", "summary", "grid", "runs", "attrs", "units"]


def _text(x):
    if isinstance(x, bytes):
        return x.decode("utf-8")
    if isinstance(x, np.ndarray) and x.dtype.kind in "SO":
        return np.array([_text(v) for v in x.tolist()], dtype=object)
    return x


def _read(ds):
    """A dataset as numpy, strings decoded to str."""
    if h5py.check_string_dtype(ds.dtype) is not None:
        return np.array(ds.asstr()[()], dtype=object)
    return ds[()]


def _columns(g):
    order = g.attrs.get("columns")
    if order is not None:
        return [c for c in _text(order).split(",") if c]
    return [k for k in g if k != "row"]


def summary(path, group="summary"):
    """/summary as a pandas.DataFrame (columns in the stored order; units in df.attrs['units'])."""
    import pandas as pd

    with h5py.File(path, "r") as f:
        g = f[group]
        cols = _columns(g)
        data = {c: _read(g[c]) for c in cols}
        units = {c: _text(g[c].attrs.get("units", "")) for c in cols}
        long_names = {c: _text(g[c].attrs.get("long_name", "")) for c in cols}
    df = pd.DataFrame(data)
    for c in cols:
        if df[c].dtype == object:
            df[c] = df[c].astype(str)
    df.attrs["units"] = units
    df.attrs["long_name"] = long_names
    return df


def units(path, group="summary"):
    """{dataset name: units} of a group's datasets."""
    with h5py.File(path, "r") as f:
        return {k: _text(v.attrs.get("units", "")) for k, v in f[group].items() if isinstance(v, h5py.Dataset)}


def grid(path, name):
    """/grid/<name> labelled by its dimension scales: an xarray.DataArray when xarray is importable,
    else (numpy array, {axis: coordinate values}) in axis order."""
    with h5py.File(path, "r") as f:
        ds = f["grid"][name]
        values = ds[()]
        dims, coords = [], {}
        for k, dim in enumerate(ds.dims):
            if len(dim):
                scale = dim[0]
                label = scale.name.rsplit("/", 1)[-1]
                coords[label] = _read(scale)
            else:
                label = f"dim_{k}"
                coords[label] = np.arange(values.shape[k])
            dims.append(label)
        attrs = {k: _text(v) for k, v in ds.attrs.items() if k in ("units", "long_name")}
    try:
        import xarray as xr
    except ImportError:
        return values, coords
    return xr.DataArray(values, dims=dims, coords=coords, name=name, attrs=attrs)


def runs(path):
    """{job: {array path: numpy array}} for every group under /runs (nested groups joined with '/')."""
    out = {}
    with h5py.File(path, "r") as f:
        if "runs" not in f:
            return out
        for job, g in f["runs"].items():
            arrays = {}

            def visit(name, obj, arrays=arrays):
                if isinstance(obj, h5py.Dataset):
                    arrays[name] = _read(obj)

            if isinstance(g, h5py.Dataset):
                arrays[""] = _read(g)
            else:
                g.visititems(visit)
            out[job] = arrays
    return out


def attrs(path):
    """Root attributes (provenance) as str/number, plus 'config' (the parsed /config JSON) and, for
    merged files, 'provenance' ({shard<i>: that input's root attributes})."""
    with h5py.File(path, "r") as f:
        meta = {k: _text(v) for k, v in f.attrs.items()}
        if "config" in f and "json" in f["config"].attrs:
            meta["config"] = json.loads(_text(f["config"].attrs["json"]))
        if "provenance" in f:
            meta["provenance"] = {k: {a: _text(v) for a, v in g.attrs.items()} for k, g in f["provenance"].items()}
    return meta


class Result(dict):
    """load()'s dict-like view: keys 'summary', 'attrs', 'runs', 'grid' ({name: grid()}), read on first use."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def __missing__(self, key):
        if key == "summary":
            v = summary(self.path)
        elif key == "attrs":
            v = attrs(self.path)
        elif key == "runs":
            v = runs(self.path)
        elif key == "grid":
            with h5py.File(self.path, "r") as f:
                names = [k for k, d in f["grid"].items() if not d.attrs.get("CLASS", b"") == b"DIMENSION_SCALE"] \
                    if "grid" in f else []
            v = {n: grid(self.path, n) for n in names}
        else:
            raise KeyError(key)
        self[key] = v
        return v

    def keys(self):
        return ["summary", "attrs", "runs", "grid"]


def load(path):
    """Everything in a result file, lazily: load(p)['summary'] is a DataFrame, ['grid'][q] a DataArray."""
    return Result(path)
