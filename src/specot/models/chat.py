"""Chat formatting: prompts as one user turn of the tokenizer's chat template, and decoding."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["encode_prompt", "decode_tokens"]


def encode_prompt(tokenizer: Any, prompt: str, *, chat: bool | None = None, system: str | None = None,
                  name: str = "model") -> list[int]:
    """Token ids of ``prompt``; with ``chat`` (default: when the tokenizer has a chat template)
    the prompt is wrapped as one user turn of the chat template with the generation prompt.

    Raises:
        ValueError: no tokenizer, or ``chat=True`` with a tokenizer without a chat template.
    """
    if tokenizer is None:
        raise ValueError(f"{name} has no tokenizer; pass token ids instead of text")
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    if use_chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"{name}'s tokenizer has no chat template; use raw text (chat=False)")
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = enc["input_ids"] if hasattr(enc, "keys") else enc
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer(prompt)["input_ids"]]


def decode_tokens(tokenizer: Any, ids: Sequence[int]) -> str:
    """Text of ``ids`` (special tokens skipped); space-separated ids without a tokenizer."""
    if tokenizer is None:
        return " ".join(str(i) for i in ids)
    return tokenizer.decode(list(ids), skip_special_tokens=True)
