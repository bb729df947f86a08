"""Draft laws: samplers of n drafts from q, and their exact enumeration on small vocabularies."""

__all__: list[str] = []
