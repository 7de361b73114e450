"""Registry discovery: every shipped mixer file imports, and one broken file is isolated."""

from __future__ import annotations

import importlib
import sys

import pytest

import tsmix
from tsmix import registry
from tsmix.errors import TsmixError


def test_every_shipped_mixer_module_imports():
    # a broken file would otherwise just vanish from available_mixers() and the contract suite
    assert registry.failed_imports() == {}


def test_broken_mixer_file_does_not_hide_the_others(tmp_path, monkeypatch):
    pkg = tmp_path / "tsmix_fake_mixers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(
        "from torch import nn\n"
        "from tsmix.registry import register_mixer\n"
        "@register_mixer('zz-test-good')\n"
        "class Good(nn.Module):\n"
        "    def __init__(self, dim, heads, causal, options):\n"
        "        super().__init__()\n"
        "    def forward(self, x):\n"
        "        return x\n"
    )
    (pkg / "broken.py").write_text("import this_module_does_not_exist_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        package = importlib.import_module("tsmix_fake_mixers")
        with pytest.warns(RuntimeWarning, match="tsmix_fake_mixers.broken failed to import"):
            failed = registry.import_modules(package)
        assert list(failed) == ["tsmix_fake_mixers.broken"]
        assert "this_module_does_not_exist_anywhere" in failed["tsmix_fake_mixers.broken"]
        assert "zz-test-good" in tsmix.available_mixers()  # the good file registered anyway
        monkeypatch.setattr(registry, "_FAILED", failed)
        with pytest.raises(TsmixError, match="broken failed to import"):
            tsmix.build_mixer("zz-test-broken", 8)
    finally:
        registry._REGISTRY.pop("zz-test-good", None)
        for mod in [m for m in sys.modules if m.startswith("tsmix_fake_mixers")]:
            del sys.modules[mod]
