"""A chat session over the decoder: messages in, rendered with the model's template, one reply out."""

from __future__ import annotations

import threading
from dataclasses import replace

from app.engine.chat_template import Message, render
from app.engine.config import ChatOptions, EngineConfig
from app.engine.context_window import OVERFLOW_POLICIES, OverflowPolicy, Window, fit_conversation
from app.engine.model_pool import ModelPool
from app.engine.sampling import Sampler
from app.engine.speculative import FileProgress, PromptProgress, Reply, SpeculativeDecoder, Steer, TokenSink
from app.engine.stats import describe_depth, describe_sampling


class ChatSession:
    """Keeps the decoder (and so the evaluated conversation) between turns: a new turn evaluates
    only its new tokens."""

    def __init__(self, config: EngineConfig, models: ModelPool | None = None,
                 on_progress: FileProgress | None = None) -> None:
        """Load ``config``'s models; ``on_progress(file name, fraction)`` follows each one read from disk."""
        self.decoder = SpeculativeDecoder(config, models, on_progress)
        self.template: str | None = self.decoder.target.chat_template()
        # where the latest replies' conversations began after a trim, newest last: (first kept turn, its first
        # message), so a chat's next turns keep it while it fits and their prompts extend the evaluated one (or its
        # kept state), also after the engine served other chats in between
        self._window_starts: list[tuple[int, Message]] = []
        self.window: Window | None = None  # what the reply under way (or the latest) keeps of its conversation

    def close(self) -> None:
        self.decoder.close()

    def prompt_tokens(self, messages: list[Message], thinking: bool = True) -> list[int]:
        text = render(self.template, messages, thinking=thinking)
        return self.decoder.target.tokenize(text, add_special=False, parse_special=True)

    def fit(self, messages: list[Message], options: ChatOptions) -> Window:
        """The part of ``messages`` that goes into the context under the chat's overflow policy (whole oldest
        turns left out), checked before any work: ``ContextFullError`` when it cannot fit."""
        policy: OverflowPolicy = "stop" if options.overflow == "stop" else "trim"
        assert policy in OVERFLOW_POLICIES
        system = 1 if messages and messages[0].role == "system" else 0
        start = max((first for first, message in self._window_starts
                     if system + first < len(messages) and messages[system + first] == message), default=0)
        window = fit_conversation(messages, lambda kept: len(self.prompt_tokens(kept, options.thinking)),
                                  self.decoder.config.n_ctx, policy=policy, max_tokens=options.max_tokens,
                                  extra_tokens=len(options.continue_tokens), start=start)
        if window.start:
            mark = (window.start, messages[system + window.start])
            self._window_starts = [*(m for m in self._window_starts if m != mark), mark][-WINDOW_STARTS_KEPT:]
        return window

    def _plan(self, messages: list[Message], options: ChatOptions) -> tuple[ChatOptions, Window, list[int]]:
        """What ``reply`` reads before the reply: the options with a continued reply's tokens (from its text when
        only that was given), the part of the conversation that fits, and its rendered tokens."""
        if options.continue_text and not options.continue_tokens:
            options = replace(options, continue_tokens=tuple(self.decoder.target.tokenize(
                options.continue_text, add_special=False, parse_special=True)))
        window = self.fit(messages, options)
        return options, window, self.prompt_tokens(window.messages, options.thinking)

    def reply(self, messages: list[Message], options: ChatOptions, on_token: TokenSink | None = None,
              cancel: threading.Event | None = None,
              on_prompt_progress: PromptProgress | None = None) -> tuple[Reply, str]:
        """The assistant's reply to ``messages`` and its text (stop strings cut off).

        Under the chat's overflow policy the oldest turns may be left out (``stats.trimmed_turns``); with
        ``options.continue_tokens`` the reply extends that earlier reply (its text is the new part only)."""
        model = self.decoder.target
        stops = options.stop
        options, window, prompt = self._plan(messages, options)
        self.window = window
        continued = list(options.continue_tokens)

        def stop_hit(tokens: list[int]) -> bool:
            if not stops:
                return False
            tail = model.detokenize(tokens[-16:])
            return any(s in tail for s in stops)

        steer = self._thinking_budget(prompt, continued, options)
        # a continued reply gets the cap again: Continue asks for more of it
        reply = self.decoder.generate(prompt + continued, options.max_tokens, Sampler(options.sampling), on_token,
                                      stop_hit if stops else None, cancel, steer=steer,
                                      on_prompt_progress=on_prompt_progress, resume=bool(continued))
        reply.stats.trimmed_turns = window.dropped_turns
        # what its speed was measured at, stated with it (the HUD, the footer, quickstart)
        reply.stats.sampling = describe_sampling(options.sampling)
        reply.stats.depth_setting = describe_depth(self.decoder.config)
        shown = [t for t in reply.tokens if not model.is_eog(t)]
        text = model.detokenize(shown)
        for s in stops:
            if s in text:
                text = text[: text.index(s)]
        return reply, text

    def _thinking_budget(self, prompt: list[int], continued: list[int], options: ChatOptions) -> Steer | None:
        """A steer that closes the thinking once it has run ``options.thinking_budget`` tokens, so the model
        answers; None when there is no budget or no thinking."""
        budget = options.thinking_budget
        if budget <= 0 or not options.thinking:
            return None
        model = self.decoder.target
        opened_by_template = THINK_OPEN in model.detokenize(prompt[-8:])
        closing = model.tokenize(THINK_CLOSE, add_special=False, parse_special=True)
        spent = [False]

        def steer(tokens: list[int]) -> list[int] | None:
            if spent[0] or len(continued) + len(tokens) < budget:
                return None
            text = model.detokenize(continued + tokens)
            if THINK_CLOSE.strip() in text or not (opened_by_template or THINK_OPEN in text):
                spent[0] = True  # the thinking ended on its own, or there is none: nothing to close
                return None
            spent[0] = True
            return closing

        return steer

    def planned_prompt(self, messages: list[Message], options: ChatOptions) -> list[int]:
        """The tokens ``reply(messages, options)`` will put before the reply (the part of the conversation that
        fits, and a continued reply's tokens), worked out without changing this session: the engine worker looks up
        a chat's kept state with them before the reply. ``ContextFullError`` when the conversation cannot fit."""
        window_starts = list(self._window_starts)
        try:
            options, _window, prompt = self._plan(messages, options)
        finally:
            self._window_starts = window_starts
        return prompt + list(options.continue_tokens)


WINDOW_STARTS_KEPT = 16  # trimmed chats whose first kept turn is remembered
THINK_OPEN = "<think>"
THINK_CLOSE = "\n</think>\n\n"  # what Qwen's thinking ends with before the answer
