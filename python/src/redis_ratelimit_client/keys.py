"""Key templates (``rl:{{{tenant}}}:{user}``), in the Rust client's syntax, which is Python's
``str.format``: ``{name}`` is the check's input ``name`` and a literal brace is doubled. Double
them for Redis Cluster hash tags: ``rl:{{{tenant}}}`` renders ``rl:{acme}``."""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAME = re.compile(r"[A-Za-z0-9_-]+")


class TemplateError(ValueError):
    """A key template that cannot be parsed."""


class MissingInput(KeyError):
    """A check did not give an input a key template needs."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"the key template needs the input '{self.name}'"


class KeyTemplate:
    """A parsed key template."""

    __slots__ = ("_segments", "text")

    def __init__(self, text: str) -> None:
        if not text:
            raise TemplateError("a key template cannot be empty")
        segments: list[tuple[bool, str]] = []
        literal: list[str] = []
        index = 0
        while index < len(text):
            char = text[index]
            pair = text[index : index + 2]
            if pair in ("{{", "}}"):
                literal.append(char)
                index += 2
                continue
            if char == "}":
                raise TemplateError(
                    f"unbalanced brace in key template '{text}' (write {{{{ and }}}} for literal braces)"
                )
            if char == "{":
                end = text.find("}", index + 1)
                if end < 0:
                    raise TemplateError(
                        f"unbalanced brace in key template '{text}' (write {{{{ and }}}} for literal braces)"
                    )
                name = text[index + 1 : end]
                if not _NAME.fullmatch(name):
                    raise TemplateError(
                        f"bad placeholder {{{name}}} in '{text}': names are ASCII letters, digits, '_' and '-'"
                    )
                if literal:
                    segments.append((False, "".join(literal)))
                    literal = []
                segments.append((True, name))
                index = end + 1
                continue
            literal.append(char)
            index += 1
        if literal:
            segments.append((False, "".join(literal)))
        self.text = text
        self._segments = tuple(segments)

    def inputs(self) -> list[str]:
        """The inputs the template uses, in order (repeats included)."""
        return [value for is_input, value in self._segments if is_input]

    def specificity(self) -> int:
        """How many distinct inputs the key depends on (per-user > per-tenant > global)."""
        return len(set(self.inputs()))

    def render(self, inputs: Mapping[str, str]) -> str:
        parts = []
        for is_input, value in self._segments:
            if not is_input:
                parts.append(value)
                continue
            try:
                parts.append(str(inputs[value]))
            except KeyError:
                raise MissingInput(value) from None
        return "".join(parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyTemplate) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"KeyTemplate({self.text!r})"

    def __str__(self) -> str:
        return self.text
