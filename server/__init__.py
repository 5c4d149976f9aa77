"""Loom's asyncio gRPC server: `app` builds it, `cli` runs it (`loom serve`), one package
per service (handler, domain, mount) and `runtime` for what every call shares."""

__all__: list[str] = []
