"""The one table of Loom's services; every other list of them is derived from it.

A service is wired in by one `Service` row here: its proto name, its short name (the token
scope prefix, the settings section, `loom dump --service` and the Python client's
attribute), how it mounts, its methods' default policies and its data as portable records.
Everything is imported statically, so a reader or a tool can follow how a service is wired
from this file. `tests/unit/test_registry.py` checks that the table covers every service and
method of the contract, and that the two lists that cannot import it (the `Settings`
sections, whose fields mypy must see, and the separate client distribution) agree with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import grpc

from server.inbox import mount as inbox
from server.iterator import mount as iterator
from server.portable.records import PortableService
from server.runtime.auth import method_scope
from server.runtime.mounting import Mounted, Resources
from server.runtime.policies import MethodPolicy
from server.summary import mount as summary
from server.templates import mount as templates
from server.threadweaver import mount as threadweaver

if TYPE_CHECKING:
    from server.config import Settings

__all__ = ["SERVICES", "Service", "by_name", "default_policies", "portable", "proto_names"]

Mount = Callable[[grpc.aio.Server, "Settings", Resources], Awaitable[Mounted]]
"""Opens a service's stores, starts its background work and registers its servicer."""


@dataclass(frozen=True, slots=True)
class Service:
    """One service of the contract, as the server wires it."""

    proto: str
    """Full proto name, ``loom.v1.Inbox``: health, reflection and policies key on it."""
    name: str
    """Short name: the token scope prefix (``inbox:read``), the settings section
    (``[inbox]``), ``loom dump --service inbox`` and ``LoomClient.inbox``."""
    mount: Mount
    policies: Mapping[str, MethodPolicy]
    """Per-method defaults (bulkhead, deadline, scope), keyed ``loom.v1.Inbox/Method``."""
    data: PortableService
    """Its store as portable records, for dump, load and diff."""


SERVICES: tuple[Service, ...] = (
    Service("loom.v1.ThreadWeaver", "threadweaver", threadweaver.mount, threadweaver.POLICIES,
            threadweaver.DATA),
    Service("loom.v1.Inbox", "inbox", inbox.mount, inbox.POLICIES, inbox.DATA),
    Service("loom.v1.Summary", "summary", summary.mount, summary.POLICIES, summary.DATA),
    Service("loom.v1.TemplateInduction", "templates", templates.mount, templates.POLICIES,
            templates.DATA),
    Service("loom.v1.Iterator", "iterator", iterator.mount, iterator.POLICIES, iterator.DATA),
)  # fmt: skip
"""In mount order (shutdown closes them in reverse), which is also the order `loom dump`
writes them in."""


def proto_names() -> tuple[str, ...]:
    """Every service's full proto name."""
    return tuple(s.proto for s in SERVICES)


def by_name(name: str) -> Service:
    """The service called `name` (``inbox``); KeyError names the known ones."""
    for service in SERVICES:
        if service.name == name:
            return service
    raise KeyError(f"no service {name!r}; one of {', '.join(s.name for s in SERVICES)}")


def default_policies() -> dict[str, MethodPolicy]:
    """Every method's default policy, its scope resolved (``templates:read``, not one
    derived from the proto name), so an operator's override keeps the method's scope."""
    return {
        method: replace(policy, scope=method_scope(method, policy.scope, service.name))
        for service in SERVICES
        for method, policy in service.policies.items()
    }


def portable() -> dict[str, PortableService]:
    """Every service's portable data, by short name (``loom dump --service``'s choices)."""
    return {s.name: s.data for s in SERVICES}
