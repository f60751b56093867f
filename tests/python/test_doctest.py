"""The examples in the package's docstrings run as written (doctest) and print what they show."""
import doctest

import pytest

import qmx
import qmx.golden
import qmx.io
import qmx.testing


@pytest.mark.parametrize("module", [qmx, qmx.golden, qmx.io, qmx.testing], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0


def test_the_package_docstring_has_examples():
    # A doctest that finds no example passes: make sure the package's own example is still there.
    tests = {t.name: t for t in doctest.DocTestFinder().find(qmx, "qmx")}
    assert len(tests["qmx"].examples) >= 8
