#!/usr/bin/env python3
"""Renders the figures of every notebook in notebooks-data/ without Jupyter: runs each notebook's code
cells in order, in the notebook's own directory, with matplotlib's Agg backend (Debian's
python3-matplotlib and python3-numpy are the only requirements: `bash .ci/install-deps --plots`).

Usage: python3 notebooks-data/render.py [NOTEBOOK.ipynb ...]   (default: all of them)
"""
import glob
import json
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("render.py: matplotlib is not installed (Debian: `bash .ci/install-deps --plots`, or "
             "apt-get install python3-matplotlib)")

matplotlib.use("Agg")


def run(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    here = os.getcwd()
    os.chdir(os.path.dirname(os.path.abspath(path)))
    try:
        scope = {"__name__": "__main__"}
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), path, "exec"), scope)
    finally:
        os.chdir(here)
        import matplotlib.pyplot as plt
        plt.close("all")
    print("rendered", path)


def main():
    root = os.path.dirname(os.path.abspath(__file__))
    paths = sys.argv[1:] or sorted(glob.glob(os.path.join(root, "*", "*.ipynb")))
    for p in paths:
        run(p)


if __name__ == "__main__":
    main()
