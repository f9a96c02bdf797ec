"""Render the model's own chat template (Jinja, from the GGUF or a remote server's /props) into the prompt text.

A template comes from outside (a downloaded GGUF, any server) and runs every turn, so it runs in Jinja's
immutable sandbox (no attribute tricks, no changing the messages) with bounds on what it can make us compute
(issue 37): every loop step and call counts against a step budget and a deadline, and every string or list it
builds (``*``, ``+``, ``~``, ``%``, ``join``, ``replace``, ``center``, ...) is checked against a size cap
*before* it is built, so ``range(100000)`` nested in itself or ``'x' * 4000000000`` ends in words within
milliseconds instead of growing until MemoryError. The bounds are far above what a real template needs (Qwen's
renders a long chat in a few thousand steps).

A template that breaks (a syntax error, a bound, any exception) is replaced by ChatML, which Qwen models read,
and said once (:func:`take_notices`, and the log); a template that refuses the messages on purpose
(``raise_exception(...)``) is still an :class:`EngineError`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, TemplateError, nodes
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from app.core.errors import EngineError

log = logging.getLogger(__name__)

# The fallback when a GGUF carries no template, or its template cannot be rendered: Qwen's ChatML.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

MAX_TEMPLATE = 1 << 20  # characters of template source (Qwen's is about 10 KiB)
BASE_SIZE = 8 << 20  # characters (or items) of any one string or list a template builds, beyond 4x the messages
BASE_STEPS = 1_000_000  # loop steps and calls per render, beyond 1,000 per message
DEADLINE_S = 5.0  # wall time per render: the backstop behind the step budget
_INT_BITS = 1 << 20  # bits of an integer a template may compute (about 315,000 digits)


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class TemplateLimitError(TemplateError):
    """A template went past a bound: it is treated as broken (ChatML is used instead)."""


class _Refused(Exception):
    """``raise_exception(...)`` in a template: it refuses these messages on purpose."""


class _Budget:
    """One render's bounds: steps left, the deadline and the size cap."""

    def __init__(self, cap: int, steps: int, seconds: float) -> None:
        self.cap = cap
        self.steps = steps
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds

    def tick(self, n: int = 1) -> None:
        self.steps -= n
        if self.steps < 0:
            raise TemplateLimitError("it runs more loop steps and calls than any chat template needs")
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(f"it ran for more than {self.seconds:g} s")

    def size(self, n: int, what: str = "a string") -> None:
        if n > self.cap:
            raise TemplateLimitError(f"it builds {what} of {n:,} characters or items (at most {self.cap:,})")


_LOCAL = threading.local()


def _budget() -> _Budget:
    budget: _Budget | None = getattr(_LOCAL, "budget", None)
    if budget is None:  # compiled templates only run inside render(), which sets one
        raise TemplateLimitError("it ran outside a render")
    return budget


def _weight(value: Any, depth: int = 0) -> int:
    """How many characters/items ``value`` stands for (a list of a big string counts the string each time)."""
    if isinstance(value, str | bytes):
        return len(value)
    if depth > 8:  # deeper than any chat's data: counted as past the cap (not as 1, which a nesting could exploit)
        return _budget().cap + 1
    if isinstance(value, list | tuple):
        total, cap = len(value), _budget().cap
        for item in value:
            total += len(item) if isinstance(item, str) else _weight(item, depth + 1)
            if total > cap:
                break
        return total
    if isinstance(value, dict):
        return len(value) + sum(_weight(k, depth + 1) + _weight(v, depth + 1) for k, v in value.items())
    return 1


def _check_int(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _budget().cap:
        shown = f"{value:,}" if value.bit_length() < 100 else f"of {value.bit_length():,} bits"
        raise TemplateLimitError(f"it passes the number {shown} where a size is expected")


def _check_args(args: Iterable[Any], kwargs: dict[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        _check_int(value)
        if isinstance(value, dict):  # format_map's widths
            for item in value.values():
                _check_int(item)


_FORMAT_DIGITS = re.compile(r"\d{8,}")  # a width or precision of 10,000,000 or more in a format string


def _check_format(fmt: str, args: Any) -> None:
    if _FORMAT_DIGITS.search(fmt):
        raise TemplateLimitError("it formats with a width or precision of millions")
    if "*" in fmt:  # '%*s' takes its width from the arguments
        for value in args if isinstance(args, tuple) else (args,):
            _check_int(value)


def _check_replace(text: str, old: Any, new: Any) -> None:
    if isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
        times = len(text) + 1 if not old else len(text) // len(old)
        _budget().size(len(text) + times * (len(new) - len(old)))


def _check_result(value: Any) -> Any:
    if isinstance(value, str | bytes | list | tuple):
        _budget().size(len(value), "a value")
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _INT_BITS:
        raise TemplateLimitError("it computes a number of hundreds of thousands of digits")
    return value


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (a Jinja filter) with the step, argument and size checks around it."""

    @functools.wraps(func)  # keeps jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        values = [a for a in args if not isinstance(a, Context | Environment | EvalContext)]
        _check_args(values[1:], kwargs)
        value = values[0] if values else None
        if name == "join" and isinstance(value, list | tuple) and len(values) > 1 and isinstance(values[1], str):
            budget.size(len(value) * len(values[1]), "a joined string")  # the separators alone: no walk needed
            budget.size(_weight(value) + len(value) * len(values[1]), "a joined string")
        elif name in ("join", "sum", "tojson", "string", "pprint", "list", "unique", "sort", "indent", "center",
                      "wordwrap", "format"):
            budget.size(_weight(value), "a value")
        if name == "replace" and len(values) >= 3 and isinstance(value, str):
            _check_replace(value, values[1], values[2])
        if name == "indent" and isinstance(value, str):
            width = values[1] if len(values) > 1 else kwargs.get("width", 4)
            budget.size((value.count("\n") + 1) * (len(width) if isinstance(width, str) else int(width)) + len(value))
        if name == "format" and isinstance(value, str):
            _check_format(value, tuple(values[1:]))
        return _check_result(func(*args, **kwargs))

    return bounded


def _steps(iterable: Any) -> Iterator[Any]:
    """A for loop's items, each one a step of the budget (the filter every template loop is rewritten through)."""
    budget = _budget()
    for item in iterable:
        budget.tick()
        yield item


def _concat(parts: list[Any]) -> str:
    """``a ~ b ~ c``: sized before it is joined (a doubling ``set s = s ~ s`` stops at the cap)."""
    budget = _budget()
    budget.tick()
    budget.size(sum(_weight(p) for p in parts))
    return "".join(str(p) for p in parts)


class _Rewrite(NodeTransformer):
    """Every for loop's iterable through ``_steps`` and every ``~`` through ``_concat``."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "fastmtp_steps", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(nodes.List(node.nodes, lineno=node.lineno), "fastmtp_concat", [], [], None, None,
                            lineno=node.lineno)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the bounds of this module on loops, calls, operators and filters."""

    intercepted_binops = frozenset({"*", "+", "%", "**", "//"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True)
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters["fastmtp_steps"] = _steps
        self.filters["fastmtp_concat"] = _concat
        self.globals.pop("lipsum", None)  # lipsum(n=10**9) writes n paragraphs
        self.globals["raise_exception"] = _raise

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        template = super()._parse(source, name, filename)
        rewritten = _Rewrite().visit(template)
        assert isinstance(rewritten, nodes.Template)
        return rewritten

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.tick()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(times, int):
                    budget.size(_weight(seq) * max(times, 0), "a repeated value")
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > _INT_BITS:
                raise TemplateLimitError("it computes a number of hundreds of thousands of digits")
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            budget.size(_weight(left) + _weight(right))
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            if right > 0 and left.bit_length() * right > _INT_BITS:
                raise TemplateLimitError("it computes a number of hundreds of thousands of digits")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right)
        return _check_result(super().call_binop(context, operator, left, right))

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # jinja's own argument names
        budget = _budget()
        budget.tick()
        _check_args(args, kwargs)
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str):
            if name in ("format", "format_map"):
                _check_format(owner, ())
            elif name == "replace" and len(args) >= 2:
                _check_replace(owner, args[0], args[1])
            elif name == "join" and args and isinstance(args[0], list | tuple):
                budget.size(_weight(args[0]) + len(owner) * len(args[0]))
            elif name == "expandtabs":
                size = args[0] if args else kwargs.get("tabsize", 8)
                budget.size(len(owner) * (size if isinstance(size, int) and size > 0 else 1))
        return _check_result(super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """Jinja wraps ``str.format`` when it is looked up (so ``call`` sees a wrapper): its widths are checked here."""
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_format(value.__self__, ())
        return wrapped

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget().tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget().tick()
        return super().getitem(obj, argument)


def _raise(message: Any) -> None:
    raise _Refused(str(message)[:2000])


_ENV = BoundedEnvironment()
_COMPILED: OrderedDict[str, Any] = OrderedDict()  # template source -> compiled template (a few, LRU)
_BROKEN: OrderedDict[str, str] = OrderedDict()  # sha256 of a template that broke -> why (rendered as ChatML since)
_NOTICES: list[str] = []  # said once each: take_notices()
_LOCK = threading.Lock()


def _compiled(source: str) -> Any:
    with _LOCK:
        template = _COMPILED.get(source)
        if template is not None:
            _COMPILED.move_to_end(source)
            return template
    template = _ENV.from_string(source)
    with _LOCK:
        _COMPILED[source] = template
        while len(_COMPILED) > 8:
            _COMPILED.popitem(last=False)
    return template


def _render_bounded(source: str, context: dict[str, Any], size: int) -> str:
    """``source`` rendered under a fresh budget for inputs of ``size`` characters."""
    budget = _Budget(BASE_SIZE + 4 * size, BASE_STEPS + 1000 * len(context["messages"]), DEADLINE_S)
    previous = getattr(_LOCAL, "budget", None)
    _LOCAL.budget = budget
    try:
        if len(source) > MAX_TEMPLATE:
            raise TemplateLimitError(f"it is {len(source):,} characters long (at most {MAX_TEMPLATE:,})")
        out: list[str] = []
        total = 0
        for chunk in _compiled(source).generate(**context):
            total += len(chunk)
            budget.size(total, "a prompt")
            budget.tick()
            out.append(chunk)
        return "".join(out)
    finally:
        _LOCAL.budget = previous


def _why(exc: BaseException) -> str:
    if isinstance(exc, TemplateLimitError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "it nests or recurses deeper than Python allows"
    if isinstance(exc, MemoryError):
        return "it needs more memory than there is"
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _fell_back(source: str, why: str) -> None:
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    with _LOCK:
        if key in _BROKEN:
            return
        _BROKEN[key] = why
        while len(_BROKEN) > 64:
            _BROKEN.popitem(last=False)
        notice = (f"The model's chat template could not be used ({why}); its prompts are written in ChatML instead, "
                  "which Qwen models read. If replies look wrong, use a release file of the model.")
        _NOTICES.append(notice)
        del _NOTICES[:-16]
    log.warning("%s", notice)


def fallback_reason(template: str | None) -> str | None:
    """Why ``template`` is rendered as ChatML (it broke in this process), or None."""
    if not template:
        return None
    with _LOCK:
        return _BROKEN.get(hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest())


def take_notices() -> list[str]:
    """The templates that broke since the last call, each said once, in words."""
    with _LOCK:
        notices = list(_NOTICES)
        _NOTICES.clear()
    return notices


def render(template: str | None, messages: list[Message], *, thinking: bool = True,
           add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages``; ``thinking`` maps to Qwen's ``enable_thinking`` switch.

    A template that cannot be rendered within the bounds falls back to ChatML (said once, see
    :func:`take_notices`); ChatML itself is rendered under the same bounds.

    Raises:
        EngineError: the template refuses these messages (``raise_exception``).
    """
    context: dict[str, Any] = {
        "messages": [m.to_dict() for m in messages],
        "add_generation_prompt": add_generation_prompt,
        "enable_thinking": thinking,
        "bos_token": "",
        "eos_token": "<|im_end|>",
    }
    size = sum(len(m.content) + len(m.role) for m in messages)
    source = template or CHATML
    if source is not CHATML and fallback_reason(source) is None:
        try:
            return _render_bounded(source, context, size)
        except _Refused as exc:
            raise EngineError(f"The model's chat template refused these messages: {exc}",
                              "Check the conversation's roles (a system message first, then user and assistant "
                              "in turn), or use a release file of the model.") from None
        except Exception as exc:  # any break (RecursionError, MemoryError too): ChatML, said once
            _fell_back(source, _why(exc))
    try:
        return _render_bounded(CHATML, context, size)
    except Exception as exc:  # messages past every bound
        raise EngineError(f"The chat could not be written as a prompt: {_why(exc)}.",
                          "Start a new chat, or shorten the longest messages.") from None
