"""Build hooks; metadata is in pyproject.toml.

- The optional C scan loop (app/core/_shapescan.c). `optional=True`: without a C compiler the
  install still succeeds and logdx uses its pure-Python scan loop (same results, slower).
- The data logdx ships lives in top-level folders of the repository (rules/, prompts/, alembic/,
  examples/, tests/data/), where it is edited. `build_py` copies the files app/resources.py lists
  into the built package as app/_data/<name>/, so a wheel carries them (never into the source
  tree: a checkout reads the folders themselves). MANIFEST.in puts them in the sdist, whose wheel
  is built the same way.
"""

import importlib.util
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _data_spec() -> dict:
    """app/resources.py's DATA table, read without importing the package (its dependencies are
    not installed at build time)."""
    spec = importlib.util.spec_from_file_location("_logdx_resources", ROOT / "app" / "resources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DATA, module.PACKAGE_DATA


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's folders
            return
        data, package_data = _data_spec()
        for name, (source, patterns) in data.items():
            src = ROOT / source
            if not src.is_dir():
                raise SystemExit(f"setup.py: {src} is missing: the wheel must carry logdx's {name}")
            target = Path(self.build_lib) / "app" / package_data / name
            if target.exists():
                shutil.rmtree(target)
            files = sorted({p for pattern in patterns for p in src.glob(pattern) if p.is_file()})
            if not files:
                raise SystemExit(f"setup.py: no {name} files under {src} ({', '.join(patterns)})")
            for path in files:
                out = target / path.relative_to(src)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)


setup(
    cmdclass={"build_py": BuildPyWithData},
    ext_modules=[Extension("app.core._shapescan", ["app/core/_shapescan.c"],
                           depends=["app/core/_shapehash.h", "app/core/_shapetable.h", "app/core/_keptslots.h",
                                    "app/core/_foldkey.h"],
                           optional=True, extra_compile_args=["-O3"])],
)
