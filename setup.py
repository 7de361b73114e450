"""Package layout: everything installs under the single import name ``tsmix``.

The repository keeps ``datasets/``, ``forecasting/``, ``models/`` and ``tuning/`` at the
root (one folder per concern); setuptools' ``package_dir`` maps them to ``tsmix.datasets``
and so on, which works for wheels and editable installs alike. Sub-packages are found
automatically so a new folder needs no edit here.
"""

from setuptools import find_packages, setup

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

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"tsmix.forecasting": ["benchmark/*.csv", "benchmark/*.json"]},
    include_package_data=True,
)
