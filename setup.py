# setup.py: pip's build of the Python package qmx (pyproject.toml). CMake compiles libqmx and the pybind11
# extension _qmx for the Python that runs pip; setuptools packs it with lib/python/qmx.
#   pip install .                                   # where pip can fetch setuptools and wheel
#   pip install --no-build-isolation .              # offline, with the build tools already installed
# QMX_BUILD_DIR=DIR builds in DIR (a CMake build tree of this source for the same Python is reused as it
# is); QMX_CMAKE_ARGS adds configure flags (e.g. "-DQMX_ENABLE_CUDA=OFF").
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)  # setuptools' build and egg-info go there


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("QMX_BUILD_DIR") or os.path.join(ROOT, "build-pip"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DQMX_PYTHON=ON",
                    "-DQMX_BUILD_TESTS=OFF", "-DQMX_BUILD_CLI=OFF", "-DPython3_EXECUTABLE=" + sys.executable]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            try:  # pybind11 from pip, where Debian's pybind11-dev is not installed
                import pybind11
                args.append("-Dpybind11_DIR=" + pybind11.get_cmake_dir())
            except ImportError:
                pass
            args += shlex.split(os.environ.get("QMX_CMAKE_ARGS", ""))
            subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_qmx", "--parallel"])
        built = glob.glob(os.path.join(build_dir, "python", "qmx", "_qmx*.so"))
        if len(built) != 1:
            raise RuntimeError("qmx: expected one _qmx extension in %s/python/qmx, found %d" % (build_dir, len(built)))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(built[0], dest)
        # qmx/_build.py (written by CMake) says whether the extension links the CUDA runtime, so that qmx loads
        # torch's copy of it first; without it a CUDA build imported before torch aborts the process.
        shutil.copy2(os.path.join(build_dir, "python", "qmx", "_build.py"), os.path.dirname(dest))


setup(
    packages=["qmx"],
    package_dir={"qmx": "lib/python/qmx"},
    ext_modules=[CMakeExtension("qmx._qmx")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip/setuptools"}, "egg_info": {"egg_base": "build-pip"}},
)
