"""Golden vectors (qmx-sim golden): generate the suites into a directory, replay a directory against the
library, and read a golden file into arrays. golden/README.md documents the file format."""
from . import _qmx


def suites():
    """Names of the golden suites."""
    return _qmx.golden_suites()


def generate(out_dir, suites=("all",), level=1, seed=1, exhaustive=False, hopper_dir=None, layout="text"):
    """Writes out_dir/SUITE/*.txt and out_dir/manifest.json (the same bytes as `qmx-sim golden gen`;
    layout="memh" also writes each file's $readmemh image, NAME.memh, beside it);
    returns the manifest entries. hopper_dir: the GEMM outputs measured on a Hopper GPU (cases.json);
    None finds golden/gemm-hopper in the working directory, the source tree or the installed data, and
    raises ValueError before writing anything when the suites include gemm and none holds it; ""
    leaves those files out."""
    if hopper_dir != "":  # checked (or found) before anything is written
        hopper_dir = _qmx.golden_hopper_dir(list(suites), "" if hopper_dir is None else str(hopper_dir))
    if layout not in ("text", "memh"):
        raise ValueError("layout is text or memh, not %r" % (layout,))
    return _qmx.golden_generate(str(out_dir), list(suites), level, seed, exhaustive, str(hopper_dir), layout == "memh")


def read_memh(path):
    """A $readmemh image of `golden gen --layout memh` as its cases' hex fields (the text file's fields, in
    order), split by the image's layout line."""
    with open(path) as f:
        return _qmx.golden_memh_fields(f.read())


def verify(directory, backend="cpu-simd", max_errors=20, only=""):
    """Replays every file of directory/manifest.json on backend "cpu-ref" (the scalar references, flags
    checked) or "cpu-simd" (the fast paths). Returns one dict per file: path, op, cases, mismatches, ok,
    first (line, text) mismatches, errors."""
    return _qmx.golden_verify(str(directory), backend, max_errors, only)


def read(path):
    """A golden file as (header, cases): header is the dict of its "# op=..." line's key=value pairs, cases
    a list of lists of the hex fields of each case line."""
    header, cases = {}, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                if not header and "op=" in line:
                    for tok in line[1:].split():
                        if "=" in tok:
                            k, v = tok.split("=", 1)
                            header[k] = v
                continue
            cases.append(line.split())
    return header, cases
