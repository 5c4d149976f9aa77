"""The arithmetic behind a run's figures, pure and unit-tested: answers checked against a
ground truth, clustering quality, estimator error and bytes."""

__all__: list[str] = []
