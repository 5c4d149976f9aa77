"""One module per ``python -m loadtest <name>``, found by :mod:`loadtest.registry`: each has
``add_arguments`` and ``run`` and nothing else lives here."""

__all__: list[str] = []
