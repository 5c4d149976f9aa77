"""When tracing turns on (the standard OTEL_* variables), and what its hooks do when off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from opentelemetry import context as otel_context

from server.iterator.model import WorkMessage
from server.runtime import tracing

_OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)
# Nothing listens here: no test below ends a span, so nothing is ever sent.
_NOWHERE = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No OTEL_* variable from the caller's shell; tracing off again afterwards."""
    for name in _OTEL:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch
    tracing.shutdown()


class TestConfigure:
    def test_off_when_no_variable_asks(self) -> None:
        """No OTEL_* variable: nothing is installed and every hook is a no-op."""
        assert tracing.configure() is False
        assert tracing.enabled() is False
        assert tracing.rpc_started("loom.v1.Inbox/PostMessage", ()) is None
        assert tracing.traceparent() == ""
        assert tracing.current_link() is None
        assert tracing.parse_traceparent("00-" + "1" * 32 + "-" + "2" * 16 + "-01") is None

    @pytest.mark.parametrize(
        ("variables", "on"),
        [
            ({"OTEL_EXPORTER_OTLP_ENDPOINT": _NOWHERE}, True),
            ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": _NOWHERE}, True),
            ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
            ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": _NOWHERE}, False),
            ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": _NOWHERE}, False),
        ],
        ids=["endpoint", "traces-endpoint", "exporter-otlp", "exporter-none", "sdk-disabled"],
    )
    def test_the_standard_variables_decide(
        self, clean_env: pytest.MonkeyPatch, variables: dict[str, str], on: bool
    ) -> None:
        """An OTLP endpoint or exporter turns tracing on; none or a disabled SDK keep it off."""
        for name, value in variables.items():
            clean_env.setenv(name, value)
        assert tracing.configure() is on
        assert tracing.enabled() is on

    @pytest.mark.parametrize(
        ("name", "value"),
        [("OTEL_TRACES_EXPORTER", "zipkin"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
        ids=["exporter", "protocol"],
    )
    def test_what_loom_cannot_export_is_refused(
        self, clean_env: pytest.MonkeyPatch, name: str, value: str
    ) -> None:
        """An exporter or protocol other than OTLP/gRPC is a settings error, not silence."""
        clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", _NOWHERE)
        clean_env.setenv(name, value)
        with pytest.raises(ValueError, match=name):
            tracing.configure()
        assert tracing.enabled() is False


class TestSpans:
    def test_a_caller_traceparent_is_continued_and_travels_on(
        self, clean_env: pytest.MonkeyPatch
    ) -> None:
        """The RPC span is the caller's trace; work queued inside it carries that span."""
        clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", _NOWHERE)
        assert tracing.configure()
        caller = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        rpc = tracing.rpc_started("loom.v1.Inbox/PostMessage", (("traceparent", caller),))
        assert rpc is not None
        assert rpc.trace_id == "ab" * 16
        queued = tracing.traceparent()
        assert queued.startswith("00-" + "ab" * 16 + "-")
        assert queued != caller  # the server's span, not the caller's
        link = tracing.parse_traceparent(queued)
        assert link is not None
        here = tracing.current_link()
        assert here is not None
        assert (link.trace_id, link.span_id) == (here.trace_id, here.span_id)
        # Never ended (an ended span would be exported, to nowhere): only let go of it.
        otel_context.detach(rpc.token)  # type: ignore[arg-type]
        structlog.contextvars.unbind_contextvars("trace_id")


class TestWorkMessage:
    def test_the_trace_context_travels_in_the_body(self) -> None:
        """A traced step's body carries its traceparent as a fourth element."""
        message = WorkMessage("j", "t", 3, trace="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        assert WorkMessage.loads(message.dumps()) == message

    def test_untraced_bodies_are_the_three_elements_every_release_reads(self) -> None:
        """Tracing off, the body is unchanged from earlier releases, and theirs still parse."""
        assert WorkMessage("j", "t", 3).dumps() == '["j","t",3]'
        assert WorkMessage.loads('["j","t",3]') == WorkMessage("j", "t", 3)
        assert WorkMessage.loads('["j","t",3,4]') == WorkMessage("j", "t", 3)
        assert WorkMessage("j", "t", 3).dumps().startswith(WorkMessage.prefix("j"))
