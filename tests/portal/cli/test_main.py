"""Argument parsing: what each command line turns into, and usage errors (exit 2)."""

from __future__ import annotations

import argparse

import pytest

from portal.cli.commands import build_submission, default_job_name
from portal.cli.main import build_parser, parse_args


def parse(*argv: str) -> argparse.Namespace:
    return parse_args(build_parser(), list(argv))


def test_submit_words_after_double_dash_are_the_command_quoted_for_the_shell() -> None:
    args = parse("submit", "--gpus", "2", "--", "python", "train.py", "--lr", "0.1", "--name", "x y")
    assert args.gpus == 2
    assert args.name is None  # options after -- belong to the job, not to gpusched
    assert build_submission(args)["command"] == "python train.py --lr 0.1 --name 'x y'"


def test_submit_command_string_is_sent_verbatim() -> None:
    args = parse("submit", "--command", "bash run.sh > out.txt && echo done")
    assert build_submission(args)["command"] == "bash run.sh > out.txt && echo done"


def test_submit_sends_only_given_options_in_api_units() -> None:
    args = parse("submit", "--name", "exp", "--class", "te", "--gpus", "4", "--cpus", "8",
                 "--mem", "512M", "--grace", "2m", "--time-limit", "1:30:00", "--priority", "-3",
                 "--", "./run")
    assert build_submission(args) == {
        "name": "exp", "command": "./run", "job_class": "TE", "num_gpus": 4, "num_cpus": 8.0,
        "mem_gb": 0.5, "grace_period": 120, "time_limit": 5400, "priority": -3,
    }
    assert build_submission(parse("submit", "--", "./run")) == {"name": "run", "command": "./run"}


def test_gpu_count_is_not_range_checked_locally_so_the_portal_decides() -> None:
    assert build_submission(parse("submit", "--gpus", "0", "--", "x"))["num_gpus"] == 0


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("python train.py --lr 1", "train.py"),
        ("python3.11 -u /src/exp/train.py", "train.py"),
        ("CUDA_LAUNCH_BLOCKING=1 torchrun --nproc 4 ddp.py", "ddp.py"),
        ("/opt/bin/solver --fast", "solver"),
        ("python -m pkg.train --epochs 3", "pkg.train"),
        ("accelerate launch --num_processes 2 finetune.py", "finetune.py"),
        ("bash", "bash"),
        ("X=1", "job"),
        ("echo 'unbalanced", "echo"),
    ],
)
def test_default_job_name_is_the_script_or_program(command: str, name: str) -> None:
    assert default_job_name(command) == name


def test_common_options_work_before_and_after_the_subcommand() -> None:
    before = parse("--json", "--url", "http://a:1", "list")
    after = parse("list", "--json", "--url", "http://a:1")
    for args in (before, after):
        assert args.json is True and args.url == "http://a:1"
    assert not hasattr(parse("list"), "url")  # absent flags do not shadow env or file


def test_list_options() -> None:
    args = parse("list", "--state", "pending", "--class", "BE", "--page", "3", "--all-pages")
    assert (args.state, args.job_class, args.page, args.all_pages) == ("PENDING", "BE", 3, True)


def test_list_states_take_squeue_codes_and_lists_in_any_case() -> None:
    assert parse("list", "--state", "pd,r").state == "PENDING,RUNNING"
    assert parse("list", "--state", "Running, cd ,nf").state == "RUNNING,COMPLETED,NODE_LOST"
    assert parse("list", "--state", "R,running").state == "RUNNING"  # said twice, asked once
    assert parse("list", "--state", "sleeping").state == "SLEEPING"  # the portal names what it does not know
    with pytest.raises(SystemExit):
        parse("list", "--state", ",")


def test_logs_options() -> None:
    args = parse("logs", "7", "--attempt", "2", "-f", "--interval", "0.5")
    assert (args.job_id, args.attempt, args.follow, args.interval) == ("7", 2, True, 0.5)  # a job id or an array task (7_1), as text
    assert (parse("logs", "7", "-n", "20").tail, parse("logs", "7").tail) == (20, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["submit"], "submit needs a command"),
        (["submit", "--"], "submit needs a command"),
        (["submit", "--command", "  "], "--command must not be empty"),
        (["submit", "--command", "a", "--", "b"], "either after -- or with --command"),
        (["submit", "python", "x.py"], "unrecognized arguments: python x.py"),
        (["submit", "--gpus", "two", "--", "x"], "--gpus: invalid int value: 'two'"),
        (["submit", "--class", "XX", "--", "x"], "invalid choice: 'XX'"),
        (["submit", "--mem", "lots", "--", "x"], "invalid memory size 'lots'"),
        (["submit", "--time-limit", "soon", "--", "x"], "invalid duration 'soon'"),
        (["show"], "the following arguments are required: ID"),
        (["show", "0"], "'0' is not a job id (12) or an array task (12_3)"),
        (["cancel", "abc"], "'abc' is not a job id (12) or an array task (12_3)"),
        (["list", "--", "x"], "'--' is only used by submit"),
        (["list", "--timeout", "0"], "'0' must be positive"),
        (["logs", "1", "--interval", "-1"], "must be positive"),
        (["logs", "1", "--tail", "0"], "must be at least 1"),
    ],
)
def test_usage_errors_exit_2_with_a_message(run_cli, argv: list[str], message: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2
    assert message in err
    assert out == ""


def test_help_and_version_exit_0(run_cli) -> None:
    code, out, _ = run_cli("--help")
    assert code == 0 and "submit" in out and "GPUSCHED_TOKEN" in out
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("gpusched ")


def test_missing_configuration_is_a_usage_error(run_cli) -> None:
    code, out, err = run_cli("list")
    assert code == 2
    assert err.startswith("gpusched: error: no portal URL") and err.count("\n") == 1
    assert out == ""
