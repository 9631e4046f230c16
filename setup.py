"""Build hook for the optional C scan loop (app/core/_shapescan.c); metadata is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and logdx uses its
pure-Python scan loop (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("app.core._shapescan", ["app/core/_shapescan.c"], depends=["app/core/_shapehash.h", "app/core/_shapetable.h", "app/core/_keptslots.h", "app/core/_foldkey.h"],
                             optional=True, extra_compile_args=["-O3"])])
