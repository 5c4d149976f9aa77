"""Settings load from defaults, TOML, environment and flags, in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import MethodPolicy, load_settings


class TestLoadSettings:
    def test_defaults_serve_the_embedded_engine(self) -> None:
        """With nothing set, Loom serves on 50051 with SQLite under ./data."""
        s = load_settings(env={})
        assert (s.server.port, s.sqlite.data_dir, s.storage.threadweaver_store) == (
            50051,
            "./data",
            "sqlite",
        )

    def test_precedence_is_toml_then_env_then_flags(self, tmp_path: Path) -> None:
        """Env beats TOML; flags beat env; per-method policies come from TOML."""
        toml = tmp_path / "loom.toml"
        toml.write_text(
            '[server]\nport = 1\nhost = "0.0.0.0"\n'
            '[policies."loom.v1.ThreadWeaver/WeaveMessages"]\nmax_concurrency = 3\n'
        )
        s = load_settings(
            toml,
            env={"LOOM_SERVER__PORT": "2", "LOOM_CASSANDRA__CONTACT_POINTS": "a, b"},
            overrides={"server": {"port": 3}},
        )
        assert (s.server.port, s.server.host) == (3, "0.0.0.0")
        assert s.cassandra.contact_points == ("a", "b")
        assert s.policies["loom.v1.ThreadWeaver/WeaveMessages"] == MethodPolicy(max_concurrency=3)

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            ({"LOOM_SERVER__PORT": "eighty"}, "not a valid int"),
            ({"LOOM_STORAGE__THREADWEAVER_STORE": "oracle"}, "is not one of"),
            ({"LOOM_SERVER__NOPE": "1"}, "unknown settings"),
            ({"LOOM_NOPE__X": "1"}, "unknown settings section"),
        ],
        ids=["bad-int", "bad-engine", "unknown-field", "unknown-section"],
    )
    def test_bad_settings_are_refused_with_a_reason(
        self, env: dict[str, str], message: str
    ) -> None:
        """A typo in a setting stops start-up with a message naming it."""
        with pytest.raises(ValueError, match=message):
            load_settings(env=env)
