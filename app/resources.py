"""Where logdx finds the data it ships: rule files, prompts, migrations, example logs and the
benign-line corpora.

In the repository they are top-level folders (`rules/`, `prompts/`, `alembic/`, `examples/`,
`tests/data/`), edited there. A wheel cannot install top-level folders next to the `app`
package, so the build copies them into the package as `app/_data/<name>/` (setup.py's
`build_py`; MANIFEST.in puts the sources in the sdist). This module is the one place that knows
both layouts: the package data first (an installed wheel, found through `importlib.resources`),
else the checkout's folder (an editable install, or running from a clone). Nothing else in logdx
builds a path to these from `__file__`.

Kept cheap to import: the CLI's start-up runs through it once per `logdx diagnose`.
"""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from functools import cache
from pathlib import Path

# name -> (folder in the checkout, the files of it the wheel carries: glob patterns)
DATA: dict[str, tuple[str, tuple[str, ...]]] = {
    "rules": ("rules", ("**/*.yaml",)),
    "prompts": ("prompts", ("**/*.yaml",)),
    "alembic": ("alembic", ("env.py", "script.py.mako", "versions/*.py")),
    "examples": ("examples", ("sample_job.log", "sample_job.log.gz", "sample_job.log.zst", "realworld/*.log")),
    "corpora": ("tests/data", ("metric_lines.txt", "normal_lines.txt")),
}
PACKAGE_DATA = "_data"  # app/_data/<name>/ in a built wheel

_HERE = Path(__file__).resolve().parent
CHECKOUT = _HERE.parent
_ON_DISK = Path(__file__).is_file()  # a plain file-system package, not a zip import
_extracted = ExitStack()  # package data a non-file-system loader had to extract (rare: zip imports)
atexit.register(_extracted.close)


class DataNotFound(FileNotFoundError):
    """Neither the installed package nor a checkout has this data folder: a broken install."""


def _from_package(name: str) -> Path | None:
    """`app/_data/<name>` of the installed package, through importlib.resources. A package on a
    file system (every pip install) has a plain directory there: that path is what
    `importlib.resources.files` returns for it, so it is looked at first without importing the
    resources machinery (a few ms of every CLI start)."""
    direct = _HERE / PACKAGE_DATA / name
    if direct.is_dir():
        return direct
    if _ON_DISK:  # importlib.resources would look in the same directory: not there
        return None
    import importlib.resources as resources

    try:
        node = resources.files("app").joinpath(PACKAGE_DATA, name)
    except (ModuleNotFoundError, TypeError):
        return None
    if not node.is_dir():
        return None
    if isinstance(node, Path):
        return node
    return _extracted.enter_context(resources.as_file(node))  # a zip: extracted for this process


@cache
def data_dir(name: str) -> Path:
    """The folder of shipped data `name` (a key of DATA)."""
    if name not in DATA:
        raise KeyError(f"unknown data folder {name!r}; known: {', '.join(DATA)}")
    found = _from_package(name)
    if found is not None:
        return found
    checkout = CHECKOUT / DATA[name][0]
    if checkout.is_dir():
        return checkout
    raise DataNotFound(f"logdx's {name} are missing: neither {_HERE / PACKAGE_DATA / name} (an installed "
                       f"wheel) nor {checkout} (a checkout) exists; reinstall logdx")


def data_file(name: str, relative: str) -> Path:
    """A file under data folder `name`, e.g. data_file("rules", "recovery.yaml")."""
    return data_dir(name) / relative


def rules_dir() -> Path:
    """The rule library shipped with logdx (diagnosis, filter, policy, recovery and probe files)."""
    return data_dir("rules")


def package_dir(relative: str) -> Path:
    """A folder inside the `app` package itself (web templates and static files), as
    importlib.resources finds it."""
    direct = _HERE / relative
    if direct.is_dir():
        return direct
    import importlib.resources as resources

    node = resources.files("app").joinpath(*relative.split("/"))
    if isinstance(node, Path):
        return node
    return _extracted.enter_context(resources.as_file(node))
