"""pip install --no-build-isolation .   (offline, with Debian's python3-pip, -setuptools, -wheel)

Builds the pybind11 module troupe._core with the project's CMake (for the interpreter running
pip) and installs it with the pure-Python package from python/troupe.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup, find_packages
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(troupe VERSION"):
                return line.split("VERSION")[1].split()[0]
    return "0.0.0"


class CMakeBuild(build_ext):
    """Configures the project with CMake and builds only the Python module's target."""

    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            f"-DTROUPE_PYTHON_EXECUTABLE={sys.executable}", "-DTROUPE_BUILD_TESTS=OFF",
            "-DTROUPE_BUILD_BENCH=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "troupe_python_core",
                               f"-j{os.cpu_count() or 2}"])
        built = glob.glob(os.path.join(build, "python", "troupe", "_core*.so"))
        if not built:
            raise RuntimeError("the CMake build made no troupe/_core*.so")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    name="troupe",
    version=version(),
    description="Drive groups of worker processes from one controller (C++ runtime, Python API)",
    packages=find_packages("python", include=["troupe", "troupe.*"]),
    package_dir={"": "python"},
    ext_modules=[Extension("troupe._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
