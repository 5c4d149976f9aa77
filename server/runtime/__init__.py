"""What every call shares, whatever the service: the interceptor, bulkheads, deadlines,
circuit breakers, the error hierarchy and its status mapping, auth, logs, metrics, health."""

__all__: list[str] = []
