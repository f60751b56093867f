"""Golden vectors (qmx-sim golden): generate the suites into a directory, replay a directory against the
library, and read a golden file into arrays. golden/README.md documents the file format."""
import re

from . import _qmx


def suites():
    """Names of the golden suites."""
    return _qmx.golden_suites()


def generate(out_dir, suites=("all",), level=1, seed=1, exhaustive=False, hopper_dir=None, layout="text",
             min_per_class=0, units=()):
    """Writes out_dir/SUITE/*.txt and out_dir/manifest.json (the same bytes as `qmx-sim golden gen`;
    layout="memh" also writes each file's $readmemh image, NAME.memh, beside it);
    returns the manifest entries. hopper_dir: the GEMM outputs measured on a Hopper GPU (cases.json);
    None finds golden/gemm-hopper in the working directory, the source tree or the installed data, and
    raises ValueError before writing anything when the suites include gemm and none holds it; ""
    leaves those files out. min_per_class=N adds cases until each coverage class of each file holds N
    where N distinct inputs exist (`golden gen --min-per-class`; measured files are left as they are). units: a design's own dot-product units, each "name=N a=FMT b=FMT k=K
    model=M [scale=S block=B]" (`golden gen --unit`): unit/N.txt each; with suites ("all",) only those."""
    units = [units] if isinstance(units, str) else list(units)
    only_units = bool(units) and list(suites) == ["all"]
    if hopper_dir != "":  # checked (or found) before anything is written
        hopper_dir = _qmx.golden_hopper_dir(["unit"] if only_units else list(suites),
                                            "" if hopper_dir is None else str(hopper_dir))
    if layout not in ("text", "memh"):
        raise ValueError("layout is text or memh, not %r" % (layout,))
    return _qmx.golden_generate(str(out_dir), list(suites), level, seed, exhaustive, str(hopper_dir), layout == "memh",
                                int(min_per_class), units)


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


def coverage(*paths, log=None, like=None):
    """The coverage model of golden vectors (qmx-sim golden coverage): one dict per golden file of `paths`
    (files, or directories searched recursively), each {"file", "op", "header", "cases", "modelled",
    "classes": {class: cases in it}, "missed": [classes with none]}; operations without a model have
    modelled False. log=FILE with like=GOLDEN_FILE measures a simulator's log of inputs (one case per line:
    its input fields in hex as the golden file writes them, anything after them ignored) under that file's
    header instead, and returns one dict."""
    if log is not None or like is not None:
        if log is None or like is None or paths:
            raise ValueError("coverage(log=LOG, like=GOLDEN_FILE) measures a log; give both, and no paths")
        return _qmx.golden_coverage_log(str(like), str(log))
    if not paths:
        raise ValueError("coverage: give golden files or directories")
    return _qmx.golden_coverage([str(p) for p in paths])


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


def _column_names(fields_line, columns):
    """(name, count, desc) per column group of a "# fields:" line: x[0] .. x[N] lists are one name of N + 1
    columns; a group of several short names ("a b e f", "sa sb") is one column each when the line's words
    add up to the case's column count, else a multi-word name ("tensor amax") is one column."""
    groups = []
    for g in fields_line.split(":", 1)[1].split(" | "):
        g = g.strip()
        names, _, desc = g.partition("(")
        names, desc = names.strip(), desc.rsplit(")", 1)[0]
        m = re.fullmatch(r"(\w+)\[0\] \.\. \w+\[(\d+)\]", names)
        groups.append((m.group(1), int(m.group(2)) + 1, desc, True) if m else (names, len(names.split()), desc, False))
    split_words = sum(n for _, n, _, _ in groups) == columns
    out = []
    for names, n, desc, is_list in groups:
        if is_list:
            out.append((names, n, desc))
        elif split_words:
            out.extend((w, 1, desc) for w in names.split())
        else:
            out.append((names, 1, desc))
    return out


def arrays(path):
    """A golden file's cases as NumPy arrays, for a test bench in Python (cocotb) to drive and check a unit with:
    (header, {name: array}), header as read() gives it, one array per field of the "# fields:" line in its
    order, names in lower case with _ for spaces ("input", "output", "flags"; "x", "scale", "codes";
    "tensor_amax"; "a", "b", "sa", "sb", "c", "d"). Values are the file's bits: uint8, uint16, uint32 or uint64
    by the field's width (view FP32 bits with .view(numpy.float32)); x[0] .. x[N] lists are (cases, N + 1);
    packed code strings ("32 e2m1 codes, 2 hex digits each") and block-scale lists are (cases, count) with one
    code or scale per element, element 0 first. A field the file marks absent ("-": no C, no block scales) reads
    0, and NAME_present says where it is given."""
    import numpy as np
    header, cases = read(path)
    with open(path) as f:
        fields_line = next((l.strip() for l in f if l.startswith("# fields:")), None)
    if fields_line is None:
        raise ValueError("%s: no '# fields:' line" % path)
    columns = len(cases[0]) if cases else 0
    groups = _column_names(fields_line, columns)
    if cases and sum(n for _, n, _ in groups) != columns:
        raise ValueError("%s: the fields line names %d fields, the cases have %d" % (path, sum(n for _, n, _ in groups), columns))
    out, col = {}, 0
    dtype_of = {2: np.uint8, 4: np.uint16, 8: np.uint32, 16: np.uint64}
    for name, n, desc in groups:
        key = re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")
        cells = [c[col:col + n] for c in cases]
        col += n
        present = np.array([all(not set(x) <= {"-"} for x in row) for row in cells], dtype=bool)
        widths = {len(x) for row, p in zip(cells, present) if p for x in row}
        if len(widths) > 1:
            raise ValueError("%s: field %r has cases of widths %s" % (path, name, sorted(widths)))
        width = widths.pop() if widths else 2
        # One hex string of several elements: "<count> <fmt> codes" or "<count> block scales each".
        m = re.match(r"(\d+) (?:\S+ codes|block scales each)", desc)
        count = int(m.group(1)) if (m and n == 1 and int(m.group(1)) > 1) else 1
        if width % count:
            raise ValueError("%s: field %r is %d hex digits, not %d whole elements" % (path, name, width, count))
        digits = width // count
        dt = next(t for w, t in sorted(dtype_of.items()) if w >= digits)
        vals = np.zeros((len(cases), n * count), dtype=dt)
        for i, (row, p) in enumerate(zip(cells, present)):
            if p:
                vals[i] = [int(x[j * digits:(j + 1) * digits], 16) for x in row for j in range(count)]
        out[key] = vals[:, 0] if n * count == 1 else vals
        if not present.all():
            out[key + "_present"] = present
    return header, out
