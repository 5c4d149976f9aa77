"""Every baseline a figure is measured against, in the same run: the old design (BFS), the
engines' bare operations (conditional writes, raw rows, step transactions, a keyset scan)
and the CPU floor of template induction."""

__all__: list[str] = []
