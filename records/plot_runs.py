"""Plot runs from their logs to a PNG: validation bpb against training time (left) and training loss against
step (right), one line per run; the y axes start after the first 5% of each run.

  python3 records/plot_runs.py logs/seed1337.txt logs/seed1338.txt --output runs.png
  python3 records/plot_runs.py records/track_10min_16mb/2026-11-23_MyChange --output mine.png  # a folder: its logs

Reads our logs and the published records' (records/README.md). Needs matplotlib, which nothing else in
this repository does: pip install matplotlib.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import check_submission
import recordlib as R


class PlotError(RuntimeError):
    """What stops a plot; the message says what to do."""


def read_runs(paths: list[Path]) -> list[R.RunLog]:
    logs = []
    for path in paths:
        if path.is_dir():
            found = R.log_paths(path)
            if not found:
                raise PlotError(f"{path} holds no logs (*.log, *.txt)")
            logs.extend(R.read_log(p) for p in found)
        elif path.is_file():
            logs.append(R.read_log(path))
        else:
            raise PlotError(f"{path} is neither a log nor a folder")
    return logs


def validation_note(groups: dict[Path, list[R.RunLog]]) -> str | None:
    """A note when two of the inputs were scored on different validation sets (the checker's rule for two
    submissions): their bpb curves then do not compare."""
    texts = {}
    for path, logs in groups.items():
        scored = [log for log in logs if log.val_bpb is not None]
        losses, bpbs = [log.val_loss for log in scored], [log.val_bpb for log in scored]
        texts[path] = check_submission.ScoredText.of(logs, losses, bpbs)
    (first, ours), *others = texts.items()
    for path, text in others:
        differ, _ = check_submission.validation_differences(ours, text, path.name)
        if differ:
            return f"{first} and {path} were scored on different validation sets: {'; '.join(differ)}"
    return None


def label(log: R.RunLog, logs: list[R.RunLog]) -> str:
    """The log's name; with its folder's when the runs come from several folders."""
    if len({other.path.parent for other in logs}) > 1:
        return f"{log.path.parent.name}/{log.name}"
    return log.name


def y_range(curves: list[list[tuple[float, float]]], skip: float = 0.05) -> tuple[float, float]:
    """From the lowest value to the highest after the first `skip` of each run: the first steps' losses
    are several times the last ones and would flatten the part worth comparing (they go off the top)."""
    values = [v for curve in curves for v in map(lambda p: p[1], curve) if math.isfinite(v)]
    late = [v for curve in curves for x, v in curve if x >= skip * curve[-1][0] and math.isfinite(v)]
    low, high = min(values), max(late or values)
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    return low - pad, high + pad


@dataclass
class Curves:
    """What can be drawn: each run's validation bpb against training seconds and its training loss against steps (its
    label with each), and what of each run cannot be."""

    val: list[tuple[str, list[tuple[float, float]]]] = field(default_factory=list)
    train: list[tuple[str, list[tuple[float, float]]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def curves_of(logs: list[R.RunLog]) -> Curves:
    curves = Curves()
    for log in logs:
        name = label(log, logs)
        timed = [(p.train_ms / 1000, p.value) for p in log.val_bpb_curve if p.train_ms is not None]
        if timed:
            curves.val.append((name, timed))
        else:
            curves.skipped.append(f"{log.name}: no validation line with a training time")
        if log.train_loss:
            curves.train.append((name, [(p.step, p.value) for p in log.train_loss]))
        else:
            curves.skipped.append(f"{log.name}: no train_loss lines")
    return curves


def check_output(output: Path) -> None:
    """Before any drawing: the PNG goes in a folder that exists, and is not a folder itself."""
    if output.is_dir():
        raise PlotError(f"--output {output} is a folder: give the PNG's file name, e.g. {output / 'runs.png'}")
    if not output.parent.is_dir():
        raise PlotError(f"--output {output}: the folder {output.parent} does not exist: make it first, or give another")


def plot(curves: Curves, output: Path) -> None:
    """Write the PNG of the curves."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("plot_runs.py needs matplotlib, which is not installed: pip install matplotlib") from None
    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    fig, (val_ax, train_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for name, timed in curves.val:
        val_ax.plot(*zip(*timed), marker="o", markersize=3, label=name)
    for name, losses in curves.train:
        train_ax.plot(*zip(*losses), linewidth=1, label=name)
    val_ax.set(xlabel="training time (s)", ylabel="val_bpb", title="validation bits per byte (before the round trip)")
    train_ax.set(xlabel="step", ylabel="train loss (nats per token)", title="training loss")
    for ax, drawn in ((val_ax, curves.val), (train_ax, curves.train)):
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.set_ylim(*y_range([points for _, points in drawn]))
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="logs, or submission folders (all their logs)")
    parser.add_argument("--output", "-o", type=Path, default=Path("runs.png"), help="the PNG (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        check_output(args.output)
        groups = {path: read_runs([path]) for path in args.runs}
        logs = [log for group in groups.values() for log in group]
        curves = curves_of(logs)
        if not curves.val and not curves.train:
            raise PlotError(
                f"nothing to draw, so no {args.output} ({'; '.join(curves.skipped)}): give the logs of runs that "
                "trained (train_gpt.py's logs/RUN_ID.txt, or a record's)"
            )
        plot(curves, args.output)
    except (PlotError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in curves.skipped:
        print(f"not drawn: {line}", file=sys.stderr)
    if note := validation_note(groups):
        print(f"note: {note}; their bpb do not compare", file=sys.stderr)
    print(f"wrote {args.output}: {len(logs)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
