"""Issue 37 item 5: a chat template from outside (a GGUF, a server's /props) cannot make the app loop or grow
without bound: it renders in a bounded sandbox, and a template that breaks is replaced by ChatML, said once.

The memory bound is measured for real: the hostile templates run in a child under a 1 GiB address-space limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.core.errors import EngineError
from app.engine.chat_template import CHATML, Message, fallback_reason, render, take_notices

ROOT = Path(__file__).resolve().parents[3]
MESSAGES = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello!"),
            Message("user", "2+2?")]
CHATML_PROMPT = render(CHATML, MESSAGES)

# Qwen3's template, as its GGUFs carry it (the parts a chat without tools uses): slicing, namespaces, loop
# variables, string methods and tests; it must render exactly as an unbounded Jinja would.
QWEN3 = """{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\\n' + content }}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

HOSTILE = {
    "nested range loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "a 4e9 repeat": "{{ 'x' * 4000000000 }}",
    "a float repeat": "{{ 'x' * 4e9 }}",
    "doubling with ~": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                       "{% endfor %}{{ ns.s }}",
    "doubling with +": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
                       "{% endfor %}{{ ns.s }}",
    "a list of a big string": "{{ (['x' * 1000000] * 1000000) | join }}",
    "a long separator": "{{ (['x'] * 1000000) | join('y' * 1000) }}",
    "a deep list repeated": "{% set ns = namespace(l='x' * 4000000) %}{% for i in range(12) %}{% set ns.l = [ns.l] %}"
                            "{% endfor %}{{ [ns.l] * 1000000 }}",
    "center filter": "{{ 'x' | center(1000000000) }}",
    "center method": "{{ 'x'.center(1000000000) }}",
    "replace ''": "{{ ('x' * 1000000) | replace('', 'y' * 100) }}",
    "format width": "{{ '{:>999999999}'.format(1) }}",
    "format width argument": "{{ '{:>{}}'.format(1, 999999999) }}",
    "format_map width": "{{ '{a:>{w}}'.format_map({'a': 1, 'w': 999999999}) }}",
    "percent width": "{{ '%999999999s' % 1 }}",
    "percent star": "{{ '%*s' % (999999999, 1) }}",
    "power": "{{ 2 ** 1000000000 }}",
    "lipsum": "{{ lipsum(1000000) }}",
    "indent": "{{ ('\\n' * 1000000) | indent(1000) }}",
    "expandtabs": "{{ ('\\t' * 1000000).expandtabs(1000) }}",
    "endless recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "a loop over a huge string": "{% for c in 'x' * 8000000 %}{% for d in 'y' * 8000000 %}{% endfor %}{% endfor %}",
    "output without end": "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
                          "{% endfor %}",
    "a syntax error": "{% for %}",
    "the sandbox's walls": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "deep nesting": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
}

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a failure is reported as found: no minutes of shrinking
SLOW = {"nested range loops", "a loop over a huge string", "output without end", "endless recursion"}


@pytest.fixture(autouse=True)
def _clean_notices() -> None:
    take_notices()


def test_a_real_qwen_template_renders_as_before() -> None:
    prompt = render(QWEN3, [*MESSAGES[:2], Message("assistant", "<think>hm</think>\n\nHello!"), MESSAGES[3]],
                    thinking=False)
    assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert take_notices() == [] and fallback_reason(QWEN3) is None


def test_a_long_chat_renders_within_the_bounds() -> None:
    chat = [Message("system", "s")] + [Message("user" if i % 2 == 0 else "assistant", "word " * 2000)
                                       for i in range(2000)]
    prompt = render(QWEN3, chat)
    assert prompt.count("<|im_start|>") == 2002 and take_notices() == []


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_template_falls_back_to_chatml_in_words_quickly(name: str) -> None:
    template = HOSTILE[name] + f"{{# {name} #}}"  # each its own template: the fallback is said once per template
    started = time.process_time()  # this process's CPU: what the template costs, however busy the machine is
    assert render(template, MESSAGES) == CHATML_PROMPT
    # the size bounds refuse before anything is built (at once); loops run into the step budget (about a second)
    assert time.process_time() - started < (6 if name in SLOW else 1.5)
    notices = take_notices()
    assert len(notices) == 1 and notices[0].startswith("The model's chat template could not be used (")
    assert "Traceback" not in notices[0] and "ChatML" in notices[0]
    assert render(template, MESSAGES) == CHATML_PROMPT and take_notices() == []  # said once; not tried again
    assert fallback_reason(template)


def test_a_template_that_refuses_the_messages_is_still_an_error_in_words() -> None:
    with pytest.raises(EngineError) as err:
        render("{{ raise_exception('No user query found in messages.') }}", MESSAGES)
    assert "refused these messages: No user query found" in err.value.message and err.value.advice


def test_the_hostile_templates_stay_under_a_memory_limit() -> None:
    """In a child under RLIMIT_AS of 1 GiB: each one ends as ChatML, none as a MemoryError of the whole process."""
    code = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from app.engine.chat_template import CHATML, Message, render, take_notices\n"
        "messages = [Message('user', 'Hi')]\n"
        "expected = render(CHATML, messages)\n"
        "templates = json.loads(sys.stdin.read())\n"
        "print(json.dumps([render(t, messages) == expected for t in templates]), len(take_notices()))\n"  # 16 kept
    )
    templates = [t for name, t in HOSTILE.items() if name not in ("nested range loops", "output without end",
                                                                   "a loop over a huge string")]  # time, not memory
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(templates), capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    results, notices = done.stdout.split()[:-1], done.stdout.split()[-1]
    assert json.loads(" ".join(results)) == [True] * len(templates) and int(notices) == min(16, len(templates))


PIECES = st.sampled_from([
    "{{ x }}", "{{ x * N }}", "{{ x ~ x }}", "{{ [x] * N }}", "{{ x | center(N) }}", "{{ x | indent(N) }}",
    "{{ x.ljust(N) }}", "{{ x | replace('', x) }}", "{{ '%s' % x }}", "{{ x | join(x) }}", "{{ N ** N }}",
    "{% for i in range(N) %}", "{% endfor %}", "{% set x = x ~ x %}", "{% set x = x * 2 %}",
    "{{ messages[N] }}", "{{ messages | map(attribute='content') | join(x) }}", "{{ x[N:] }}",
    "{{ x.split(x) }}", "{{ (x | list) * N }}", "{{ x | wordwrap(N) }}", "{{ x | truncate(N) }}",
    "{{ x | batch(N) | list }}", "{% if x %}", "{% endif %}", "{{ x | tojson }}",
])
NUMBERS = st.sampled_from(["0", "1", "-1", "7", "100000", "99999999", "4000000000", "2**64", "10**400", "1e999",
                           "(0/1)", "-(10**30)"])


@settings(max_examples=60, derandomize=True, deadline=None, phases=NO_SHRINK,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(PIECES, NUMBERS), min_size=1, max_size=8), st.text(max_size=20))
def test_any_mix_of_loops_and_sizes_renders_or_falls_back_in_bounded_time(pieces: list[tuple[str, str]],
                                                                          seed_text: str) -> None:
    template = "{% set x = " + json.dumps(seed_text) + " %}" + "".join(p.replace("N", n) for p, n in pieces)
    started = time.monotonic()
    prompt = render(template, MESSAGES)
    assert isinstance(prompt, str) and len(prompt) < 64 << 20
    assert time.monotonic() - started < 6
    for notice in take_notices():
        assert notice.startswith("The model's chat template could not be used (") and "\n" not in notice


def test_a_remote_servers_hostile_template_gives_a_reply_with_chatml_not_an_error() -> None:
    """A llama-server whose /props carries a template that never ends: the prompt is ChatML, the reply comes."""
    from app.engine.config import ChatOptions
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import RemoteServer
    from tests.helpers.chat_server import ChatServer

    hostile = HOSTILE["nested range loops"] + "{# remote #}"
    props = {"default_generation_settings": {"params": {}}, "chat_template": hostile, "build_info": "fake"}
    with ChatServer("llama-server", props_body=json.dumps(props).encode()) as server:
        with RemoteClient(RemoteServer("box", server.url), use_keyring=False) as client:
            assert client.load()["kind"] == "loaded"
            events = list(client.generate(MESSAGES, ChatOptions(max_tokens=16)))
        sent = [s.body for s in server.seen("/completion")]
    assert events[-1]["kind"] == "done", events[-1]
    assert sent and sent[0] is not None and sent[0]["prompt"] == CHATML_PROMPT
    assert any("could not be used" in n for n in take_notices())


def test_a_remote_template_that_refuses_the_messages_reads_in_words() -> None:
    from app.engine.config import ChatOptions
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import RemoteServer
    from tests.helpers.chat_server import ChatServer

    props = {"default_generation_settings": {"params": {}}, "build_info": "fake",
             "chat_template": "{{ raise_exception('Conversation roles must alternate.') }}"}
    with ChatServer("llama-server", props_body=json.dumps(props).encode()) as server, \
            RemoteClient(RemoteServer("box", server.url), use_keyring=False) as client:
        assert client.load()["kind"] == "loaded"
        last = list(client.generate(MESSAGES, ChatOptions(max_tokens=16)))[-1]
    assert last["kind"] == "error" and "refused these messages: Conversation roles must alternate" in last["message"]
    assert last["advice"] and last["error"] == "EngineError"


def test_generate_remote_says_once_that_the_servers_template_was_set_aside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main
    from tests.helpers.chat_server import ChatServer

    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    props = {"default_generation_settings": {"params": {}}, "build_info": "fake",
             "chat_template": "{{ 'x' * 4000000000 }}{# cli #}"}
    with ChatServer("llama-server", props_body=json.dumps(props).encode()) as server:
        assert main(["remote", "add", "box", server.url]) == 0
        assert main(["generate", "--remote", "box", "--prompt", "hi", "--max-tokens", "8"]) == 0
    err = capsys.readouterr().err
    assert err.count("note: The model's chat template could not be used (it builds a repeated value") == 1, err
