"""A chat session over the decoder: messages in, rendered with the model's template, one reply out."""

from __future__ import annotations

import threading

from app.engine.chat_template import Message, render
from app.engine.config import ChatOptions, EngineConfig
from app.engine.model_pool import ModelPool
from app.engine.sampling import Sampler
from app.engine.speculative import FileProgress, Reply, SpeculativeDecoder, TokenSink
from app.engine.stats import describe_depth, describe_sampling


class ChatSession:
    """Keeps the decoder (and so the evaluated conversation) between turns: a new turn evaluates
    only its new tokens."""

    def __init__(self, config: EngineConfig, models: ModelPool | None = None,
                 on_progress: FileProgress | None = None) -> None:
        """Load ``config``'s models; ``on_progress(file name, fraction)`` follows each one read from disk."""
        self.decoder = SpeculativeDecoder(config, models, on_progress)
        self.template: str | None = self.decoder.target.chat_template()

    def close(self) -> None:
        self.decoder.close()

    def prompt_tokens(self, messages: list[Message], thinking: bool = True) -> list[int]:
        text = render(self.template, messages, thinking=thinking)
        return self.decoder.target.tokenize(text, add_special=False, parse_special=True)

    def reply(self, messages: list[Message], options: ChatOptions, on_token: TokenSink | None = None,
              cancel: threading.Event | None = None) -> tuple[Reply, str]:
        """The assistant's reply to ``messages`` and its text (stop strings cut off)."""
        model = self.decoder.target
        stops = options.stop

        def stop_hit(tokens: list[int]) -> bool:
            if not stops:
                return False
            tail = model.detokenize(tokens[-16:])
            return any(s in tail for s in stops)

        reply = self.decoder.generate(self.prompt_tokens(messages, options.thinking), options.max_tokens,
                                      Sampler(options.sampling), on_token, stop_hit if stops else None, cancel)
        # what its speed was measured at, stated with it (the HUD, the footer, quickstart)
        reply.stats.sampling = describe_sampling(options.sampling)
        reply.stats.depth_setting = describe_depth(self.decoder.config)
        shown = [t for t in reply.tokens if not model.is_eog(t)]
        text = model.detokenize(shown)
        for s in stops:
            if s in text:
                text = text[: text.index(s)]
        return reply, text
