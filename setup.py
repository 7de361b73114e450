"""Package layout: everything installs under the single import name ``tsmix``.

The repository keeps ``datasets/``, ``forecasting/``, ``models/`` and ``tuning/`` at the
root (one folder per concern); setuptools' ``package_dir`` maps them to ``tsmix.datasets``
and so on, which works for wheels and editable installs alike. Sub-packages are found
automatically so a new folder needs no edit here.

A wheel built from a git checkout (``pip install .``, ``python -m build``) names the commit it was
built from: ``build_py`` writes HEAD's hash (``+dirty`` for changed tracked files) into the built
copy of ``tsmix/_archive.py``, as ``git archive`` does through export-subst, so results produced
by such an install carry provenance instead of "unknown".
"""

import importlib.util
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent

ROOTS = {
    "tsmix": "tsmix",
    "tsmix.datasets": "datasets",
    "tsmix.forecasting": "forecasting",
    "tsmix.models": "models",
    "tsmix.tuning": "tuning",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for package, folder in ROOTS.items():
    packages.append(package)
    package_dir[package] = folder
    for sub in find_packages(folder):
        packages.append(f"{package}.{sub}")
        package_dir[f"{package}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"


def _provenance():
    """tsmix/provenance.py loaded on its own: importing the package would need torch at build time."""
    spec = importlib.util.spec_from_file_location("_tsmix_provenance", HERE / "tsmix" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithCommit(build_py):
    """``build_py`` that writes the checkout's commit into the built ``tsmix/_archive.py``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install imports the checkout itself, and there git is asked
        target = Path(self.build_lib) / "tsmix" / "_archive.py"
        if not (HERE / ".git").exists() or not target.exists():
            return  # an sdist or archive: nothing to ask (an archive's hashes are already written)
        prov = _provenance()
        full, short = prov.checkout_commit(HERE, short=False), prov.checkout_commit(HERE, short=True)
        if prov.UNKNOWN in (full, short):
            return  # git missing or failing: the placeholders stay, provenance reads "unknown"
        # from the source, not the built copy: a build folder left by an earlier build keeps its
        # copy (build_py copies only newer files), which would still name that build's commit
        text = (HERE / "tsmix" / "_archive.py").read_text()
        if "$Format:%H$" not in text:
            return  # already substituted (built from an archive)
        target.unlink()  # a new file, never writing through a link back into the checkout
        target.write_text(text.replace("$Format:%H$", full).replace("$Format:%h$", short))


setup(
    cmdclass={"build_py": BuildPyWithCommit},
    packages=packages,
    package_dir=package_dir,
    package_data={"tsmix.forecasting": ["benchmark/*.csv", "benchmark/*.json"]},
    include_package_data=True,
)
