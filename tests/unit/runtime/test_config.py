"""Settings load from defaults, the chosen engines' defaults, TOML, environment and flags, in
that order; each service's settings live in its own package."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import itertools
from pathlib import Path

import pytest

from server import cli, config
from server.config import Settings, load_settings
from server.runtime.policies import MethodPolicy

ROOT = Path(__file__).resolve().parents[3]
SERVICES = ("threadweaver", "summary", "inbox", "iterator", "templates")


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
            ({"LOOM_STORAGE__THREADWEAVER_STORE": "oracle"}, "threadweaver_store = 'oracle'"),
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


class TestEngines:
    def test_an_engine_the_port_lacks_is_refused_naming_the_setting(self, tmp_path: Path) -> None:
        """``summary_store = "sqs"`` stops loading, naming the setting and what it accepts."""
        toml = tmp_path / "loom.toml"
        toml.write_text('[storage]\nsummary_store = "sqs"\n')
        with pytest.raises(ValueError, match="summary_store") as caught:
            load_settings(toml, env={})
        expected = (
            "storage.summary_store = 'sqs' is not supported: SummaryStore runs on sqlite or "
            "dynamodb"
        )
        assert expected == str(caught.value)

    def test_loom_serve_exits_2_naming_the_setting(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same refusal from `loom serve`: exit 2 before anything opens or listens."""
        monkeypatch.setenv("LOOM_STORAGE__SUMMARY_STORE", "sqs")
        assert cli.main(["serve", "--port", "0"]) == 2
        expected = (
            "loom: bad settings: storage.summary_store = 'sqs' is not supported: "
            "SummaryStore runs on sqlite or dynamodb\n"
        )
        assert expected == capsys.readouterr().err

    def test_a_source_url_of_no_source_engine_is_refused(self) -> None:
        """The Iterator's source is checked by its URL's scheme, the password never shown."""
        with pytest.raises(ValueError, match=r"iterator\.source_url: scheme 'oracle'") as caught:
            load_settings(env={"LOOM_ITERATOR__SOURCE_URL": "oracle://scott:tiger@db/orcl"})
        assert "tiger" not in str(caught.value)

    @pytest.mark.parametrize(
        ("engine", "pacing"),
        [("sqlite", (50_000.0, 1)), ("cassandra", (0.0, 4))],
        ids=["sqlite", "cassandra"],
    )
    def test_the_chosen_engines_defaults_are_applied_while_loading(
        self, engine: str, pacing: tuple[float, int]
    ) -> None:
        """The Inbox fan-out's pacing is final once loaded: its InboxStore engine's."""
        s = load_settings(env={"LOOM_STORAGE__INBOX_STORE": engine})
        assert pacing == (s.inbox.fanout_rate_per_s, s.inbox.fanout_chunks_in_flight)

    def test_a_value_set_beats_the_engines_default(self, tmp_path: Path) -> None:
        """TOML, environment and flags all win over the engine's default, field by field."""
        toml = tmp_path / "loom.toml"
        toml.write_text("[inbox]\nfanout_chunks_in_flight = 2\n")
        s = load_settings(
            toml,
            env={"LOOM_STORAGE__INBOX_STORE": "cassandra", "LOOM_INBOX__FANOUT_RATE_PER_S": "9"},
        )
        assert (s.inbox.fanout_rate_per_s, s.inbox.fanout_chunks_in_flight) == (9.0, 2)


def _undocumented_fields(cls: type) -> list[str]:
    """Fields of dataclass `cls` not followed by a docstring in its source."""
    source = Path(ROOT / (cls.__module__.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    body = next(
        node.body
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__
    )
    documented = {
        stmt.target.id
        for stmt, after in itertools.pairwise(body)
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }
    return [f.name for f in dataclasses.fields(cls) if f.name not in documented]


class TestSettingsShape:
    @pytest.mark.parametrize("service", SERVICES)
    def test_each_service_owns_its_settings(self, service: str) -> None:
        """``server/<service>/settings.py`` holds the service's frozen settings, a docstring
        on every field; `server.config` only gathers them into `Settings`."""
        cls = type(getattr(Settings(), service))
        assert f"server.{service}.settings" == cls.__module__
        assert cls.__dataclass_params__.frozen
        assert _undocumented_fields(cls) == []

    def test_nothing_imports_a_services_settings_through_config(self) -> None:
        """Services, tests and the harness import a service's settings from its package."""
        service_names = {
            name
            for service in SERVICES
            for name in importlib.import_module(f"server.{service}.settings").__all__
        }
        assert set() == service_names & set(config.__all__)
        offenders = []
        for folder in ("server", "tests", "loadtest"):
            for path in sorted((ROOT / folder).rglob("*.py")):
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                    if isinstance(node, ast.ImportFrom) and node.module == "server.config":
                        offenders += [
                            f"{path.relative_to(ROOT)}: {alias.name}"
                            for alias in node.names
                            if alias.name in service_names
                        ]
        assert offenders == []
