#!/usr/bin/env python3
"""The test suite's naming rule (tests/README.md "Names and tags"): every Catch2 TEST_CASE in
tests/<folder>/test_*.cc is named "<layer>: <behaviour>" and carries its folder as a tag, so a report
names where a failure lives and `qmx_tests "[<folder>]"` runs a folder's tests. Usage: check_test_names.py
TESTS_DIR; prints each offence and exits 1 if there is any."""
import pathlib
import re
import sys

CASE = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+),\s*"([^"]*)"\s*\)')
NAME = re.compile(r'^[a-z0-9][a-zA-Z0-9 ._/+=-]*: \S')


def main(tests_dir):
    offences, count = [], 0
    for path in sorted(pathlib.Path(tests_dir).glob("*/test_*.cc")):
        folder = path.parent.name
        text = path.read_text()
        for m in CASE.finditer(text):
            count += 1
            name = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
            line = text.count("\n", 0, m.start()) + 1
            where = f"{path.relative_to(tests_dir)}:{line}"
            if not NAME.match(name):
                offences.append(f'{where}: "{name}" is not named "<layer>: <behaviour>"')
            if f"[{folder}]" not in m.group(2):
                offences.append(f'{where}: "{name}" lacks its folder tag [{folder}] (has {m.group(2)})')
    for o in offences:
        print(o)
    if count == 0:
        print(f"check_test_names: no TEST_CASE found under {tests_dir}")
        return 1
    print(f"{count} test cases, {len(offences)} offences")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "tests"))
