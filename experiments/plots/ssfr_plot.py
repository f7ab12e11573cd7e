"""Shared helpers of the SSFR figure scripts (fig3a, fig3b, fig10, fig2a, fig7): read the /summary of a
`hebb ssfr capacity | noise | usability` file as numpy arrays (strings decoded), the paper's method labels
and colours, and the Fig. 3 fit W = C F (log2 F + b) (spec hebbian.md §4.6, code scripts/paper/plot_fig3.py)."""
import numpy as np

import memcap_plot as mp

from fig2c import COLORS, LABELS, family  # the paper's method labels and colours, as in Fig. 2c


def summary(path, kind, required=("summary",)):
    """/summary of a result file as {column: numpy array}, strings as str."""
    with mp.open_result(path, required, kind) as f:
        s = {k: f["summary"][k][()] for k in f["summary"]}
    for k, v in s.items():
        if v.dtype.kind in "SO":
            s[k] = mp.texts(v)
    return s


def summaries(paths, kind, key=("protocol", "mlp", "facts", "seed")):
    """The /summary rows of several result files of one command as one {column: array} (the columns all files
    have), e.g. a preset run in pieces with --facts subsets. A row whose key columns repeat one of an earlier
    file is refused: the files would disagree on that point or count it twice."""
    parts = [summary(p, kind) for p in paths]
    cols = [c for c in parts[0] if all(c in q for q in parts[1:])]
    seen = {}
    for path, part in zip(paths, parts):
        names = [c for c in key if c in part]
        for i in range(len(part[cols[0]]) if cols else 0):
            k = tuple(str(part[c][i]) for c in names)
            if k in seen:
                raise SystemExit(f"{path}: the point {dict(zip(names, k))} is also in {seen[k]}; give each point once")
            seen[k] = path
    return {c: np.concatenate([q[c] for q in parts]) for c in cols}


FIT_B_HI = 24.0  # upper end of the b grid of fit_f_log_f (a fit that lands there is degenerate)


def fit_f_log_f(F, W, b_hi=FIT_B_HI, points=2000):
    """Least-squares fit of log2 W = log2 C + log2 F + log2(log2 F + b) over b in
    [-min log2 F + 1e-3, b_hi] (2000 grid points); returns (C, b) or None with < 2 points."""
    F, W = np.asarray(F, float), np.asarray(W, float)
    ok = np.isfinite(F) & np.isfinite(W) & (F > 1) & (W > 0)
    F, W = F[ok], W[ok]
    if len(F) < 2:
        return None
    lf = np.log2(F)
    best = None
    for b in np.linspace(-lf.min() + 1e-3, b_hi, points):
        rest = np.log2(W) - lf - np.log2(lf + b)
        c = rest.mean()
        sse = np.sum((rest - c) ** 2)
        if best is None or sse < best[0]:
            best = (sse, 2.0 ** c, b)
    return best[1], best[2]


def capacity_axes(ax, xlabel, title):
    """log2-log2 axes of the capacity figures (F against W)."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("facts F")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")


def fmt_range(r):
    return f"{min(r):.3g}-{max(r):.3g}x over {len(r)} point(s)" if r else "n/a (no common point)"
