"""The GitHub workflows (.github/workflows/) call only what exists here: make targets of the Makefile, files of
the repository, and ``python -m app`` subcommands and options that parse (issue 30). The release workflow
builds with installers/build.py and smoke-tests with installers/smoke.py, as ``make package-test`` does."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))

# Programs of the runner images (not of this repository) that a step may call.
EXTERNAL = {"sudo", "apt-get", "mkdir", "cp", "rm", "printf", "echo", "gh", "choco", "sha256sum", "cd",
            "bash", "if", "fi", "for", "done", "[", "test", "xargs",
            "command"}
SHELL_KEYWORDS = ("then", "else", "do")
PYTHONS = {"python", ".venv/bin/python", ".venv/Scripts/python", "$PY", "$py"}
REPO_PREFIXES = ("installers/", "tests/", "app/", "resources/", ".github/", "docs/")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def run_scripts(workflow: dict[str, Any]) -> list[tuple[str, str]]:
    """(job id, run script) of every step."""
    return [(job_id, step["run"]) for job_id, job in workflow["jobs"].items()
            for step in job.get("steps", []) if "run" in step]


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script, as words, with leading shell keywords and parentheses removed."""
    out: list[list[str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()   # a comment (not the # of ${TAG#v})
        if not line:
            continue
        for segment in re.split(r"&&|\|\||;|(?<![|>])\|(?!\|)", line):
            segment = segment.strip().strip("()").strip()
            if not segment:
                continue
            words = shlex.split(segment)
            while words and words[0] in SHELL_KEYWORDS:
                words = words[1:]
            if words:
                out.append(words)
    return out


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.MULTILINE)}


@cache
def app_help(path: tuple[str, ...]) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "app", *path, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout


def repo_path_problems(words: list[str]) -> list[str]:
    problems = []
    for word in words:
        word = word.strip(")")
        if word.startswith(REPO_PREFIXES) and not any(c in word for c in "*$") and not (ROOT / word).exists():
            problems.append(f"no file {word}")
    return problems


def problems_of(words: list[str]) -> list[str]:
    """What in one command does not exist in the repository (empty when all of it does)."""
    head = words[0]
    problems = repo_path_problems(words)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=.*", head):
        return problems                                   # a variable assignment
    if head == "make":
        targets = make_targets()
        problems += [f"no make target {w}" for w in words[1:] if not w.startswith("-") and "=" not in w
                     and w not in targets]
        return problems
    if head in PYTHONS:
        rest = words[1:]
        if rest[:2] == ["-m", "app"]:
            path: list[str] = []
            for word in rest[2:]:
                if word.startswith("-"):
                    break
                path.append(word)
            code, text = app_help(tuple(path))
            if code != 0:
                return [*problems, f"`python -m app {' '.join(path)}` is not a command"]
            problems += [f"`python -m app {' '.join(path)}` has no option {w}" for w in rest[2:]
                         if w.startswith("--") and w.split("=")[0] not in text]
            return problems
        if rest[:2] in (["-m", "pip"], ["-m", "venv"]):
            return problems
        if rest and rest[0].endswith(".py"):
            return problems if (ROOT / rest[0]).is_file() else [*problems, f"no script {rest[0]}"]
        return [*problems, f"unexpected python call: {' '.join(words)}"]
    if head == "bash" and len(words) > 1 and not (ROOT / words[1]).is_file():
        return [*problems, f"no script {words[1]}"]
    if head in EXTERNAL or head.endswith("ISCC.exe"):
        return problems
    return [*problems, f"unknown program {head}"]


def test_there_are_ci_and_release_workflows() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "release.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_step_calls_what_exists(path: Path) -> None:
    problems = [f"{job}: {problem}" for job, script in run_scripts(load(path))
                for words in commands(script) for problem in problems_of(words)]
    assert problems == []


def test_the_checker_catches_what_does_not_exist() -> None:
    script = """make venv nope-target PYTHON=python
    .venv/bin/python installers/missing.py
    .venv/bin/python -m app backend frobnicate --json
    .venv/bin/python -m app backend build --no-such-flag
    bash installers/macos/missing.sh
    cp installers/absent.txt out/
    curl https://example.invalid
    """
    found = [p for words in commands(script) for p in problems_of(words)]
    assert found == [
        "no make target nope-target",
        "no file installers/missing.py", "no script installers/missing.py",
        "`python -m app backend frobnicate` is not a command",
        "`python -m app backend build` has no option --no-such-flag",
        "no file installers/macos/missing.sh", "no script installers/macos/missing.sh",
        "no file installers/absent.txt",
        "unknown program curl",
    ]


def test_shell_splitting() -> None:
    assert commands('if [ "$X" = 1 ]; then make portable BIN=a; else make portable; fi') == [
        ["if", "[", "$X", "=", "1", "]"], ["make", "portable", "BIN=a"], ["make", "portable"], ["fi"]]
    assert commands("(cd release && sha256sum -c SHA256SUMS)  # check") == [
        ["cd", "release"], ["sha256sum", "-c", "SHA256SUMS"]]


def test_ci_runs_make_test_on_linux_loaded_too_and_the_portable_tier_on_windows_and_macos() -> None:
    ci = load(ROOT / ".github" / "workflows" / "ci.yml")
    jobs = ci["jobs"]
    assert jobs["test"]["runs-on"] == "ubuntu-latest"
    assert any(w[:2] == ["make", "test"] for _, s in run_scripts({"jobs": {"test": jobs["test"]}})
               for w in commands(s))
    assert any(w[:2] == ["make", "test-loaded"] for _, s in run_scripts({"jobs": {"x": jobs["test-loaded"]}})
               for w in commands(s))
    assert set(jobs["portable"]["strategy"]["matrix"]["os"]) == {"windows-latest", "macos-latest"}
    assert any(w[:2] == ["make", "portable"] for _, s in run_scripts({"jobs": {"x": jobs["portable"]}})
               for w in commands(s))
    tier = (ROOT / "tests" / "portable-tier.txt").read_text().split()
    assert tier and all((ROOT / t).is_file() for t in tier)
    assert "tests/unit/installers/test_workflows.py" in tier


def job_calls(job: dict[str, Any]) -> list[list[str]]:
    return [w for _, s in run_scripts({"jobs": {"job": job}}) for w in commands(s)]


def step_scripts(job: dict[str, Any]) -> list[list[str]]:
    """``[script, subcommand]`` of each python call of a repository script (``installers/x.py STEP``)."""
    return [w[1:3] for w in job_calls(job) if w[0] in PYTHONS and len(w) > 1 and w[1].endswith(".py")]


def test_release_builds_and_smoke_tests_with_the_projects_scripts() -> None:
    release = load(ROOT / ".github" / "workflows" / "release.yml")
    jobs = release["jobs"]
    # 22.04: glibc 2.35 for Debian 12; windows-2022: nvcc 13 rejects VS 2026 of windows-latest (issue 35)
    for job_id, runner in (("linux", "ubuntu-22.04"), ("windows", "windows-2022"), ("macos", "macos-14")):
        assert jobs[job_id]["runs-on"] == runner
        scripts = [w[0] for w in step_scripts(jobs[job_id])]
        assert scripts.index("installers/build.py") < scripts.index("installers/smoke.py"), job_id
        assert ["installers/release_steps.py", "gather"] in step_scripts(jobs[job_id])
        assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in jobs[job_id]["steps"])
    assert jobs["macos"]["env"]["MACOSX_DEPLOYMENT_TARGET"] == "12.0"
    assert any(s.get("uses", "").startswith("anchore/sbom-action") for s in jobs["linux"]["steps"])
    for job_id, runner, os_name in (("cuda-linux", "ubuntu-22.04", "linux"), ("cuda-windows", "windows-2022",
                                                                               "windows")):
        cuda = jobs[job_id]
        assert cuda["runs-on"] == runner
        assert {m["cuda"] for m in cuda["strategy"]["matrix"]["include"]} == {"13.0", "12.8"}
        app_calls = [w[3:5] for w in job_calls(cuda) if w[1:3] == ["-m", "app"]]
        assert app_calls == [["backend", "build"], ["backend", "pack"]]  # no signing where there is no key
        build = next(w for w in job_calls(cuda) if w[3:5] == ["backend", "build"])
        assert "--cuda" in build and "--cuda-arch" in build and "--portable" in build
        gather = next(w for w in job_calls(cuda) if w[1:3] == ["installers/release_steps.py", "gather"])
        assert gather[gather.index("--os") + 1] == os_name
    assert ["installers/release_steps.py", "windows-runtime"] in step_scripts(jobs["cuda-windows"])
    assert ["installers/cuda_redist.py", "--cuda"] in step_scripts(jobs["cuda-windows"])
    # CUDA 12 on Linux: PyPI's nvcc wheel holds no nvcc, so that build takes NVIDIA's redistributable archives too
    linux = {m["cuda"]: m["toolkit"] for m in jobs["cuda-linux"]["strategy"]["matrix"]["include"]}
    assert linux["13.0"] == "wheels" and linux["12.8"].startswith("12.8.")
    assert ["installers/cuda_redist.py", "--cuda"] in step_scripts(jobs["cuda-linux"])


def test_one_protected_job_signs_in_the_dry_runs_order() -> None:
    """Only the `sign` job, under the protected environment, sees the release key; its steps are the ones
    `make release-dry-run` runs, in the same order."""
    from installers.release_dry_run import SIGN_STEPS

    release = load(ROOT / ".github" / "workflows" / "release.yml")
    jobs = release["jobs"]
    sign = jobs["sign"]
    assert sign["environment"] == "release-signing"
    assert set(sign["needs"]) == set(jobs) - {"sign", "publish"}
    for job_id, job in jobs.items():
        if job_id != "sign":
            assert "FASTMTP_RELEASE_KEY" not in yaml.safe_dump(job), job_id
    steps = [w[1] for w in step_scripts(sign) if w[0] == "installers/release_steps.py"]
    assert tuple(steps) == SIGN_STEPS
    assert any(s.get("uses", "").startswith("actions/download-artifact") for s in sign["steps"])


def test_manual_runs_are_dry_and_rc_tags_are_drafts() -> None:
    release = load(ROOT / ".github" / "workflows" / "release.yml")
    triggers = release[True]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in triggers and triggers["push"]["tags"] == ["v*"]
    publish = release["jobs"]["publish"]
    assert "github.event_name == 'push'" in publish["if"] and publish["needs"] == ["sign"]
    assert any(s.get("uses", "").startswith("actions/attest-build-provenance") for s in publish["steps"])
    script = next(s["run"] for s in publish["steps"] if "gh release create" in s.get("run", ""))
    assert "*-rc*" in script and "--draft" in script


def test_platform_signing_is_wired_to_secrets_with_a_notice_when_absent() -> None:
    release = load(ROOT / ".github" / "workflows" / "release.yml")
    jobs = release["jobs"]
    windows = [w[1] for w in step_scripts(jobs["windows"]) if w[0] == "installers/codesign.py"]
    macos = [w[1] for w in step_scripts(jobs["macos"]) if w[0] == "installers/codesign.py"]
    assert windows == ["windows", "windows"] and macos == ["macos-app", "macos-dmg"]
    for job in (jobs["windows"], jobs["macos"]):
        for step in job["steps"]:
            if "installers/codesign.py" in step.get("run", ""):
                assert all(str(v).startswith("${{ secrets.") for v in step["env"].values())


@pytest.mark.parametrize(("platform", "wanted"), [
    ("linux", ["fastmtp-chat/fastmtp-chat", "-linux-*.tar.gz", "_amd64.deb"]),
    ("darwin", ["fastmtp-chat/fastmtp-chat"]),
    ("win32", ["fastmtp-chat/fastmtp-chat.exe"]),
])
def test_smoke_asks_for_each_systems_packages(platform: str, wanted: list[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The release workflow runs installers/smoke.py on Windows and macOS too: there it needs the one-folder
    app, not the Linux tarball and .deb."""
    from installers import smoke

    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(smoke.debian, "debian_arch", lambda: "amd64")
    assert smoke.main(["--dist", str(tmp_path), "--report", str(tmp_path / "r.json")]) == 1
    missing = capsys.readouterr().err.split("missing under", 1)[1].split(": ", 1)[1].strip().split(", ")
    assert len(missing) == len(wanted)
    assert all(m.replace("\\", "/").endswith(w) or w in m for m, w in zip(missing, wanted, strict=True))


def test_smoke_machine_on_windows_keeps_what_windows_programs_need(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from installers import smoke

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("SYSTEMROOT", r"C:\Windows")
    monkeypatch.setenv("SECRET_OF_THE_BUILDER", "x")
    env = smoke.Machine(tmp_path, "user", smoke.system_path()).env()
    assert env["SYSTEMROOT"] == r"C:\Windows" and env["PATH"].endswith("System32")
    assert env["USERPROFILE"] == str(tmp_path / "user") and "SECRET_OF_THE_BUILDER" not in env
    monkeypatch.setattr(sys, "platform", "linux")
    env = smoke.Machine(tmp_path, "user2", smoke.system_path()).env()
    assert "SYSTEMROOT" not in env and env["PATH"] == "/usr/bin:/bin"
