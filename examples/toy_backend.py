"""A toy target backend: the target protocol over a fixed logit table (a bigram model)."""
import torch


class ToyTarget:
    """The logits after a prefix are ``table[last token]``; ``table`` is float32 ``[V, V]``."""

    name, tokenizer, max_context, last_hidden = "toy", None, 4096, None
    device, dtype, eos_token_ids, forward_time_s = torch.device("cpu"), torch.float32, set(), 0.0

    def __init__(self, table: torch.Tensor) -> None:
        self.table, self.vocab_size = table, table.shape[0]
        self.forward_calls, self.last_start, self._tree = 0, 0, None

    def reset(self) -> None:  # a new sequence: this backend keeps no KV cache
        self._tree = None

    def reset_stats(self) -> None:
        self.forward_calls = 0

    def encode_prompt(self, prompt, *, chat=None, system=None):
        raise ValueError("the toy target has no tokenizer: pass token ids")

    def decode(self, ids) -> str:
        return " ".join(map(str, ids))

    def _rows(self, tokens) -> torch.Tensor:  # one "pass": the logits after each token
        self.forward_calls += 1
        return self.table[torch.tensor([int(t) for t in tokens])]

    def logits_after(self, context, extra=(), *, hidden_layers=None) -> torch.Tensor:
        return self._rows([context[-1], *extra])  # [1 + len(extra), V]

    def tree_logits(self, context, tree, *, hidden_layers=None) -> torch.Tensor:
        self._tree = tree  # tree.tokens [1 + N] root first; tree.geometry its shape
        return self._rows([context[-1], *tree.tokens[1:]])  # row j: after the path to node j

    def keep_tree_path(self, path) -> None:  # node indices of the accepted path
        if self._tree is not None:
            self._tree.geometry.check_rooted_path(path)  # a backend with a cache keeps them here
        self._tree = None
