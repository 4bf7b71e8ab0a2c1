"""A supervisor hands its checked verify settings to each child as one JSON document: the
child parses exactly what the supervisor checked, with no second reading of options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from runner.cli.common import _forwarded
from runner.cli.options import CHILD_VERIFY_OPTIONS, verify_options
from runner.model.settings import HackGate, SharedSettings, StorageLimit
from runner.supervise.job import VerifyJob


def _parsing(**decorator: Any) -> tuple[click.Command, list[SharedSettings]]:
    seen: list[SharedSettings] = []

    @click.command()
    @verify_options(**decorator)
    def command(child: SharedSettings) -> None:
        seen.append(child)

    return command, seen


def _job(tmp_path: Path, settings: SharedSettings | None, repo: str | None = None) -> VerifyJob:
    return VerifyJob(
        target=tmp_path / "task",
        run_dir=tmp_path / "run",
        run_id="r1",
        events=tmp_path / "events.jsonl",
        stderr=tmp_path / "stderr",
        repo=repo,
        settings=settings,
    )


def test_every_setting_has_its_option_and_reaches_the_command() -> None:
    command, seen = _parsing(repeat=3)
    result = CliRunner().invoke(
        command,
        ["--base-image", "b:1", "--toolchain-source", "uv=registry", "--pids-limit", "99",
         "--max-log-size", "1MiB", "--storage-limit", "watchdog", "--no-hack-gate",
         "--keep-going", "--no-hand-caches", "--agent-allowed-host", "h.invalid"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (child,) = seen
    assert child == SharedSettings(
        base_image="b:1",
        sources=("uv=registry",),
        pids_limit=99,
        max_log_size=1024 * 1024,
        storage_limit=StorageLimit.WATCHDOG,
        hack_gate=HackGate.OFF,
        repeat=3,
        keep_going=True,
        hand_caches=False,
        allowed_hosts=("h.invalid",),
    )
    option_names = {p.name for p in command.params}
    assert set(SharedSettings.model_fields) <= option_names


def test_a_childs_settings_are_the_supervisors_checked_ones(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    given = SharedSettings(
        extra_ca_certs=Path("ca.pem"),  # relative: a child may start elsewhere
        sources=("uv=registry",),
        mirrors=("go=https://mirror.invalid/go",),
        pids_limit=512,
        repeat=0,
        probe_pass_to_pass=True,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        forwarded, outcome = _forwarded(given)
    assert forwarded.extra_ca_certs == ca.resolve()
    assert outcome["pidsLimit"] == 512 and outcome["repeat"] == 0

    argv = _job(tmp_path, forwarded, repo="/srv/repo.git").argv()
    assert argv[argv.index("--repo") + 1] == "/srv/repo.git"
    command, seen = _parsing(repeat=1, from_json=True)
    result = CliRunner().invoke(command, argv[argv.index("--settings-json") :][:2])
    assert result.exit_code == 0, result.output
    assert seen == [forwarded]


def test_no_settings_means_the_childs_defaults(tmp_path: Path) -> None:
    assert "--settings-json" not in _job(tmp_path, None).argv()
    command, seen = _parsing(repeat=1, from_json=True)
    assert CliRunner().invoke(command, []).exit_code == 0
    assert seen == [SharedSettings()]


def test_settings_json_beside_an_option_is_refused_naming_it() -> None:
    command, seen = _parsing(repeat=1, from_json=True)
    result = CliRunner().invoke(
        command, ["--settings-json", SharedSettings().model_dump_json(), "--pids-limit", "64"]
    )
    assert result.exit_code == 2 and seen == []
    assert "--settings-json takes every setting; drop --pids-limit" in result.output


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ('{"pids_limit": 3}', "pids_limit: Input should be greater than or equal to 32"),
        ('{"storage_limit": "disk"}', "storage_limit: Input should be"),
        ('{"base_image": "b", "extra": 1}', "extra: Extra inputs are not permitted"),
        ("[1", "--settings-json: (document)"),
    ],
)
def test_a_bad_settings_document_is_a_usage_error_naming_the_field(
    document: str, words: str
) -> None:
    command, seen = _parsing(repeat=1, from_json=True)
    result = CliRunner().invoke(command, ["--settings-json", document])
    assert result.exit_code == 2 and seen == []
    assert words in result.output


def test_only_verify_takes_a_settings_document() -> None:
    @click.command()
    @CHILD_VERIFY_OPTIONS
    def supervisor(child: SharedSettings) -> None:
        pass

    result = CliRunner().invoke(supervisor, ["--settings-json", "{}"])
    assert result.exit_code == 2 and "No such option" in result.output


@pytest.mark.parametrize(
    ("words", "mode"),
    [
        ([], HackGate.TASK),
        (["--hack-gate"], HackGate.TASK),
        (["--hack-gate", "full"], HackGate.FULL),
        (["--hack-gate=off"], HackGate.OFF),
        (["--no-hack-gate"], HackGate.OFF),
    ],
)
def test_the_hack_gate_s_modes(words: list[str], mode: HackGate) -> None:
    command, seen = _parsing(repeat=1, from_json=True)
    result = CliRunner().invoke(command, words)
    assert result.exit_code == 0, result.output
    assert seen[0].hack_gate is mode


def test_no_hack_gate_beside_a_settings_document_is_refused() -> None:
    command, _ = _parsing(repeat=1, from_json=True)
    result = CliRunner().invoke(command, ["--settings-json", "{}", "--no-hack-gate"])
    assert result.exit_code == 2 and "drop --no-hack-gate" in result.output


def test_sizes_mean_what_their_units_say() -> None:
    """20MB is 20,000,000 bytes and 20MiB 20,971,520 (pydantic's ByteSize, not a table of our
    own that once read MB as MiB); out of range or not a size: a usage error."""
    import click

    from runner.cli.options import ByteSize

    size = ByteSize()
    assert size.convert("20MB", None, None) == 20_000_000
    assert size.convert("20MiB", None, None) == 20 * 1024 * 1024
    assert size.convert("1.5GB", None, None) == 1_500_000_000
    assert size.convert(" 512 kib ", None, None) == 512 * 1024
    assert size.convert("1048576", None, None) == 1_048_576
    for bad in ("20 apples", "-5", "1KB", "2TiB"):
        with pytest.raises(click.BadParameter):
            size.convert(bad, None, None)


def test_the_toolchain_variables_travel_with_the_settings_a_supervisor_hands_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """batch, serve and worker start each verify without the runner's variables
    (child_environment): SELFBENCH_TOOLCHAIN_SOURCES and _MIRRORS must be in the settings they
    hand on, as verify honours them, with an option beside them still winning."""
    from runner.model.settings import child_environment
    from runner.model.task import Toolchain
    from runner.model.toolchains import Source, settings_from

    seen: list[SharedSettings] = []

    @click.command()
    @verify_options(repeat=0)
    def command(child: SharedSettings) -> None:
        seen.append(child)

    monkeypatch.setenv("SELFBENCH_TOOLCHAIN_SOURCES", "uv=registry,node=upstream")
    monkeypatch.setenv("SELFBENCH_TOOLCHAIN_MIRRORS", "go=https://mirror.example/go")
    result = CliRunner().invoke(command, ["--toolchain-source", "node=registry"])
    assert result.exit_code == 0, result.output
    (child,) = seen
    assert child.sources == ("uv=registry,node=upstream", "node=registry")
    assert child.mirrors == ("go=https://mirror.example/go",)
    assert "SELFBENCH_TOOLCHAIN_SOURCES" not in child_environment()
    chosen = settings_from(child.sources, child.mirrors)
    assert chosen.sources[Toolchain("node")] is Source.REGISTRY  # the option wins
