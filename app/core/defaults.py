"""Every default value that more than one place starts from, written once.

The settings file, the engine's records, the CLI's flags, "Serve this machine", llama-server and the window
all used to write these numbers themselves, and drifted (the window's chats once capped replies at 256 tokens
while the declared chat default was 1024). Each is written here only; ``tests/unit/project/
test_single_sources.py`` fails when one of these literals is written again elsewhere in ``app/``.

Imports nothing: every layer (the engine's Qt-free, native-free records included) may read it.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------------------ the context
CONTEXT_SIZE = 4096  # tokens of context a model is loaded with (the settings, the engine, llama-server, the CLI)

# ------------------------------------------------------------------------------------------------ the network
SERVER_PORT = 8080  # llama-server's port when this machine is served ("Serve this machine", `remote serve`)
RPC_PORT = 50052  # llama.cpp's rpc-server default: a worker's port when none is given

# ------------------------------------------------------------------------------------------------ replies
CHAT_MAX_TOKENS = 1024  # a conversation's reply cap: the window's chats, the chat settings and the terminal `chat`
ENGINE_MAX_TOKENS = 512  # the engine's own cap for a caller that names none (``ChatOptions()``)

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
