"""TemplateInduction's settings refuse values no rule of the service allows (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from server.config import load_settings
from server.templates.settings import TemplatesSettings

BAD: dict[str, list[float]] = {
    "k_anonymity": [1, 0, -5],
    "match_threshold": [0, 1.5],
    "text_present": [0.2, 1.1],
    "text_absent": [-0.1, 0.9],
    "own_text_min": [0],
    "own_text_share": [-3, 2.0],
    "own_text_share_cap": [-1],
    "own_over_shared": [-0.5],
    "cut_across_ratio": [-1, 0.5],
    "cpu_workers": [0, 1000],
    "cpu_queue": [0],
    "max_batch": [0],
    "max_body_bytes": [-1],
    "email_ttl_s": [0],
}


def test_the_defaults_and_the_bounds_themselves_are_accepted() -> None:
    TemplatesSettings()
    TemplatesSettings(k_anonymity=2, match_threshold=1.0, own_text_share=0.0, cpu_workers=1)


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in BAD.items() for v in vs])
def test_a_value_out_of_range_is_refused_naming_the_setting(name: str, value: float) -> None:
    changes: dict[str, Any] = {name: value}
    with pytest.raises(ValueError, match=rf"templates\.{name} = "):
        dataclasses.replace(TemplatesSettings(), **changes)


def test_the_environment_cannot_set_k_below_two() -> None:
    with pytest.raises(ValueError, match=r"templates\.k_anonymity = 0"):
        load_settings(env={"LOOM_TEMPLATES__K_ANONYMITY": "0"})
    assert load_settings(env={"LOOM_TEMPLATES__K_ANONYMITY": "3"}).templates.k_anonymity == 3
