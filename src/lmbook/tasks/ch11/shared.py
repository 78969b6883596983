"""What exercise 11's tasks share: the ready-made answers they refuse."""

from __future__ import annotations

# The course's own answers (chapter 11's library) and the libraries that hold ready-made ones.
MODULES = ("lmbook.llama", "lmbook.dpo", "lmbook.instruct", "lmbook.scaling_laws", "lmbook.gpt", "transformers",
           "trl")
ATTRS = ("llama", "dpo", "instruct", "scaling_laws", "transformers", "trl")
