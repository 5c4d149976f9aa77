"""What a workload sends and who sends it: prebuilt requests and the load-generator processes
(open-loop clients, floods, the soak's mix) that run apart from the server they measure."""

__all__: list[str] = []
