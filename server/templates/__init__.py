"""TemplateInduction: online template induction of machine-generated email (Google's
Crusher), on a SEDA pipeline of a CPU stage, an I/O stage and formations."""

__all__: list[str] = []
