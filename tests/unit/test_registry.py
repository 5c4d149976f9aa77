"""The service registry is the one list of services: it covers the contract, and the lists
that cannot import it agree with it.

Adding a service, or a method to one, fails here until its row (or its policy) is in
`server.registry`; nothing else needs editing for the server to mount, authorise, dump and
probe it.
"""

from __future__ import annotations

import dataclasses
import re

from google.protobuf import descriptor_pool
from loom.v1 import (
    inbox_pb2,
    iterator_pb2,
    summary_pb2,
    templates_pb2,
    threadweaver_pb2,
)
from loom_client import SERVICE_ATTRIBUTES

from server import registry
from server.cli import _STORE_FLAGS
from server.config import Settings
from server.runtime.policies import PolicyTable


def _contract_services() -> set[str]:
    pool = descriptor_pool.Default()
    names: set[str] = set()
    for module in (inbox_pb2, iterator_pb2, summary_pb2, templates_pb2, threadweaver_pb2):
        names.update(s.full_name for s in module.DESCRIPTOR.services_by_name.values())
    assert all(pool.FindServiceByName(n) for n in names)
    return names


def test_every_service_of_the_contract_has_one_row() -> None:
    """The registry's proto names are exactly the contract's services, each once."""
    protos = registry.proto_names()
    assert len(protos) == len(set(protos))
    assert set(protos) == _contract_services()


def test_every_method_has_a_policy_and_every_policy_a_method() -> None:
    """A new RPC needs its policy (deadline, bulkhead, scope) in its service's row."""
    pool = descriptor_pool.Default()
    for service in registry.SERVICES:
        methods = {
            f"{service.proto}/{m.name}" for m in pool.FindServiceByName(service.proto).methods
        }
        assert set(service.policies) == methods, service.proto


def test_every_policy_scope_starts_with_its_service_name() -> None:
    """Scopes are resolved from the registry's short names (``templates:read``), so a token
    for one service never opens another's methods."""
    for service in registry.SERVICES:
        for method in service.policies:
            scope = registry.default_policies()[method].scope
            assert scope.split(":")[0] == service.name, method


def test_an_override_without_a_scope_keeps_the_methods_scope() -> None:
    """An operator tuning a deadline in TOML does not change who may call the method."""
    defaults = registry.default_policies()
    method = "loom.v1.TemplateInduction/AnnotateEmail"
    override = dataclasses.replace(defaults[method], scope="", deadline_s=1.0)
    table = PolicyTable(defaults, {method: override})
    assert table.policy(method).scope == "templates:read"
    assert table.policy(method).deadline_s == 1.0


def test_settings_sections_are_the_service_names() -> None:
    """`Settings` spells its service sections out (mypy must see their types); they are the
    registry's names, one each."""
    settings = Settings()
    sections = {
        f.name
        for f in dataclasses.fields(Settings)
        if re.fullmatch(r"server\.\w+\.settings", type(getattr(settings, f.name)).__module__)
    }
    assert sections == {s.name for s in registry.SERVICES}


def test_the_python_client_wraps_every_service_by_its_name() -> None:
    """The client distribution cannot import the server: its table must equal the registry's."""
    assert {s.proto: s.name for s in registry.SERVICES} == SERVICE_ATTRIBUTES


def test_serve_takes_an_engine_flag_for_every_services_store() -> None:
    """`loom serve --<store>` flags come from the rows' stores, one per service."""
    assert [port.field for port, _ in _STORE_FLAGS] == [
        s.data.port.field for s in registry.SERVICES
    ]
    assert len(_STORE_FLAGS) == len(registry.SERVICES)


def test_each_service_dumps_under_its_own_name() -> None:
    """`loom dump --service` takes the registry's names, each with its own embedded file."""
    portable = registry.portable()
    assert list(portable) == [s.name for s in registry.SERVICES]
    files = [p.sqlite_file for p in portable.values()]
    assert len(files) == len(set(files))


def test_subject_erasures_and_job_deletion_need_the_admin_scope() -> None:
    """Erasing a person (or deleting a job) is an administrator's act; deleting a thread or
    a summary is an ordinary write, and reading an operation a read."""
    table = PolicyTable(registry.default_policies())
    admin = {
        "loom.v1.ThreadWeaver/UnweaveMailbox": "threadweaver:admin",
        "loom.v1.Inbox/DeleteInbox": "inbox:admin",
        "loom.v1.Summary/EraseRecipients": "summary:admin",
        "loom.v1.TemplateInduction/EraseRecipients": "templates:admin",
        "loom.v1.Iterator/DeleteJob": "iterator:admin",
    }
    for method, scope in admin.items():
        assert table.policy(method).scope == scope, method
    for method in (
        "loom.v1.ThreadWeaver/UnweaveThreads",
        "loom.v1.Inbox/DeleteThreads",
        "loom.v1.Inbox/RemoveThreads",
        "loom.v1.Summary/DeleteMessageSummaries",
    ):
        assert table.policy(method).scope.endswith(":write"), method
