"""Registry discovery: every shipped mixer file imports, and one broken file is isolated."""

from __future__ import annotations

import dataclasses
import importlib
import re
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
        "    def reference(self, x):\n"
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


def test_capabilities_are_declared_and_kept_on_the_spec():
    spec = tsmix.mixer_spec("yb-spectral")
    assert spec.capabilities.position_aware and not spec.capabilities.causal
    assert (spec.supports_causal, spec.supports_bidirectional) == (False, True)  # the old names still read
    assert tsmix.mixer_capabilities("linear").streaming and not tsmix.mixer_capabilities("softmax").streaming
    labels = ["causal", "bidirectional", "position-aware", "streaming"]
    assert tsmix.mixer_capabilities("gla").labels() == labels


def test_position_awareness_can_depend_on_the_options():
    # fem-sm orders tokens through C (cond) or RoPE; softmax alone is permutation-equivariant
    assert tsmix.mixer_capabilities("fem-sm").position_aware
    assert not tsmix.mixer_capabilities("fem-sm", cond=False).position_aware
    assert tsmix.mixer_capabilities("fem-sm", cond=False, rope=True).position_aware
    with pytest.raises(TsmixError, match="option 'cond' of mixer 'fem-sm' must be bool"):
        tsmix.mixer_capabilities("fem-sm", cond="no")


def test_unsupported_mode_names_what_the_mixer_supports():
    shown = "mixer 'yb-spectral' supports only bidirectional use "
    shown += "(capabilities: bidirectional, position-aware)"
    with pytest.raises(TsmixError, match="^" + re.escape(shown) + "; use causal=False"):
        tsmix.build_mixer("yb-spectral", 16, causal=True)
    with pytest.raises(TsmixError, match="causal must be a bool"):
        tsmix.build_mixer("softmax", 16, causal=1)


def test_position_indexed_is_declared_and_follows_the_awareness_rule():
    # the YB maps' weights are functions of the positions; a decayed scan is position-aware only
    assert tsmix.mixer_capabilities("yb-brickwall").position_indexed
    assert tsmix.mixer_capabilities("yb-spectral").position_indexed
    gla = tsmix.mixer_capabilities("gla")
    assert gla.position_aware and not gla.position_indexed
    assert tsmix.mixer_capabilities("yb-spectral").labels() == ["bidirectional", "position-aware"]
    with pytest.raises(TypeError, match="position_indexed .* needs position_aware=True"):
        registry.register_mixer("zz-test-indexed", position_indexed=True)

    @dataclasses.dataclass(frozen=True)
    class Opts:
        table: bool = False  # a learned position table: on only when asked

    try:  # capabilities come from the registration alone: a shipped class stands in, never built here
        registry.register_mixer("zz-test-indexed", options=Opts, position_aware=lambda o: o.table,
                                position_indexed=True)(tsmix.mixer_spec("yb-spectral").cls)
        assert not tsmix.mixer_capabilities("zz-test-indexed").position_indexed  # rule off at defaults
        assert tsmix.mixer_capabilities("zz-test-indexed", table=True).position_indexed
        assert not tsmix.mixer_capabilities("zz-test-indexed", table=False).position_indexed
    finally:
        registry.unregister_mixer("zz-test-indexed")
