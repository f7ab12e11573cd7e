#!/usr/bin/env python3
"""Figure 11 analogue: MLP fact-storage capacity with anisotropic embeddings (rank-1 spike beta = 1.5 on
both tied tables), log2 F against log2 W per (method, d), ratio ranges printed (spec hebbian.md §4.2,
§5 claim 9: data-dependent 4-8x GD and still Theta(F log F); NTK and unwhitened lose F log F).
Usage: fig11.py RESULTS.h5 [MORE.h5 ...] [-o fig11.png] [--fit] [--stat w50|median]
Results: hebb capacity --preset fig11 --out RESULTS.h5. Same drawing as fig2c.py."""
import fig2c

if __name__ == "__main__":
    fig2c.main(default_out="fig11.png", title="MLP fact-storage capacity (anisotropic)", expect_beta=1.5,
               doc=__doc__)
