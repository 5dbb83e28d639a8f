"""The ``attndyn`` command line (Typer + Rich): the app, its options, and the entry point behind one
error path. Nothing imports this module (but ``python -m attndyn``).

User errors (bad config, bad path, unreadable run folder) print one line to stderr and exit 2.
The commands live in :mod:`attndyn.app.commands` (one module per group), what they share in
:mod:`attndyn.app.cli_common`; they are registered below, in the order ``attndyn --help`` lists them.
"""

from __future__ import annotations

import typer

from attndyn.app.cli_common import _one_line, console, fail, said, say
from attndyn.app.commands.atlas import atlas
from attndyn.app.commands.checkpoint import checkpoint
from attndyn.app.commands.claims import judge, list_claims, report, reproduce
from attndyn.app.commands.intervene import intervene
from attndyn.app.commands.meanfield import meanfield
from attndyn.app.commands.models import models
from attndyn.app.commands.simulate import analyze, simulate
from attndyn.app.commands.sweep import sweep

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Self-attention dynamics: simulate, analyse, reproduce.")


def _interrupt(signum, frame):  # SIGTERM is handled as Ctrl-C: what finished is kept
    raise KeyboardInterrupt


def entry(argv: list[str] | None = None) -> int:
    """The ``attndyn`` command: runs the Typer app behind one error path; returns the exit status.

    Expected errors (:class:`~attndyn.core.errors.UserError`, usage errors, files that cannot be
    read or written or that end early, ``EOFError``) print one line and exit 2; only Ctrl-C or
    SIGTERM prints what was kept and exits 130; anything else is a bug: one line with a hint to rerun with ``--debug`` (the traceback), exit 1.
    """
    import signal
    import sys

    from attndyn.core.errors import UserError

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    for k, a in enumerate(args):  # Typer reads "" as the current folder: an empty path is refused here
        option, eq, value = a.partition("=")
        if option == "--out" and ((eq and not value.strip()) or (not eq and k + 1 < len(args) and not args[k + 1].strip())):
            say("--out '' is an empty path; name a new or empty folder")
            return 2
    main_thread = threading_main()
    # Ctrl-C and SIGTERM raise KeyboardInterrupt from here on, also inside the heavy imports (torch)
    # that the commands make: one line and 130 below, never a traceback
    previous = (signal.signal(signal.SIGTERM, _interrupt), signal.signal(signal.SIGINT, signal.default_int_handler)) if main_thread else None
    said.clear()
    try:
        if main_thread and _needs_torch(args):
            _import_torch_deferring_signals()
        code = app(args=args, prog_name="attndyn", standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if code == 130 and "interrupted" not in said:  # Typer's own answer to Ctrl-C: an exit status without a word
            raise KeyboardInterrupt
        return code
    except typer.Exit as err:
        return err.exit_code
    except (typer.Abort, KeyboardInterrupt, EOFError) as err:
        # Click turns an EOFError into the Abort of Ctrl-C: a file that ended early (a 0-byte
        # arrays.npz) is a bad file, exit 2; only Ctrl-C and SIGTERM/SIGINT are interruptions
        ended = err if isinstance(err, EOFError) else err.__cause__ or err.__context__
        if isinstance(ended, EOFError):
            say(f"a file ended before the data it declares (EOFError: {_one_line(ended)}); it is truncated or damaged")
            return 2
        if main_thread:  # a second Ctrl-C while the line is printed adds nothing
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        say("nothing more was written (what had finished is kept)", label="interrupted", style="bold yellow")
        return 130
    except UserError as err:
        say(_one_line(err))
        return 2
    except typer.exceptions.TyperException as err:  # usage errors (an unknown option, a value of the wrong type)
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        ctx = getattr(err, "ctx", None)
        where = f"{ctx.command_path} --help" if ctx is not None else "attndyn --help"
        if message.strip():  # (no arguments at all: the help was shown, nothing to add)
            say(f"{' '.join(message.split())} (see `{where}`)")
        return int(getattr(err, "exit_code", 2))
    except OSError as err:
        where = f" {err.filename}" if getattr(err, "filename", None) else ""
        say(f"cannot read or write{where}: {err.strerror or _one_line(err)}")
        return 2
    except Exception as err:
        package = (getattr(err, "name", None) or "").partition(".")[0] if isinstance(err, ModuleNotFoundError) else ""
        if package in OPTIONAL_PACKAGES and not debug:  # an optional extra that is not installed: not a bug
            say(f"this command needs the optional package {package!r}, which is not installed: pip install 'attndyn[{OPTIONAL_PACKAGES[package]}]'")
            return 2
        if debug:
            raise
        say(f"unexpected {type(err).__name__}: {_one_line(err)} (a bug in attndyn; rerun with --debug for the traceback)")
        return 1
    finally:
        from attndyn.workflow import ownership

        ownership.unlock()  # the folders this command held: free for the next run (in this process too)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGINT, previous[1])


# packages only some commands import, and the extra of pyproject.toml that installs them
OPTIONAL_PACKAGES = {"safetensors": "checkpoints", "tokenizers": "checkpoints", "gguf": "checkpoints"}


# commands that only read what a run wrote, and the listings: torch is not imported for them
LIGHT_COMMANDS = {"judge", "report", "list", "models"}


def _needs_torch(args: list[str]) -> bool:
    if not args or any(a in ("--help", "-h", "--version") for a in args):
        return False
    return args[0] not in LIGHT_COMMANDS and args[:2] != ["sweep", "status"]


def _import_torch_deferring_signals() -> None:
    """Import torch with Ctrl-C and SIGTERM held until the import has finished, then act on them.

    A KeyboardInterrupt raised inside torch's import can land in C++ code that pybind11 calls back
    through (the process then aborts, status -6, "terminate called after throwing ...") or in code run
    by PyRun_* (CPython then ends by SIGINT); held here, it is raised after the import, where the
    command line's one interruption path handles it.
    """
    import signal

    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        import torch  # noqa: F401
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if held:
        raise KeyboardInterrupt


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _version(value: bool):
    if value:
        from attndyn import __version__

        console.print(f"attndyn {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    threads: int | None = typer.Option(
        None, "--threads", help="Intra-op threads (default: the thread policy, one for small states; env ATTNDYN_THREADS)."
    ),
) -> None:
    """attndyn: Transformers as interacting particle systems."""
    import os

    from attndyn.core.threads import ENV, check_threads, set_process_default

    try:
        if threads is not None:
            os.environ[ENV] = str(check_threads(threads, "--threads"))
        # the process default for work outside the library's entry points (which choose per call),
        # for torch and for NumPy's and SciPy's BLAS pools
        set_process_default()
    except ValueError as err:
        fail(str(err))


app.command()(simulate)
app.command()(meanfield)
app.command(context_settings={"allow_extra_args": False})(sweep)
app.command()(analyze)
app.command("list")(list_claims)
app.command()(reproduce)
app.command()(report)
app.command()(judge)
app.command()(checkpoint)
app.command()(models)
app.command()(intervene)
app.command()(atlas)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(entry())
