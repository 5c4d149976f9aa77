"""Loom's typed asyncio Python client.

::

    from loom_client import LoomClient, LoomError, RetryPolicy
    from loom.v1 import threadweaver_pb2

    async with LoomClient.connect("127.0.0.1:50051", retry=RetryPolicy()) as client:
        reply = await client.threadweaver.weave_message(request, timeout=2.0)

Modules are private; this package re-exports the public names (pinned by a test).
"""

from ._calls import CallDefaults, Metadata
from ._client import SERVICE_ATTRIBUTES, LoomClient, rpc_method, snake_case
from ._errors import FieldViolation, LoomError
from ._inbox import InboxClient
from ._iterator import IteratorClient
from ._retry import NO_RETRY, RETRYABLE_CODES, RetryPolicy
from ._summary import SummaryClient
from ._templates import TemplatesClient
from ._threadweaver import ThreadWeaverClient

__all__ = [
    "NO_RETRY",
    "RETRYABLE_CODES",
    "SERVICE_ATTRIBUTES",
    "CallDefaults",
    "FieldViolation",
    "InboxClient",
    "IteratorClient",
    "LoomClient",
    "LoomError",
    "Metadata",
    "RetryPolicy",
    "SummaryClient",
    "TemplatesClient",
    "ThreadWeaverClient",
    "rpc_method",
    "snake_case",
]
