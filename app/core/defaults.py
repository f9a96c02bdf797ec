"""Every default value that more than one place starts from, written once.

The settings file, the engine's records, the CLI's flags, "Serve this machine", llama-server and the window
all used to write these numbers themselves, and drifted (the window's chats once capped replies at 256 tokens
while the declared chat default was 1024). Each is written here only; ``tests/unit/project/
test_single_sources.py`` fails when one of these literals is written again elsewhere in ``app/``.

Imports nothing: every layer (the engine's Qt-free, native-free records included) may read it.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------------------ the context
CONTEXT_SIZE = 4096  # tokens of context where nothing sizes it (the engine's records, llama-server, the bench)
CONTEXT_AUTO = 0  # the settings' and `--ctx`'s default: the largest context that fits (``models/context_size.py``)
CONTEXT_MIN = 512  # the smallest context a user may choose (the settings, the Settings page)
CONTEXT_MAX = 262_144  # the largest: Qwen3.8's trained context
FIT_CONTEXT = 32_768  # the context the catalog's fit advice sizes for when none is chosen (`fit`, the Models page)

# ------------------------------------------------------------------------------------------------ the network
SERVER_PORT = 8080  # llama-server's port when this machine is served ("Serve this machine", `remote serve`)
RPC_PORT = 50052  # llama.cpp's rpc-server default: a worker's port when none is given

# ------------------------------------------------------------------------------------------------ replies
# a conversation's reply cap: the window's chats, the chat settings and the terminal `chat`. 0: none, a reply runs
# until the model stops or the context is full (a reasoning model thinks for thousands of tokens; a cut reply
# can be continued)
CHAT_MAX_TOKENS = 0
ENGINE_MAX_TOKENS = 512  # the engine's own cap for a caller that names none (``ChatOptions()``)
OVERFLOW_POLICY = "trim"  # a full context: keep the system prompt and the latest turns (``engine.context_window``)

# ------------------------------------------------------------------------------------------------ drafting
# The draft depth (tokens the draft head proposes per round; with adaptive depth, the deepest it may go):
# the one range the settings file, the Settings page, the CLI and the decoder all check against.
DRAFT_DEPTH_MIN = 1
DRAFT_DEPTH_MAX = 8
DRAFT_DEPTH = 3  # the release's recommended depth (llama.cpp's --spec-draft-n-max 3)

# The d2t sidecar's draft vocabulary: the release's size, and the sizes a user may make one with.
DRAFT_VOCAB = 32768
DRAFT_VOCAB_SIZES = (16384, DRAFT_VOCAB, 65536)

# ------------------------------------------------------------------------------------------------ sampling
# The engine's own sampling is greedy (temperature 0) so scripted runs and benchmarks repeat exactly; a
# conversation samples at CHAT_TEMPERATURE. The other knobs are the same for both.
GREEDY_TEMPERATURE = 0.0
CHAT_TEMPERATURE = 0.7
TOP_K = 40
TOP_P = 0.95
MIN_P = 0.05
REPEAT_PENALTY = 1.0  # 1.0: no penalty
REPEAT_LAST_N = 64
SEED = 0

# ------------------------------------------------------------------------------------------------ chats left
# the chats left keep their evaluated state on disk (``engine.state_cache``) in at most this many MiB: the settings'
# default (0 there: in memory only, for the last few chats) and the engine's
STATE_CACHE_MB = 2048
