"""Theory toolkit: optimal acceptance α*, SpecTr bounds and the speedup model (issue 4)."""

__all__: list[str] = []
