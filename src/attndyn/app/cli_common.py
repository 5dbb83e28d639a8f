"""What every ``attndyn`` command shares: the consoles, the one-line error path (``say``, ``fail``),
the ``--out`` gate (``writable``), ``--device``/``--dtype`` (``engine_options``) and the progress
helpers. The Typer app and the entry point are in :mod:`attndyn.app.cli`; the commands in
:mod:`attndyn.app.commands`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

err_console = Console(stderr=True)
console = Console()


# what ``say`` has printed in this command: the entry point adds the interruption's line only where a
# command has not said its own (Typer turns a KeyboardInterrupt into a silent exit status 130)
said: set[str] = set()


def say(message: str, *, label: str = "error", style: str = "bold red") -> None:
    """One line on stderr, printed literally (no markup: ``[grid]`` and ``[nan, nan]`` survive)."""
    from rich.text import Text

    said.add(label)

    err_console.print(Text.assemble((f"{label}: ", style), message), highlight=False, soft_wrap=True)


def fail(message: str) -> None:
    """One readable line on stderr, exit status 2."""
    say(message)
    raise typer.Exit(2)


def prompt_texts(prompts: Path | None) -> list[str]:
    """The texts of ``--prompts`` (the shipped prompts when None); exit 2 with one line when the file cannot be read."""
    from attndyn.app.decoder_page import prompts_from

    try:
        return prompts_from(prompts)
    except (OSError, UnicodeDecodeError) as err:
        fail(f"--prompts {str(prompts)!r} cannot be read ({err.__class__.__name__})")
    except ValueError as err:
        fail(str(err))


def decoder_with_ids(path: str, texts: list[str]) -> tuple:
    """The decoder ``path`` names (:func:`~attndyn.models.decoder_files.load_decoder`) and the token ids of ``texts``;
    exit 2 with one line naming ``path`` when it cannot be read or carries no tokenizer."""
    from attndyn.models.bert import CheckpointError
    from attndyn.models.decoder_files import load_decoder

    try:
        decoder = load_decoder(path)
    except (CheckpointError, OSError, ValueError) as err:
        fail(f"{path}: {err}")
    if decoder.tokenizer is None:
        fail(f"{path}: the model carries no tokenizer, so the prompts cannot be read")
    return decoder, [decoder.encode(t) for t in texts]


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


def _about(path: Path, err: BaseException) -> str:
    """An error's line prefixed with the file it is about, unless it names the file already."""
    text = str(err)
    return text if str(path) in text else f"{path}: {text}"


FORCE_ADOPT = "Write into a folder attndyn cannot prove it wrote: its entries are first moved into a dated folder inside it (nothing is deleted)."


def writable(out: Path, kind: str, writer: str, force_adopt: bool) -> None:
    """Refuse (exit 2, one line) an --out folder attndyn may not write a ``kind`` folder into, before
    any work; with ``--force-adopt`` a folder it cannot prove is adopted now (its entries moved into a
    dated folder inside it)."""
    from attndyn.workflow import ownership

    try:
        ownership.check(out, kind, force_adopt=force_adopt)
        if force_adopt:
            ownership.claim(out, kind, writer, force_adopt=True)
    except ownership.OwnershipError as err:
        fail(str(err))


def engine_options(device: str, dtype: str) -> tuple:
    """Validate ``--device`` and ``--dtype``; exit 2 with one line when unusable. Returns torch objects."""
    import torch

    from attndyn.workflow.schema import ConfigError
    from attndyn.workflow.setup import resolve_device

    if dtype not in ("float64", "float32"):
        fail(f"--dtype {dtype!r} is not float64 or float32")
    try:
        return resolve_device(device), getattr(torch, dtype)
    except ConfigError as err:
        fail(f"--device: {err}")


PROGRESS_DELAY = 1.0  # seconds before a run's progress appears (short runs print none)
COLLAPSE_RATIO = 1e-4  # an adaptive step this much below the largest so far ...
COLLAPSE_STEPS = 50  # ... for this many accepted steps in a row is a collapse


class StepWatch:
    """Reads an adaptive run's accepted steps off successive ``progress(t)`` calls and says when they collapse
    (near-hardmax attention makes adaptive steps chatter: the error estimate jumps as an argmax flips)."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.largest = 0.0
        self.run = 0
        self.collapsed: tuple[float, float] | None = None  # (t, step) when first seen

    def see(self, t: float) -> bool:
        """Record the step ending at ``t``; True the first time a collapse is seen."""
        if self.last is not None and t > self.last:
            h = t - self.last
            self.largest = max(self.largest, h)
            self.run = self.run + 1 if h < COLLAPSE_RATIO * self.largest else 0
            if self.run >= COLLAPSE_STEPS and self.collapsed is None:
                self.collapsed = (t, h)
                self.last = t
                return True
        self.last = t
        return False


@contextlib.contextmanager
def delayed_progress(description: str, total: float, *, delay: float | None = None, adaptive: bool = False) -> Iterator[Callable[[float], None]]:
    """Yield ``update(completed)``. Progress appears once the run has lasted ``delay`` s (default
    ``PROGRESS_DELAY``): a Rich bar on a terminal, else one line when it starts stepping (0 %) and one per 10 % with the elapsed time. For an
    adaptive run (``adaptive``) a collapsing step is said once, with the suggestion of a fixed step."""
    start = time.perf_counter()
    wait = PROGRESS_DELAY if delay is None else delay
    # -1: the first line (0 %) comes as soon as the delay has passed, so a log shows the run has started stepping
    state: dict = {"decile": -1}
    watch = StepWatch() if adaptive else None
    terminal = err_console.is_terminal

    def say_line(text: str) -> None:
        err_console.print(text, markup=False, highlight=False, soft_wrap=True)

    def update(completed: float):
        if watch is not None and watch.see(completed):
            t, h = watch.collapsed
            say_line(
                f"{description}: the adaptive step has collapsed to {h:.1e} (the largest so far {watch.largest:.1e}) at t = {t:.6g}; "
                "near-hardmax attention makes adaptive steps chatter, and a fixed step (solver.dt) may serve"
            )
            if "bar" in state:
                state["bar"].update(state["task"], description=f"{description} [step {h:.0e}: collapsing]")
        elapsed = time.perf_counter() - start
        if elapsed < wait:
            return
        if not terminal:
            decile = int(10 * completed / total) if total > 0 else 10
            if decile > state["decile"]:
                state["decile"] = decile
                say_line(f"{description}: {10 * decile} % (t = {completed:.6g} of {total:g}), {elapsed:.0f} s elapsed")
            return
        if "bar" not in state:
            bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>5.1f}%"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=err_console,
                transient=False,
            )
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task(description, total=total)
        state["bar"].update(state["task"], completed=completed)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"].stop()


STAGE_LINE = 10.0  # off a terminal, a stage's count is printed at most this often (its start and its end always) ...
HEARTBEAT = 25.0  # ... and at least this often while the stage runs, even where no count has moved


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


@contextlib.contextmanager
def stage_progress(command: str, first: str) -> Iterator[Callable[..., None]]:
    """Yield ``stage(message, i=0, n=0)`` for a command's stages (``checkpoint``, ``intervene``): ``i`` of ``n``
    jobs of the stage ``message`` done (``n = 0``: a stage without a count). On a terminal a status line (the
    stage, its count, an estimate of its time left and the elapsed time), erased when done; else, from
    ``PROGRESS_DELAY`` s on (a bad input found at once prints only its error), one printed line when a stage
    starts and when it ends, one at most every ``STAGE_LINE`` s as its count moves, and one at least every
    ``HEARTBEAT`` s while it runs (from a thread: a job can run for minutes), so no stage is silent longer."""
    import threading

    start = time.perf_counter()
    now: dict = {"message": first, "i": 0, "n": 0, "since": start, "printed": start}
    lock = threading.Lock()
    quit_ = threading.Event()
    terminal = err_console.is_terminal
    bar = Progress(TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=err_console, transient=True)
    task = bar.add_task(first)

    def text() -> str:
        message, i, n = now["message"], now["i"], now["n"]
        if not n:
            return message
        took = time.perf_counter() - now["since"]
        left = f", about {_duration(took / i * (n - i))} left" if 0 < i < n else ""
        return f"{message}: {i} of {n}{left}"

    def line(t: float) -> None:
        now["printed"] = t
        err_console.print(f"{command}: {text()}, {t - start:.0f} s elapsed", markup=False, highlight=False, soft_wrap=True)

    def stage(message: str, i: int = 0, n: int = 0) -> None:
        with lock:
            t = time.perf_counter()
            new = message != now["message"]
            if new:
                now["since"] = t
            now.update(message=message, i=i, n=n)
            if terminal:
                bar.update(task, description=text())
            elif t - start >= PROGRESS_DELAY and (new or i == 0 or i == n or t - now["printed"] >= STAGE_LINE):
                line(t)

    def beat() -> None:
        while not quit_.wait(1.0):
            with lock:
                t = time.perf_counter()
                if t - start >= PROGRESS_DELAY and t - now["printed"] >= HEARTBEAT:
                    line(t)

    if terminal:
        bar.start()
    else:
        watch = threading.Thread(target=beat, name=f"{command} progress", daemon=True)
        watch.start()
    try:
        yield stage
    finally:
        quit_.set()
        if terminal:
            bar.stop()
