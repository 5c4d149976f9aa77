"""The Python client wraps every RPC of every loom.v1 service, with the right types.

The services are discovered from the generated modules themselves, so a new RPC (or a new
.proto file) without a wrapper method fails here, and so does a wrapper left behind after an
RPC is removed.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import AsyncIterator

import loom.v1
import pytest
from google.protobuf import descriptor, message_factory
from loom_client import SERVICE_ATTRIBUTES, LoomClient, snake_case


def _services() -> list[descriptor.ServiceDescriptor]:
    found = []
    for info in pkgutil.iter_modules(loom.v1.__path__):
        if info.name.endswith("_pb2"):
            module = importlib.import_module(f"loom.v1.{info.name}")
            found.extend(module.DESCRIPTOR.services_by_name.values())
    return sorted(found, key=lambda s: s.full_name)


SERVICES = _services()
RPCS = [(s, m) for s in SERVICES for m in s.methods]


def _wrapper_class(service: descriptor.ServiceDescriptor) -> type:
    assert service.full_name in SERVICE_ATTRIBUTES, (
        f"{service.full_name} has no LoomClient attribute: add a wrapper module and an entry "
        "in loom_client._client.SERVICE_ATTRIBUTES"
    )
    return typing.get_type_hints(LoomClient)[SERVICE_ATTRIBUTES[service.full_name]]


def test_the_generated_code_has_services() -> None:
    """Discovery works: the five binding services are found (guards against a vacuous pass)."""
    expected = {"ThreadWeaver", "Iterator", "TemplateInduction", "Inbox", "Summary"}
    assert expected <= {s.name for s in SERVICES}


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.full_name)
def test_every_service_has_a_client_attribute(service: descriptor.ServiceDescriptor) -> None:
    """`LoomClient` exposes one wrapper per service."""
    assert inspect.isclass(_wrapper_class(service))


@pytest.mark.parametrize(("service", "method"), RPCS, ids=[f"{s.name}.{m.name}" for s, m in RPCS])
def test_every_rpc_has_a_typed_snake_case_method(
    service: descriptor.ServiceDescriptor, method: descriptor.MethodDescriptor
) -> None:
    """The wrapper method exists, takes the request type and returns the response type."""
    wrapper = _wrapper_class(service)
    name = snake_case(method.name)
    function = getattr(wrapper, name, None)
    assert function is not None, f"{wrapper.__name__} lacks {name}() for {method.full_name}"

    parameters = inspect.signature(function).parameters
    assert list(parameters) == ["self", "request", "timeout", "metadata", "retry"]
    assert all(
        parameters[p].kind is inspect.Parameter.KEYWORD_ONLY
        for p in ("timeout", "metadata", "retry")
    )

    hints = typing.get_type_hints(function)
    request_type = message_factory.GetMessageClass(method.input_type)
    response_type = message_factory.GetMessageClass(method.output_type)
    assert hints["request"] is request_type
    assert not method.client_streaming, "client streaming RPCs need a wrapper design first"
    if method.server_streaming:
        assert not inspect.iscoroutinefunction(function)
        assert typing.get_origin(hints["return"]) is AsyncIterator
        assert typing.get_args(hints["return"]) == (response_type,)
    else:
        assert inspect.iscoroutinefunction(function)
        assert hints["return"] is response_type


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.full_name)
def test_no_wrapper_method_outlives_its_rpc(service: descriptor.ServiceDescriptor) -> None:
    """Every public wrapper method corresponds to an RPC of the service."""
    wrapper = _wrapper_class(service)
    public = {
        name
        for name, _ in inspect.getmembers(wrapper, inspect.isfunction)
        if not name.startswith("_")
    }
    assert public == {snake_case(m.name) for m in service.methods}


def test_snake_case() -> None:
    """RPC names map to the method names the wrappers use."""
    assert snake_case("GetUnifiedThread") == "get_unified_thread"
    assert snake_case("ListInbox") == "list_inbox"
    assert snake_case("RecordDeliveryEvents") == "record_delivery_events"
