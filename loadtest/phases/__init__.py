"""A workload's longer phases (an announcement, chains of merges, raw writes, verification),
kept beside the workload module that runs them so each module stays one page."""

__all__: list[str] = []
