"""Build spotref; the Cython twin of spotref/spec/core.py is compiled from _ext/core.pyx.

SPOTREF_NO_EXTENSIONS=1 skips the build (the pure-Python core is then used). Otherwise a build
error fails the install: a silently missing extension would hide a core 46x slower at build_tree
+ walk (docs/core-benchmark.md).
"""

import os

from setuptools import setup

ext_modules = []
if not os.environ.get("SPOTREF_NO_EXTENSIONS"):
    from Cython.Build import cythonize
    from setuptools import Extension

    ext_modules = cythonize(
        [Extension("spotref._core", ["_ext/core.pyx"], extra_compile_args=["-O3"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )

setup(ext_modules=ext_modules)
