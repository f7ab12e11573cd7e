"""Shared helpers of the figure scripts: open a memcap result file (HDF5, h5py) with a one-line error when
it is not the expected kind, decode HDF5 strings, a headless pyplot; and for `hebb margin-sweep` results,
read them and draw the measured margin (mean, ±2 std band over seeds) with the fitted theory curve."""
import argparse
import json
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the interpreter
    sys.exit(f"{e}: this script needs h5py and matplotlib; run it through experiments/plots/with_python.sh")


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend (PNG output, no display needed)."""
    try:
        import matplotlib
    except ImportError as e:
        sys.exit(f"{e}: this script needs h5py and matplotlib; run it through experiments/plots/with_python.sh")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def text(v):
    """An HDF5 string attribute or element (bytes or str) as str."""
    return v.decode() if isinstance(v, bytes) else str(v)


def texts(a):
    """An HDF5 string dataset's values as a numpy array of str."""
    return np.array([text(x) for x in a])


def open_result(path, required, kind):
    """`path` opened read-only, or exit with one line when it cannot be opened or lacks one of the
    `required` paths (e.g. ("summary", "runs")); `kind` names the command that writes such files."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        sys.exit(f"cannot open {path}: {e}")
    missing = [r for r in required if r not in f]
    if missing:
        f.close()
        sys.exit(f"{path}: no {', '.join('/' + m for m in missing)} (not a `{kind}` result?)")
    return f


def parse_args(description, default_out):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("results", help="HDF5 file written by `hebb margin-sweep`")
    ap.add_argument("-o", "--out", default=default_out, help="PNG to write (default: %(default)s)")
    ap.add_argument("--bounds", action="store_true", help="also draw the deterministic Eq. 44 / Eq. 43 bounds")
    ap.add_argument("--dpi", type=int, default=150)
    return ap.parse_args()


def load(path):
    """Points, fit attributes and best-seed statistics of a margin sweep, as plain numpy arrays."""
    with open_result(path, ("points", "fit"), "hebb margin-sweep") as f:
        pts = f["points"]
        axis = pts.attrs["axis"]
        axis = text(axis)
        d = {k: pts[k][()] for k in pts if isinstance(pts[k], h5py.Dataset)}
        best = {k: pts["best"][k][()] for k in pts["best"]}
        fit = {k: (text(v) if isinstance(v, bytes) else v) for k, v in f["fit"].attrs.items()}
        cfg = f["config"].attrs.get("json", "") if "config" in f else ""
    return axis, d, best, fit, cfg


def dfm(cfg, axis=None):
    """' (d=64, F=256, m=512)' from the /config JSON string: the fixed sizes of the run (the swept one left out)."""
    try:
        c = json.loads(cfg) if isinstance(cfg, (str, bytes)) and cfg else {}
    except ValueError:
        return ""
    parts = []
    for label, keys in (("d", ("dim",)), ("F", ("facts",)), ("m", ("width", "widths"))):
        for k in keys:
            v = c.get(k)
            if isinstance(v, list):
                v = v[0] if len(v) == 1 else None
            if v not in (None, "", 0) and k != axis and not (label == "m" and axis == "width"):
                parts.append(f"{label}={v}")
                break
    return f" ({', '.join(parts)})" if parts else ""


def fit_label(fit):
    names = str(fit.get("constants", "")).split(",") if fit.get("constants") else []
    consts = ", ".join(f"{n}={float(fit[n]):.3g}" for n in names if n in fit)
    r2 = float(fit.get("r2", float("nan")))
    return f"fit {fit.get('model', '?')} ($R^2$={r2:.3f}; {consts})"


def plot_margin(ax, x, d, best, fit, xlabel, logx=False, logy=False, target_key="fit_target", bounds=False,
                band=True):
    """Measured margin vs x with ±2 std band, fitted curve; x need not be sorted."""
    order = np.argsort(x)
    xs = np.asarray(x)[order]
    y = np.asarray(d[target_key])[order]
    sd = np.asarray(d["gamma_std"])[order]
    nseeds = d["gamma_seeds"].shape[1] if d["gamma_seeds"].ndim == 2 else 1
    is_mean = np.allclose(d[target_key], d["gamma_mean"], equal_nan=True)
    what = f"mean of {nseeds} seeds" if is_mean else "best clean seed"
    lab = "measured $\\gamma_{\\min}$" + (f" ({what})" if nseeds > 1 else "")
    ax.plot(xs, y, "o-", color="C0", ms=4, label=lab)
    if band and nseeds > 1:
        mean = np.asarray(d["gamma_mean"])[order]
        ax.fill_between(xs, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2, label="±2 std over seeds")
    pred = np.asarray(d["fit_prediction"])[order]
    if np.isfinite(pred).any():
        ax.plot(xs, pred, "--", color="C3", lw=2, label=fit_label(fit))
    if bounds:
        for key, col, name in (("bound_eq44", "C2", "Eq. 44 (deterministic)"), ("bound_eq43", "C4", "Eq. 43 (deterministic)")):
            if key in best:
                ax.plot(xs, np.asarray(best[key])[order], ":", color=col, label=name)
    ax.axhline(0.0, color="k", lw=0.6)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("$\\gamma_{\\min}$ (kernel-memory margin)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def save(fig, out, dpi):
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    print(f"wrote {out}")
