"""Entry point of ``gpusched`` (console script) and ``python -m portal.cli``.

Exit status: 0 success; 1 the API refused or could not be reached; 2 usage
error (bad arguments or configuration). Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TextIO

from portal.cli import config, sessions, usage
from portal.cli.client import ApiClient, ApiError
from portal.cli.commands import HANDLERS
from portal.cli.units import parse_duration, parse_memory_gb

EXIT_OK, EXIT_API, EXIT_USAGE = 0, 1, 2
PROG = "gpusched"

EPILOG = f"""\
connection: --url/--token, else ${config.ENV_URL}/${config.ENV_TOKEN}, else the TOML file
--config, ${config.ENV_CONFIG} or ~/.config/gpusched/config.toml (keys: url, token, timeout).
Create a token on the portal's /account/tokens/ page.

examples:
  gpusched submit --class TE --gpus 1 -- python train.py --lr 0.1
  gpusched submit --name sweep --gpus 4 --time-limit 2h --command 'bash run.sh > out.txt'
  gpusched submit --model bert --plan ga --allowed-plans ga,zero-dp --gpus 2 --min-gpus 1 --max-gpus 4 -- python train.py
  gpusched list --state PENDING
  gpusched list --start
  gpusched logs 42 --follow
"""


def _job_ref(text: str) -> str:
    """A job id (``12``) or an array task (``12_3``), as the portal addresses them."""
    head, sep, tail = text.partition("_")
    if not (head.isascii() and head.isdigit() and int(head) > 0) or (sep and not (tail.isascii() and tail.isdigit())):
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (12) or an array task (12_3)")
    return text


#: squeue's short state codes, for the states that mean the same here (Slurm's NODE_FAIL is NODE_LOST).
SLURM_STATE_CODES = {"PD": "PENDING", "CF": "STARTING", "R": "RUNNING", "PR": "PREEMPTING", "CD": "COMPLETED",
                     "F": "FAILED", "TO": "TIMEOUT", "CA": "CANCELLED", "NF": "NODE_LOST", "NODE_FAIL": "NODE_LOST"}


def _states(text: str) -> str:
    """``--state``: one state or several, comma-separated, in any case, full names or squeue's codes
    (``pd,r``) -> the API's ``PENDING,RUNNING``; an unknown name is passed on for the portal to refuse."""
    names = [part.strip().upper() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} names no state")
    return ",".join(dict.fromkeys(SLURM_STATE_CODES.get(name, name) for name in names))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _plan_list(text: str) -> list[str]:
    """``ga,zero-dp`` -> ["ga", "zero-dp"]; the portal judges the names."""
    plans = [p.strip() for p in text.split(",") if p.strip()]
    if not plans:
        raise argparse.ArgumentTypeError("expected comma-separated plan names, e.g. ga,zero-dp")
    return plans


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _converter(func, what: str):  # type: ignore[no-untyped-def]
    """Wrap a ``ValueError``-raising parser so argparse reports its message."""

    def convert(text: str):  # type: ignore[no-untyped-def]
        try:
            return func(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = what
    return convert


def _common_options() -> argparse.ArgumentParser:
    """Options accepted both before and after the subcommand name.

    Defaults are suppressed so a value given before the subcommand is not
    overwritten by the subcommand's parser.
    """
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument("--url", default=argparse.SUPPRESS, help=f"portal URL (${config.ENV_URL})")
    group.add_argument("--token", default=argparse.SUPPRESS, help=f"API token (${config.ENV_TOKEN})")
    group.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH",
                       help=f"TOML config file (${config.ENV_CONFIG})")
    group.add_argument("--timeout", type=_positive_float, default=argparse.SUPPRESS, metavar="S",
                       help=f"seconds per HTTP request (default {config.DEFAULT_TIMEOUT:g})")
    group.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print the API's JSON instead of a table")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Submit and watch jobs on the GPU-cluster scheduler's portal.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    submit = sub.add_parser("submit", parents=[common], help="submit a job",
                            usage="gpusched submit [options] (-- COMMAND [ARG ...] | --command STR)")
    submit.add_argument("--name", help="job name (default: the program or script name)")
    submit.add_argument("--class", dest="job_class", type=str.upper, choices=["TE", "BE"],
                        help="TE: trial-and-error, starts fast; BE: best-effort, preemptible "
                             "(portal default: BE)")
    submit.add_argument("--gpus", type=int, metavar="N", help="number of GPUs")
    submit.add_argument("--cpus", type=_number, metavar="N", help="CPU cores")
    submit.add_argument("--mem", type=_converter(parse_memory_gb, "memory"), metavar="SIZE",
                        help="memory: GB, or with a suffix (512M, 16G)")
    submit.add_argument("--grace", type=_converter(parse_duration, "duration"), metavar="DUR",
                        help="seconds between SIGTERM and SIGKILL on preemption (90, 2m)")
    submit.add_argument("--time-limit", type=_converter(parse_duration, "duration"), metavar="DUR",
                        help="wall-clock limit per job (3600, 90m, 2h, 1-00:00:00)")
    submit.add_argument("--priority", type=int, metavar="N", help="higher runs first")
    submit.add_argument("--project", metavar="NAME", help="the project to charge (default: your default project)")
    submit.add_argument("--dependency", "-d", metavar="SPEC",
                        help="wait for other jobs, as sbatch: afterok:ID[:ID], afterany:ID, afternotok:ID, comma-joined")
    submit.add_argument("--image", metavar="NAME", help="a registered image to run the job in (GET /api/v1/images/ lists them)")
    submit.add_argument("--model", help="reconfigurable training job: its model (bert, gpt2, vit, ...)")
    submit.add_argument("--plan", help="execution plan: ga, gc, zero-dp, zero-offload (+gc), or pp tp dp digits (244)")
    submit.add_argument("--allowed-plans", metavar="P,P", type=_plan_list,
                        help="comma-separated plans the scheduler may switch the job to")
    submit.add_argument("--min-gpus", type=int, metavar="N", help="fewest GPUs the scheduler may give the job")
    submit.add_argument("--max-gpus", type=int, metavar="N", help="most GPUs the scheduler may give the job")
    submit.add_argument("--adaptive", dest="adaptive_app", metavar="PROFILE",
                        help="adaptive (Pollux) job: its profile (cifar10, bert, ...); GPUs up to --max-gpus, batch chosen")
    submit.add_argument("--guaranteed", action="store_true", default=None,
                        help="never run below the requested plan's throughput")
    submit.add_argument("--command", dest="command_text", metavar="STR",
                        help="the command as one shell string (instead of -- COMMAND...)")
    submit.add_argument("--array", metavar="SPEC",
                        help="a job array, all tasks or none, as sbatch: 0-9, 0-9:2 or 1,3,5; task i is named "
                             "NAME_i, %%a in the command becomes i, and it is addressed as ID_i")
    submit.add_argument("-q", "--quiet", action="store_true", help="print only the job id")

    listing = sub.add_parser("list", parents=[common], help="list your jobs (staff: all jobs)")
    listing.add_argument("--state", type=_states, help="only jobs in these states, comma-separated: names or squeue's "
                         "codes (PENDING,RUNNING or pd,r)")
    listing.add_argument("--class", dest="job_class", type=str.upper, choices=["TE", "BE"],
                         help="only TE or only BE jobs")
    listing.add_argument("--array", type=_positive_int, metavar="ID", help="only the tasks of job array ID")
    listing.add_argument("--user", metavar="NAME", help="staff: only NAME's jobs, like squeue -u (anyone else sees "
                                                        "only their own jobs whatever they name)")
    listing.add_argument("--from", dest="active_from", metavar="DATE",
                         help="only jobs not ended before DATE, like sacct -S: YYYY-MM-DD (midnight UTC) or an "
                              "ISO date-time")
    listing.add_argument("--to", dest="active_to", metavar="DATE",
                         help="only jobs submitted before DATE, like sacct -E: YYYY-MM-DD (that day included) or "
                              "an ISO date-time")
    listing.add_argument("--page", type=_positive_int, default=1, help="page number (default 1)")
    listing.add_argument("--all-pages", action="store_true", help="fetch every page")
    listing.add_argument("--start", action="store_true",
                         help="pending jobs with their queue position and forecast start (like squeue --start)")

    show = sub.add_parser("show", parents=[common], help="show one job with its attempts and events")
    show.add_argument("job_id", type=_job_ref, metavar="ID", help="a job (12) or an array task (12_3)")
    cancel = sub.add_parser("cancel", parents=[common], help="cancel jobs (like scancel)")
    cancel.add_argument("job_ids", type=_job_ref, metavar="ID", nargs="+",
                        help="jobs (12) or array tasks (12_3); cancel 12 cancels every task of array 12")
    for name, text in (("hold", "keep a pending job from starting until it is released (like scontrol hold)"),
                       ("release", "release a held job so that it may start (like scontrol release)")):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("job_ids", type=_job_ref, metavar="ID", nargs="+",
                       help=f"jobs (12) or array tasks (12_3); {name} 12 {name}s every task of array 12")

    update = sub.add_parser("update", parents=[common],
                            help="change a pending job's priority (like scontrol update JobId=ID Priority=N)")
    update.add_argument("job_id", type=_job_ref, metavar="ID",
                        help="a job (12) or an array task (12_3); update 12 changes every waiting task of array 12")
    update.add_argument("--priority", type=int, required=True, metavar="N",
                        help="the new priority, within the range you may use (gpusched quota shows it)")

    logs = sub.add_parser("logs", parents=[common], help="print a job's log")
    logs.add_argument("job_id", type=_job_ref, metavar="ID")
    logs.add_argument("--attempt", type=_positive_int, metavar="N",
                      help="attempt number (default: the latest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new lines until the job ends")
    logs.add_argument("-n", "--tail", type=_positive_int, metavar="N",
                      help="start at the last N lines of the log (default: from its first line)")
    logs.add_argument("--interval", type=_positive_float, default=2.0, metavar="S",
                      help="seconds between polls with --follow (default 2)")

    sub.add_parser("quota", parents=[common], help="show your quota limits and usage")
    sub.add_parser("nodes", parents=[common], help="list the cluster's nodes")
    sessions.add_parsers(sub, common, _converter(parse_duration, "duration"))
    usage.add_parser(sub, common)
    return parser


def _version() -> str:
    try:
        return metadata.version("gpusched")
    except metadata.PackageNotFoundError:
        return "unknown"


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; words after the first ``--`` are ``submit``'s command.

    Raises ``SystemExit(2)`` through ``parser.error`` on any usage error.
    """
    argv = list(argv)
    trailing: list[str] | None = None
    if "--" in argv:
        split = argv.index("--")
        argv, trailing = argv[:split], argv[split + 1:]
    args = parser.parse_args(argv)
    args.command_words = trailing
    if args.cmd != "submit":
        if trailing is not None:
            parser.error(f"'--' is only used by submit, not by {args.cmd}")
        return args
    if trailing is not None and args.command_text is not None:
        parser.error("give the command either after -- or with --command, not both")
    if args.command_text is None and not trailing:
        parser.error("submit needs a command: gpusched submit [options] -- COMMAND [ARG ...]")
    if args.command_text is not None and not args.command_text.strip():
        parser.error("--command must not be empty")
    return args


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run one ``gpusched`` command and return its exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.json = getattr(args, "json", False)
    try:
        settings = config.resolve(
            flag_url=getattr(args, "url", None),
            flag_token=getattr(args, "token", None),
            flag_config=getattr(args, "config", None),
            flag_timeout=getattr(args, "timeout", None),
            env=os.environ if env is None else env,
        )
        return HANDLERS[args.cmd](ApiClient(settings), args, out)
    except config.ConfigError as exc:
        err.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except ApiError as exc:
        err.write(f"{PROG}: error: {exc.message}\n")
        return EXIT_API
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `gpusched list | head`: the reader went away
        _silence_stdout()
        return EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
