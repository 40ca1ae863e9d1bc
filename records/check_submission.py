"""Check a submission folder the way the challenge's maintainers do, in two tiers. The challenge's own rules
(files, a score in every log, code that compiles, 16,000,000 bytes, 600 s of training and 600 s of evaluation,
the submission.json fields the challenge asks for, its val_bpb and seeds as the logs give them, the logs of the
folder's script and of one config wherever they show it, and with --against the 0.005-nat win at p < 0.01, a seed
counted once) decide the verdict and the exit code. This project's stricter reproducibility checks (a script in every
log, the GPU named, our maker's fields, per-seed agreement of stated sizes and scores, GPTQ inside the 600 s) follow
as `ours:` notes, which fail only with --strict.

  python3 records/check_submission.py records/track_10min_16mb/2026-11-23_MyChange
  python3 records/check_submission.py FOLDER --against records/track_10min_16mb/2026-04-05_...  # the t-test
  python3 records/check_submission.py FOLDER --strict --json                                   # both tiers, JSON

It reads our logs (train_gpt.py's) fully and every published record's log format far enough to check scores,
sizes, times and seeds. records/README.md lists the rules, the readings the checker takes, and why.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path

import recordlib as R


CHALLENGE, OURS = "challenge", "ours"


@dataclass
class Verdict:
    rule: str
    ok: bool
    evidence: str
    tier: str = CHALLENGE  # CHALLENGE decides the verdict; OURS only with --strict
    checked: bool = True  # False: the rule could not be judged here (said in the evidence), which fails nothing

    def status(self, strict: bool = False) -> str:
        if not self.checked:
            return "not checked"
        if self.ok:
            return "pass"
        return "FAIL" if self.tier == CHALLENGE or strict else "note"


@dataclass
class Run:
    """One run of the submission: its seed's logs (the same seed logged twice, or one log copied, is one run: a seed is
    a run) and the log whose score counts, the one submission.json gives for that seed, else the first."""

    seed: int | None
    logs: list[R.RunLog]
    log: R.RunLog


def runs_of(logs: list[R.RunLog], submission: dict | None) -> list[Run]:
    """The logs grouped into runs by seed (a log without a seed by its bytes)."""
    groups: dict[object, list[R.RunLog]] = {}
    for log in logs:
        key = log.seed if log.seed is not None else hashlib.sha256(log.path.read_bytes()).hexdigest()
        groups.setdefault(key, []).append(log)
    runs = []
    for group in groups.values():
        scored = [log for log in group if log.val_bpb is not None] or group
        written = R.written_bpb(submission, group[0].seed)
        claimed = [
            log for log in scored if written is not None and log.val_bpb is not None and R.agrees(log.val_bpb, written)
        ]
        runs.append(Run(group[0].seed, group, (claimed or scored)[0]))
    return runs


def merged_runs(runs: list[Run]) -> str:
    """The runs that several logs stand for, said once: "train_a.log, train_b.log are one run (seed 1337)"."""
    said = [
        f"{', '.join(log.name for log in run.logs)} are one run (seed {run.seed}; {run.log.name}'s score counts)"
        for run in runs
        if len(run.logs) > 1
    ]
    return "; ".join(said)


@dataclass
class Submission:
    """A folder as the rules see it: its files, parsed once."""

    folder: Path
    track: str
    track_note: str  # how the track was decided
    script_path: Path | None  # train_gpt.py, else the folder's one train_gpt*.py
    script: bytes | None  # train_gpt.py as shipped
    code: str | None  # the code that runs: the unpacked source of a packed train_gpt.py
    packed: bool
    pack_error: str | None
    code_files: list[Path]  # train_gpt.py and the folder's modules it runs (imports, or names), theirs in turn
    logs: list[R.RunLog]
    submission: dict | None
    submission_error: str | None
    submission_path: Path | None
    runs: list[Run] = field(default_factory=list)

    @property
    def code_bytes(self) -> int | None:
        return sum(p.stat().st_size for p in self.code_files) if self.script is not None else None

    def counted_code(self, log: R.RunLog) -> tuple[int | None, str | None]:
        """The code bytes that count beside this log's model, and how they were counted where not as the folder's
        files. The records from 2026-04-10 on measure their code packed (pyminify + lzma + base85 in a two-line
        wrapper: "Code size (compressed)") and ship it unpacked; the maintainers took the packed size. Counted
        here: the log's packed size, plus every byte the folder's source has beyond the source the log measured."""
        if self.code_bytes is None:
            return None, None
        packed, measured = log.code_bytes, log.code_bytes_unpacked
        if self.packed or packed is None or measured is None or packed >= self.code_bytes:
            return self.code_bytes, None
        extra = max(0, self.code_bytes - measured)
        note = (
            f"code counted packed, as the log measured it: {packed:,} bytes for its {measured:,}-byte source"
            + (f", + {extra:,} for the folder's {self.code_bytes:,}-byte source" if extra else "")
            + (
                f" (the folder's source is {measured - self.code_bytes:,} bytes shorter)"
                if self.code_bytes < measured
                else ""
            )
        )
        return packed + extra, note

    def total_bytes(self, log: R.RunLog) -> int | None:
        code, _ = self.counted_code(log)
        if code is None or log.model_bytes is None:
            return None
        return code + log.model_bytes


def find_script(folder: Path) -> Path | None:
    """train_gpt.py, else the folder's one other train_gpt*.py (the 2026-03-19 smeargate record's train_gpt_v5.py, the
    ternary record's train_gpt_cuda_ternary.py); not the readable copy beside a packed script."""
    if (folder / "train_gpt.py").is_file():
        return folder / "train_gpt.py"
    found = [p for p in sorted(folder.glob("train_gpt*.py")) if p.name != R.HUMAN_COPY]
    return found[0] if len(found) == 1 else None


def load(folder: Path) -> Submission:
    script_path = find_script(folder)
    script = script_path.read_bytes() if script_path is not None else None
    code, packed, pack_error = None, False, None
    if script is not None:
        text = script.decode("utf-8", errors="replace")
        try:
            unpacked = R.unpack_script(text)
            code, packed = (unpacked, True) if unpacked is not None else (text, False)
        except R.PackError as exc:
            packed, pack_error = True, str(exc)
    code_files = [] if script is None else [script_path] + (R.run_modules(code, folder) if code is not None else [])
    code_files = list(dict.fromkeys(code_files))  # a train_gpt_v5.py that imports nothing of the folder
    submission, submission_error = R.read_submission(folder)
    track, note = find_track(folder, submission)
    logs = R.complete_with_rescores([R.read_log(p) for p in R.log_paths(folder)])  # a run stopped while scoring
    logs = R.claim_scores(logs, submission)
    logs = R.claim_reevaluations(logs, R.reevaluation_paths(folder), submission)
    return Submission(
        folder,
        track,
        note,
        script_path,
        script,
        code,
        packed,
        pack_error,
        code_files,
        logs,
        submission,
        submission_error,
        R.submission_path(folder),
        runs_of(logs, submission),
    )


def find_track(folder: Path, submission: dict | None) -> tuple[str, str]:
    declared = str(submission.get("track", "")) if isinstance(submission, dict) else ""
    declared = declared.removeprefix("track_")
    parent = folder.resolve().parent.name
    if declared in R.TRACKS:
        return declared, "from submission.json"
    if parent.removeprefix("track_") in R.TRACKS:
        return parent.removeprefix("track_"), f"from the folder's place under {parent}/"
    if declared:  # an unknown track relaxes nothing
        return R.RECORD_TRACK, f"submission.json's track {declared!r} is unknown: judged as a record"
    return R.RECORD_TRACK, "assumed: submission.json names no track and the folder is not under records/track_*/"


def first_difference(a: bytes, b: bytes) -> int:
    """The 1-based line where two texts first differ."""
    for number, (x, y) in enumerate(zip(a.split(b"\n"), b.split(b"\n")), start=1):
        if x != y:
            return number
    return min(a.count(b"\n"), b.count(b"\n")) + 1


def grouped(findings: list[tuple[str, str]]) -> str:
    """(log name, finding) pairs, the logs with the same finding named together: "a.log, b.log: finding"."""
    names: dict[str, list[str]] = {}
    for name, finding in findings:
        names.setdefault(finding, []).append(name)
    return "; ".join(f"{', '.join(logs)}: {finding}" for finding, logs in names.items())


def seconds(ms: float) -> str:
    return f"{ms / 1000:.3f} s"


# =================================================================================================
# The rules, in the order a reviewer reads a folder
# =================================================================================================


# Beside its code and logs a folder may ship what its run needs ("a train_gpt.py script and any other dependencies":
# requirements.txt, a tokenizer, the data preparation its README describes) and pictures for its README. The largest
# such file an accepted record ships is a 370,917-byte tokenizer (2026-03-24). A file over OTHER_FILE_BYTES, 1/16 of
# the budget, is weights or data that the artifact does not pay for, or something that does not belong in a PR.
OTHER_FILE_BYTES = 1_000_000
# Code by its suffix: where the script does not run it, it is not counted in the code bytes (ours: other_code).
CODE_SUFFIXES = {".py", ".pyx", ".pyd", ".so", ".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".sh"}
# What the challenge's .gitignore keeps out of a pull request: not in the folder as the reviewers see it.
GIT_IGNORED = {"__pycache__", ".DS_Store"}


def folder_entries(folder: Path) -> list[Path]:
    """Every file and link in the folder and its subfolders (a linked folder is not entered), but what git ignores."""
    found = []
    for where, folders, files in os.walk(folder):
        folders[:] = sorted(d for d in folders if d not in GIT_IGNORED)
        found += [Path(where) / d for d in folders if (Path(where) / d).is_symlink()]
        found += [Path(where) / f for f in sorted(files) if f not in GIT_IGNORED]
    return found


def outside_links(folder: Path) -> list[str]:
    """The links whose target is outside the folder (or missing): git keeps a link, not its file, so in a pull request
    they dangle."""
    inside = folder.resolve()
    said = []
    for path in folder_entries(folder):
        target = path.resolve()
        if path.is_symlink() and (not target.exists() or not target.is_relative_to(inside)):
            said.append(f"{path.relative_to(folder)} is a link to {target}" + ("" if target.exists() else " (missing)"))
    return said


def other_files(s: Submission) -> list[Path]:
    """The folder's files that are none of those it must hold: not README.md, the json, the script, its readable copy,
    the code the script runs, a log or a re-evaluation log."""
    named = {s.folder / "README.md", s.submission_path, s.script_path, *s.code_files, *(log.path for log in s.logs)}
    named |= set(R.reevaluation_paths(s.folder)) | ({s.folder / R.HUMAN_COPY} if s.packed else set())
    return [p for p in folder_entries(s.folder) if p not in named and p.is_file() and not p.is_symlink()]


def described(folder: Path, paths: list[Path], code_said: bool = False) -> str:
    """ "weights.bin (20,000,000 bytes), helper.py (1,000 bytes, code the script does not run: not counted)"."""
    said = []
    for path in paths:
        code = ", code the script does not run: not counted" if code_said and path.suffix in CODE_SUFFIXES else ""
        said.append(f"{path.relative_to(folder)} ({path.stat().st_size:,} bytes{code})")
    return ", ".join(said)


def check_files(s: Submission) -> Verdict:
    missing = [n for n in ("README.md",) if not (s.folder / n).is_file()]
    missing += [] if s.submission_path else ["submission.json"]
    missing += [] if s.script_path else ["train_gpt.py"]
    problems = [f"missing {', '.join(missing)}"] if missing else []
    if not s.logs:
        problems.append("no logs (*.log or train_gpt.py's *.txt, in the folder or its logs/)")
    readme = s.folder / "README.md"
    if readme.is_file() and R.README_PLACEHOLDER in readme.read_text(encoding="utf-8", errors="replace"):
        problems.append("README.md still holds the maker's TODO: say what you changed and why it helps")
    if links := outside_links(s.folder):
        problems.append(
            f"{'; '.join(links)}: outside the folder, so in a pull request it dangles (git keeps the link, not the "
            "file): copy the file in its place"
        )
    others = other_files(s)
    if large := [p for p in others if p.stat().st_size > OTHER_FILE_BYTES]:
        problems.append(
            f"{described(s.folder, large)}: over {OTHER_FILE_BYTES:,} bytes, neither code the script runs nor a log: "
            "if the run reads it, it is model bytes the size does not count; if not, leave it out of the pull request"
        )
    if problems:
        return Verdict("files", False, "; ".join(problems))
    names = ", ".join(str(log.path.relative_to(s.folder)) for log in s.logs)
    named = f"README.md, {s.submission_path.name}, {s.script_path.name} and {len(s.logs)} log(s): {names}"
    other = [
        f"{p.name} stands for {want}"
        for p, want in ((s.submission_path, "submission.json"), (s.script_path, "train_gpt.py"))
        if p.name != want
    ]
    if other:
        named += f" ({'; '.join(other)}: the maintainers accepted such names)"
    return Verdict("files", True, named + (f"; other files: {described(s.folder, others, True)}" if others else ""))


def check_other_code(s: Submission) -> Verdict:
    """Ours: the folder holds no code that the script does not run (the challenge counts all code, in train_gpt.py)."""
    code = [p for p in other_files(s) if p.suffix in CODE_SUFFIXES]
    if code:
        return Verdict(
            "other_code",
            False,
            f"{described(s.folder, code)}: code beside the script that it does not run, so not counted in its bytes: "
            "if the run needs it, import it from the script so that it counts; if not, leave it out, or say in the "
            "README what it is for (a data preparation tool), which this note cannot see",
            OURS,
        )
    return Verdict("other_code", True, "no code beside the script but what it runs (counted)", OURS)


def edited_scores(log: R.RunLog) -> list[str]:
    """The exact score lines that their rounded twin, printed from the same numbers just before, does not round to
    (within half a unit of the twin's last decimal, and the 0.5e-8 of the exact line's own rounding)."""
    said = []
    for label, loss, bpb, twin, twin_loss, twin_bpb in log.score_twins:
        if any(
            abs(float(w) - v) > 0.5 * 10.0 ** -R.decimals(w) + 1e-8 for w, v in ((twin_loss, loss), (twin_bpb, bpb))
        ):
            said.append(
                f"{log.name}: its {label} val_loss:{loss:.8f} val_bpb:{bpb:.8f} is not the {twin} printed before it "
                "from the same numbers: the score line was edited; give the log as the run wrote it"
            )
    return said


def check_final_line(s: Submission) -> Verdict:
    problems, found = [], []
    for log in s.logs:
        if log.failure:
            problems.append(f"{log.name}: the run failed: {log.failure[:120]}")
        elif log.val_bpb is None:
            problems.append(f"{log.name}: no final score line (final_<format>_exact val_loss:... val_bpb:...)")
        elif edited := edited_scores(log):
            problems += edited
        else:
            claim = f" ({log.claimed_note})" if log.claimed_note else ""
            found.append(f"{log.name}: {log.score_label} val_loss:{log.val_loss} val_bpb:{log.val_bpb}{claim}")
    if not s.logs:
        problems.append("no logs")
    return Verdict("final_line", not problems, "; ".join(problems or found))


def logged_script(log: R.RunLog) -> str | None:
    """The script a log holds: at its head (ours, the 2026-03 records), else in its "Source code:" section (some
    2026-04 records); None where it holds none (most published records)."""
    return log.script if log.script is not None else log.source_code


def script_difference(s: Submission, logged: str) -> str | None:
    """How a logged script differs from the folder's (None: it is the shipped script, or the code packed in it)."""
    ran = logged.encode("utf-8")
    if ran == s.script or (s.packed and s.code is not None and ran == s.code.encode("utf-8")):
        return None
    return (
        f"the script in the log differs from {s.script_path.name} from line {first_difference(ran, s.script)} "
        f"({len(ran):,} vs {len(s.script):,} bytes): the folder does not ship the script that ran"
    )


def check_script_matches_logs(s: Submission) -> Verdict:
    """The challenge: the folder's script "must successfully compile and run" and reproduce the logs. Where a log holds
    the script it ran, that script is the folder's, byte for byte; where none does, this cannot be checked."""
    rule = "script_matches_logs"
    if s.script is None:
        return Verdict(rule, True, "no train_gpt.py to compare (the files rule fails it)", checked=False)
    held = {log.name: logged_script(log) for log in s.logs}
    if not any(script is not None for script in held.values()):
        return Verdict(
            rule,
            True,
            f"cannot be checked: no log holds the script it ran (of {len(s.logs)} log(s)), so the logs cannot show "
            f"that {s.script_path.name} is what ran",
            checked=False,
        )
    problems = [
        (name, why) for name, script in held.items() if script is not None and (why := script_difference(s, script))
    ]
    unheld = [name for name, script in held.items() if script is None]
    note = f"; {', '.join(unheld)}: the log holds no script" if unheld else ""
    if problems:
        return Verdict(rule, False, grouped(problems) + note)
    checked = len(held) - len(unheld)
    return Verdict(
        rule,
        True,
        f"the script {checked} log(s) hold is {s.script_path.name}, byte for byte ({len(s.script):,} bytes){note}",
    )


def check_script_in_logs(s: Submission) -> Verdict:
    """Ours: every log holds the script it ran (train_gpt.py logs its own source first), so the check above is made."""
    unheld = [log.name for log in s.logs if logged_script(log) is None]
    if unheld or not s.logs:
        said = f"{', '.join(unheld)}: the log does not hold the script it ran (train_gpt.py logs its own source first)"
        return Verdict("script_in_logs", False, said if s.logs else "no logs", OURS)
    return Verdict("script_in_logs", True, f"all {len(s.logs)} log(s) hold the script they ran", OURS)


# The records ran Python 3.12 or later (their code nests quotes inside f-strings, which 3.11's grammar rejects:
# the 2026-04-09 record's line 266). Under an older Python the rule is judged by a 3.12+ interpreter on the PATH.
RECORDS_PYTHON = (3, 12)
NEWER_PYTHONS = ("python3.14", "python3.13", "python3.12")


@functools.cache
def newer_python() -> str | None:
    """A Python 3.12+ interpreter on the PATH that runs (a pyenv shim of a version not selected does not)."""
    for name in NEWER_PYTHONS:
        path = shutil.which(name)
        if path is None:
            continue
        try:
            ran = subprocess.run(
                [path, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ran.returncode == 0 and ran.stdout.strip() == "True":
            return path
    return None


def syntax_error(code: str) -> tuple[str | None, str]:
    """(the SyntaxError of `code` as "line N: message", or None; which Python judged it). Raises LookupError where
    no Python of the records' grammar is at hand."""
    here = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    if sys.version_info >= RECORDS_PYTHON:
        try:
            compile(code, "train_gpt.py", "exec")
        except SyntaxError as exc:
            return f"line {exc.lineno}: {exc.msg}", here
        return None, here
    python = newer_python()
    if python is None:
        raise LookupError(here)
    judge = "import sys\ntry:\n compile(sys.stdin.read(), 'train_gpt.py', 'exec')\nexcept SyntaxError as e:\n print(f'line {e.lineno}: {e.msg}')"
    ran = subprocess.run([python, "-c", judge], input=code, capture_output=True, text=True, timeout=120)
    return ran.stdout.strip() or None, python


def check_packed_script(s: Submission) -> Verdict:
    if s.script is None:
        return Verdict("packed_script", False, "no train_gpt.py")
    if s.pack_error:
        return Verdict("packed_script", False, f"{s.script_path.name} looks packed but does not unpack: {s.pack_error}")
    what = "the unpacked code" if s.packed else s.script_path.name
    try:
        error, judge = syntax_error(s.code)
    except LookupError as exc:  # no Python of the records' grammar: this one's, where the code passes it
        try:
            compile(s.code, "train_gpt.py", "exec")
            error, judge = None, f"{exc}; no Python 3.12+ on the PATH to judge it by the records' grammar"
        except SyntaxError as failed:
            return Verdict(
                "packed_script",
                True,
                f"cannot judge under {exc}: {what} fails its grammar at line {failed.lineno} ({failed.msg}), and the "
                "records ran Python 3.12+, whose grammar is wider; put python3.12 on the PATH to judge it",
                checked=False,
            )
    if error:
        return Verdict("packed_script", False, f"{what} is not valid Python ({judge}): {error}")
    if not s.packed:
        return Verdict("packed_script", True, f"{what} is plain Python (not packed) and compiles ({judge})")
    unpacked = s.code.encode("utf-8")
    return Verdict(
        "packed_script",
        True,
        f"{s.script_path.name} ({len(s.script):,} bytes) unpacks to {len(unpacked):,} bytes of Python that compiles "
        f"({judge})",
    )


def check_readable_copy(s: Submission) -> Verdict:
    """Ours: the train_gpt_human.py our maker writes beside a packed script is that code, byte for byte."""
    human = s.folder / R.HUMAN_COPY
    if not s.packed or s.code is None:
        return Verdict("readable_copy", True, "train_gpt.py is not packed: it is its own readable copy", OURS)
    if not human.is_file():
        return Verdict("readable_copy", True, f"no {R.HUMAN_COPY} beside the packed script", OURS)
    unpacked = s.code.encode("utf-8")
    if (readable := human.read_bytes()) != unpacked:
        return Verdict(
            "readable_copy",
            False,
            f"{R.HUMAN_COPY} ({len(readable):,} bytes) is not the code packed in train_gpt.py ({len(unpacked):,} bytes; "
            f"they differ from line {first_difference(readable, unpacked)}): the readable copy is not the code that ran",
            OURS,
        )
    return Verdict("readable_copy", True, f"{R.HUMAN_COPY} is the packed code, byte for byte", OURS)


def check_size(s: Submission) -> Verdict:
    """Code bytes as shipped (the folder's script and the modules of the folder it imports) + each log's compressed
    model bytes <= 16,000,000. Where a log states no model bytes, its own total stands."""
    code = " + ".join(f"{p.name} {p.stat().st_size:,}" for p in s.code_files) or "no train_gpt.py"
    problems, totals, notes = [], [], []
    for log in s.logs:
        total = s.total_bytes(log)
        if total is None and log.total_bytes is not None:
            total = log.total_bytes
            notes.append(
                (
                    log.name,
                    f"its own total {total:,} (the folder's code and the log's model bytes are not both at hand)",
                )
            )
        if total is None:
            problems.append(f"{log.name}: no compressed model size in the log")
            continue
        totals.append(total)
        counted, how = s.counted_code(log)
        if how:
            notes.append((log.name, how))
        if total > R.LIMIT_BYTES:
            shown = f"{counted:,} + {log.model_bytes:,} = " if s.total_bytes(log) is not None else ""
            problems.append(f"{log.name}: {shown}{total:,} bytes > {R.LIMIT_BYTES:,}")
        elif log.total_bytes is not None and log.total_bytes > R.LIMIT_BYTES and not how:
            notes.append(
                (
                    log.name,
                    f"its own size line says {log.total_bytes:,} bytes, over the limit, counting {log.code_bytes or 0:,} code bytes; the folder ships {s.code_bytes:,}",
                )
            )
    note = f"; {grouped(notes)}" if notes else ""
    if problems or not totals:
        return Verdict("size", False, f"code: {code} bytes; " + ("; ".join(problems) or "no logs") + note)
    return Verdict(
        "size",
        True,
        f"code: {code} bytes (recomputed from the folder); code + model per log: "
        f"{', '.join(f'{t:,}' for t in totals)} bytes, the largest {max(totals):,} <= {R.LIMIT_BYTES:,}{note}",
    )


def check_sizes_agree(s: Submission) -> Verdict:
    """Ours: the code bytes each log's size line counted are the folder's (the run shipped what it measured)."""
    if s.code_bytes is None:
        return Verdict("sizes_agree", False, "no train_gpt.py", OURS)
    stated = [log for log in s.logs if log.code_bytes is not None]
    differ = [
        (
            log.name,
            f"its size line counts {log.code_bytes:,} code bytes, the folder's code is {s.code_bytes:,} ({s.code_bytes - log.code_bytes:+,})",
        )
        for log in stated
        if log.code_bytes != s.code_bytes
    ]
    if differ:
        return Verdict("sizes_agree", False, grouped(differ), OURS)
    if not stated:
        return Verdict("sizes_agree", True, "no log states its code bytes: nothing to compare", OURS)
    return Verdict("sizes_agree", True, f"{len(stated)} log(s) counted the folder's {s.code_bytes:,} code bytes", OURS)


# A trainer reads its clock between steps: it stops on the first check past the limit, inside the step in flight or
# the next. The challenge's own baseline stopped at 600.038 s; the accepted records end up to 0.137 s past 600 s
# (2026-03-25: 1.55 of its 88.4 ms steps, 1.58 of its 86.8 ms step_avg). Training may end this many steps past the limit.
CLOCK_STEPS = 2
# A step there is the pace of the log's closing interval, at most STEP_AVG_MARGIN times the run's mean step (its
# step_avg, else train_time / steps): a closing pace runs up to 1.33 times the mean in the accepted records
# (2026-03-18 FP16Embed: 58.2 against 43.8 ms), while a last train_time stretched by hand or by a stall is no step.
STEP_AVG_MARGIN = 1.5


def step_ms(log: R.RunLog) -> float | None:
    """The run's step time at its end: its closing interval's, bounded by its mean step."""
    closing, mean = log.closing_step_ms, log.mean_step_ms
    return min(closing, STEP_AVG_MARGIN * mean) if closing and mean else closing


def check_time(s: Submission, rule: str, limit_ms: float, what: str) -> Verdict:
    """Training: the last train_time before the artifact, allowed the step that crossed the limit (a trainer checks its
    clock between steps: the challenge's own baseline stopped at 600.038 s); GPTQ after it is noted (the maintainers
    accepted records whose training + GPTQ passed 600 s; `ours: time_with_gptq` holds it to 600 s). Evaluation: the
    eval_time after the artifact (the log's own total_eval_time where it states one)."""
    required = s.track == R.RECORD_TRACK
    problems, found, notes = [], [], []
    for log in s.logs:
        ms, part = (log.train_ms, "") if rule == "train_time" else (log.eval_ms, "")
        if ms is None:
            problems.append(f"{log.name}: no {what} in the log")
            continue
        step = step_ms(log) if rule == "train_time" else None
        allowed = limit_ms + CLOCK_STEPS * (step or 0)
        if step:
            if limit_ms < ms <= allowed:
                part = f" (past {limit_ms / 1000:.0f} s by {(ms - limit_ms) / 1000:.3f} s, {(ms - limit_ms) / step:.2f} of its {step:.1f} ms steps)"
        if rule == "train_time" and log.gptq_ms and ms + log.gptq_ms > limit_ms:
            notes.append(
                (
                    log.name,
                    f"training + GPTQ {seconds(ms)} + {seconds(log.gptq_ms)} = {seconds(ms + log.gptq_ms)}, past {limit_ms / 1000:.0f} s by {(ms + log.gptq_ms - limit_ms) / 1000:.3f} s, as records the maintainers accepted",
                )
            )
        if ms > allowed:
            steps = f" + {CLOCK_STEPS} of its {step:.1f} ms steps" if step else ""
            problems.append(f"{log.name}: {seconds(ms)} > {limit_ms / 1000:.0f} s{steps}")
        else:
            found.append(f"{log.name}: {seconds(ms)}{part}")
    note = f"; note: {grouped(notes)}" if notes else ""
    if not required:
        return Verdict(rule, True, f"track {s.track} has no time limit; " + "; ".join(problems + found) + note)
    if problems or not s.logs:
        return Verdict(rule, False, ("; ".join(problems) or "no logs") + note)
    return Verdict(rule, True, "; ".join(found) + f" (limit {limit_ms / 1000:.0f} s){note}")


def check_train_time(s: Submission) -> Verdict:
    return check_time(s, "train_time", R.TRAIN_LIMIT_MS, "train_time before the artifact")


def check_eval_time(s: Submission) -> Verdict:
    return check_time(s, "eval_time", R.EVAL_LIMIT_MS, "eval_time after the artifact line")


def check_time_with_gptq(s: Submission) -> Verdict:
    """Ours: training + GPTQ <= 600 s, the organizers' ruling that GPTQ calibration counts as training (issue #677)."""
    if s.track != R.RECORD_TRACK:
        return Verdict("time_with_gptq", True, f"track {s.track} has no time limit", OURS)
    problems, found = [], []
    for log in s.logs:
        if log.train_ms is None:
            problems.append(f"{log.name}: no train_time")
            continue
        total = log.train_ms + log.gptq_ms
        part = f"{seconds(log.train_ms)} + GPTQ {seconds(log.gptq_ms)} = " if log.gptq_ms else ""
        allowed = R.TRAIN_LIMIT_MS + CLOCK_STEPS * (step_ms(log) or 0)  # the clock's steps, as train_time allows
        (problems if total > allowed else found).append(f"{log.name}: {part}{seconds(total)}")
    if problems or not s.logs:
        return Verdict(
            "time_with_gptq", False, "training + GPTQ over 600 s: " + ("; ".join(problems) or "no logs"), OURS
        )
    return Verdict("time_with_gptq", True, "; ".join(found) + " (limit 600 s, + the clock's steps)", OURS)


def differing_settings(first: R.RunLog, log: R.RunLog) -> list[str]:
    """The settings in which two logs' configs differ, leaving out those that name the run (R.NOT_CONFIG):
    what exact_config notes, and what make_submission.py refuses before it makes a folder."""
    keys = (set(first.config) | set(log.config)) - R.NOT_CONFIG
    return sorted(k for k in keys if not R.same_setting(k, first.config.get(k), log.config.get(k)))


def setting_names_the_run(first: R.RunLog, log: R.RunLog, key: str) -> bool:
    """A setting two runs of one config may differ in: a path (where each machine keeps its data, each run its files:
    the validation text is compared by significance) or each run's own seed (the ternary record's `s:7`)."""
    a, b = first.config.get(key), log.config.get(key)
    paths = any(isinstance(v, str) and "/" in v for v in (a, b))
    return paths or (str(a) == str(first.seed) and str(b) == str(log.seed))


def config_differences(first: R.RunLog, log: R.RunLog) -> tuple[list[str], list[str]]:
    """(the settings both logs state with other values, the settings only one of them states), leaving out those that
    name the run (R.NOT_CONFIG, paths, the seed itself)."""
    keys = sorted((set(first.config) | set(log.config)) - R.NOT_CONFIG)
    one_sided = [k for k in keys if (k in first.config) != (k in log.config)]
    differ = [
        k
        for k in keys
        if k not in one_sided
        and not R.same_setting(k, first.config[k], log.config[k])
        and not setting_names_the_run(first, log, k)
    ]
    return differ, one_sided


def check_same_config(s: Submission) -> Verdict:
    """The challenge: the seeds are runs of one submission, so "enough run logs to show" an improvement are logs of one
    config. Every setting two logs both state has one value, apart from the seed, the run's names and paths. A setting
    only some logs state (their scripts differed) is noted: the script rule judges scripts where the logs hold them."""
    rule = "same_config"
    logs = [log for log in s.logs if log.config]
    if len(logs) < 2:
        said = "one log states its config" if logs else "no log states its config"
        return Verdict(rule, True, f"cannot be checked: {said}, nothing to compare", checked=False)
    first, problems, one_sided, unlike = logs[0], [], {}, []
    for log in logs[1:]:
        if log.config_source != first.config_source:
            unlike.append(log.name)
            continue
        differ, only = config_differences(first, log)
        if differ:
            shown = ", ".join(f"{k}={log.config[k]!r} (not {first.config[k]!r})" for k in differ[:6])
            problems.append(
                f"{log.name} (seed {log.seed}) ran another config than {first.name} (seed {first.seed}): {shown}"
            )
        for key in only:
            one_sided.setdefault(key, []).append(log.name)
    notes = []
    if unlike:
        notes.append(f"{', '.join(unlike)}: its config is logged in another format than {first.name}'s, not compared")
    if one_sided:
        notes.append(f"settings only some logs state (their scripts differed), not compared: {', '.join(one_sided)}")
    note = "".join(f"; {n}" for n in notes)
    if problems:
        return Verdict(rule, False, "; ".join(problems) + note)
    compared = len(logs) - len(unlike)
    if compared < 2:
        return Verdict(rule, True, f"cannot be checked: no two logs state their config alike{note}", checked=False)
    return Verdict(
        rule,
        True,
        f"{compared} logs ran one config: every setting they state alike apart from the seed, the run's names and "
        f"paths, read from the {first.config_source}{note}",
    )


def check_exact_config(s: Submission) -> Verdict:
    """Ours: every log's config is the same apart from the seed and R.NOT_CONFIG, paths included, each seed once."""
    if not s.logs:
        return Verdict("exact_config", False, "no logs", OURS)
    problems = [f"{log.name}: no config in the log" for log in s.logs if not log.config]
    problems += [f"{log.name}: no seed in its config" for log in s.logs if log.config and log.seed is None]
    seeds = [log.seed for log in s.logs if log.seed is not None]
    problems += [f"seed {seed} ran {seeds.count(seed)} times" for seed in sorted(set(seeds)) if seeds.count(seed) > 1]
    first = s.logs[0]
    keys = set(first.config) - R.NOT_CONFIG
    for log in s.logs[1:]:
        if log.config_source != first.config_source:
            problems.append(f"{log.name}: its config is a {log.config_source}, {first.name}'s a {first.config_source}")
            continue
        differ = differing_settings(first, log)
        if differ:
            shown = ", ".join(f"{k}={log.config.get(k)!r} (not {first.config.get(k)!r})" for k in differ[:6])
            problems.append(f"{log.name} differs from {first.name} in {len(differ)} setting(s): {shown}")
    if problems:
        return Verdict("exact_config", False, "; ".join(problems), OURS)
    if len(s.logs) == 1:
        return Verdict("exact_config", True, f"one log (seed {seeds[0]}): nothing to compare", OURS)
    return Verdict(
        "exact_config",
        True,
        f"{len(s.logs)} logs, seeds {', '.join(map(str, seeds))}: the same "
        f"{len(keys)} settings apart from the seed, read from the {first.config_source}",
        OURS,
    )


def check_world_size(s: Submission) -> Verdict:
    """The challenge's 8xH100, as far as the published logs show it: world_size 8 where a log states it. (Only ours
    name the GPU: `ours: hardware` checks for H100s.)"""
    if s.track != R.RECORD_TRACK:
        return Verdict("world_size", True, f"track {s.track} has no hardware rule")
    wrong = [(log.name, f"world_size {log.world_size}, not 8") for log in s.logs if log.world_size not in (8, None)]
    unstated = [log.name for log in s.logs if log.world_size is None]
    stated = len(s.logs) - len(unstated)
    note = f"; {', '.join(unstated)}: no world_size in the log" if unstated else ""
    if wrong or not s.logs:
        return Verdict("world_size", False, (grouped(wrong) or "no logs") + note)
    if not stated:
        return Verdict("world_size", True, "no log states its world_size" + note, checked=False)
    return Verdict("world_size", True, f"{stated} log(s) ran world_size 8" + note)


def check_hardware(s: Submission) -> Verdict:
    required = s.track == R.RECORD_TRACK
    problems, found = [], []
    for log in s.logs:
        gpus = sorted(set(log.gpus))
        found.append((log.name, f"world_size {log.world_size} on {', '.join(gpus) or 'a GPU the log does not name'}"))
        if log.world_size != 8:
            problems.append(
                (log.name, "no world_size logged" if log.world_size is None else f"world_size {log.world_size}, not 8")
            )
        if not gpus:
            problems.append((log.name, "the log names no GPU"))
        elif any("H100" not in g for g in gpus):
            problems.append((log.name, f"{', '.join(gpus)}, not H100"))
    if not required:
        return Verdict("hardware", True, f"track {s.track} has no hardware rule; " + grouped(found), OURS)
    if problems or not s.logs:
        return Verdict("hardware", False, grouped(problems) or "no logs", OURS)
    return Verdict("hardware", True, "8xH100: " + grouped(found), OURS)


NUMBER = (int, Decimal)
FIELDS = {
    "author": str,
    "github_id": str,
    "name": str,
    "blurb": str,
    "date": str,
    "track": str,
    "val_loss": NUMBER,
    "val_bpb": NUMBER,
    "val_bpb_std": NUMBER + (type(None),),
    "seeds": list,
    "seed_results": dict,
    "hardware": str,
    "pytorch_version": str,
    "bytes_total": int,
    "bytes_code": int,
}
SEED_FIELDS = {"val_loss": NUMBER, "val_bpb": NUMBER, "artifact_bytes": int, "steps": int}


# The challenge asks submission.json for "your name, GitHub ID, val_bpb, and related metadata" (its README,
# "Submission Process"): a non-empty author and github_id, and val_bpb as a number.
CHALLENGE_FIELDS = {"author": str, "github_id": str, "val_bpb": NUMBER}


def check_challenge_fields(s: Submission) -> Verdict:
    j = s.submission
    if not isinstance(j, dict):
        return Verdict("submission_fields", False, s.submission_error or "submission.json is not a JSON object")
    name = s.submission_path.name
    missing = [k for k in CHALLENGE_FIELDS if k not in j]
    wrong = [
        f"{k} is {type(j[k]).__name__}"
        for k, kind in CHALLENGE_FIELDS.items()
        if k in j and (not isinstance(j[k], kind) or isinstance(j[k], bool))
    ]
    wrong += [f"{k} is empty" for k in ("author", "github_id") if isinstance(j.get(k), str) and not j[k].strip()]
    if missing or wrong:
        near = sorted(k for k in j if any(w in k for w in ("bpb", "name", "author", "github")))
        said = "; ".join(([f"no {', '.join(missing)}"] if missing else []) + wrong)
        return Verdict("submission_fields", False, f"{name}: {said}" + (f" (it has {', '.join(near)})" if near else ""))
    return Verdict(
        "submission_fields",
        True,
        f"{name}: author {j['author']!r}, github_id {j['github_id']!r}, val_bpb {j['val_bpb']} and {len(j) - 3} more field(s)",
    )


def check_submission_fields(s: Submission) -> Verdict:
    """Ours: every field our maker writes, with the published types."""
    j = s.submission
    if j is None:
        return Verdict("our_fields", False, s.submission_error, OURS)
    if not isinstance(j, dict):
        return Verdict("our_fields", False, "submission.json is not a JSON object", OURS)
    missing = [k for k in FIELDS if k not in j]
    wrong = [
        f"{k} is {type(j[k]).__name__}"
        for k, kind in FIELDS.items()
        if k in j and (not isinstance(j[k], kind) or isinstance(j[k], bool))
    ]
    wrong += [
        f"{k} is empty" for k in ("author", "github_id", "name") if isinstance(j.get(k), str) and not j[k].strip()
    ]
    if isinstance(j.get("date"), str) and not re.match(r"\d{4}-\d{2}-\d{2}", j["date"]):
        wrong.append(f"date {j['date']!r} is not YYYY-MM-DD")
    if isinstance(j.get("track"), str) and j["track"].removeprefix("track_") not in R.TRACKS:
        wrong.append(f"track {j['track']!r} is not one of {', '.join(R.TRACKS)}")
    parent = s.folder.resolve().parent.name
    if (
        parent.startswith("track_")
        and isinstance(j.get("track"), str)
        and j["track"].removeprefix("track_") != parent.removeprefix("track_")
    ):
        wrong.append(f"track {j['track']!r} but the folder is under {parent}/")
    if isinstance(j.get("seeds"), list) and not all(isinstance(x, int) and not isinstance(x, bool) for x in j["seeds"]):
        wrong.append("seeds are not all integers")
    for seed, result in (j.get("seed_results") or {}).items() if isinstance(j.get("seed_results"), dict) else []:
        if not isinstance(result, dict):
            wrong.append(f"seed_results[{seed}] is not an object")
            continue
        wrong += [f"seed_results[{seed}] lacks {k}" for k in SEED_FIELDS if k not in result]
        wrong += [
            f"seed_results[{seed}].{k} is {type(result[k]).__name__}"
            for k, kind in SEED_FIELDS.items()
            if k in result and (not isinstance(result[k], kind) or isinstance(result[k], bool))
        ]
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + wrong
    if problems:
        return Verdict("our_fields", False, "; ".join(problems), OURS)
    return Verdict("our_fields", True, f"all {len(FIELDS)} fields, with the published types", OURS)


# The fewest decimals of a score (val_loss, val_bpb) in submission.json. The score lines give 8; the published
# records round them to 5 (2026-04-05: 1.08563, 1.08554), make_submission.py writes all 8. Fewer lets a
# rounding hide differences between entries: 4.9 and 5.0 both "agree" with a mean of 4.9596 to one decimal.
SCORE_DECIMALS = 5


def close(written, actual: float, units_in_last_place: float, places: int | None = None) -> bool:
    """A value agrees with `actual` to within this many units of its last place: its last written decimal, or
    the `places`-th where given (JSON drops trailing zeros: 1.08100 is written 1.081)."""
    places = R.decimals(written) if places is None else places
    return abs(float(written) - actual) <= units_in_last_place * 10.0**-places + 1e-12


def is_number(value) -> bool:
    return isinstance(value, NUMBER) and not isinstance(value, bool)


def rounds_from(written, values: list[float], places: int) -> tuple[bool, float]:
    """(whether `written` is the mean of `values` rounded to `places` decimals, or the mean of the values each rounded
    first, as the 2026-04-05 record made 1.08563 of a mean of 1.0856248; the mean)."""
    mean = sum(values) / len(values)
    mean_of_rounded = sum(round(v, places) for v in values) / len(values)
    return close(written, mean, 0.5, places) or close(written, mean_of_rounded, 0.5, places), mean


# The fewest decimals the challenge's val_bpb is compared to: the published records write 4 (2026-03-23: 1.1194) to 8.
# Rounded to 4 the value moves by 0.00005 at most, far under the 0.002 bpb or so the 0.005-nat margin is worth.
CHALLENGE_DECIMALS = 4


def claimed_seeds(j: dict) -> tuple[int, str] | None:
    """How many seeds submission.json says its scores come from, and where it says so (None: it does not say)."""
    counts = [(len(j[k]), k) for k in ("seeds", "seed_results") if isinstance(j.get(k), (list, dict))]
    counts += [(j["n_seeds"], "n_seeds")] if isinstance(j.get("n_seeds"), int) else []
    return max(counts, default=None)


def check_submission_scores(s: Submission) -> Verdict:
    """The challenge: submission.json's val_bpb is the logs' (the leaderboard shows it), and the runs it claims are in
    the folder ("enough run logs to show" the improvement). val_bpb agrees when it is the mean of the runs' scores, or
    one run's score (the 2026-03 records wrote their best or first seed's), to its written decimals (at least 4)."""
    rule, j = "submission_scores", s.submission
    if not isinstance(j, dict) or not is_number(j.get("val_bpb")):
        return Verdict(rule, True, "no val_bpb to compare (submission_fields judges the json)", checked=False)
    runs = [run for run in s.runs if run.log.val_bpb is not None]
    if not runs:
        return Verdict(rule, True, "no log has a score to compare with (final_line judges the logs)", checked=False)
    problems, written = [], j["val_bpb"]
    seeds = ", ".join(str(run.seed) for run in runs)
    claimed = claimed_seeds(j)
    if claimed and claimed[0] > len(runs):
        problems.append(
            f"{s.submission_path.name} claims {claimed[0]} seeds (its {claimed[1]}), the folder's logs hold "
            f"{len(runs)} run(s) (seeds {seeds})"
        )
    places = max(R.decimals(written), CHALLENGE_DECIMALS)
    is_mean, mean = rounds_from(written, [run.log.val_bpb for run in runs], places)
    one_run = [log for log in s.logs if log.val_bpb is not None and close(written, log.val_bpb, 0.5, places)]
    if is_mean:
        said = f"val_bpb {written} is the mean of the {len(runs)} run(s) (seeds {seeds}): {mean:.8f}"
    elif one_run:
        said = f"val_bpb {written} is {one_run[0].name}'s score (the mean of the {len(runs)} run(s) is {mean:.8f})"
    else:
        shown = ", ".join(f"{run.log.name} {run.log.val_bpb}" for run in runs)
        said = (
            f"val_bpb {written} but the logs say otherwise: the mean of the {len(runs)} run(s) is {mean:.8f} ({shown})"
        )
        problems.append(said)
    merged = f"; {merged_runs(s.runs)}" if merged_runs(s.runs) else ""
    return Verdict(rule, not problems, ("; ".join(problems) if problems else said) + merged)


@dataclass
class Tally:
    """What submission.json's values agree and disagree with in the logs, value by value."""

    agreed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def equal(self, name: str, written, actual, said: str) -> None:
        if written == actual:
            self.agreed.append(name)
        else:
            self.problems.append(f"{name} {written} but {said}")

    def within(self, name: str, written, actual: float, ulp: float, what: str) -> None:
        if not is_number(written):
            return
        if close(written, actual, ulp):
            self.agreed.append(name)
        else:
            self.problems.append(f"{name} {written} but {what} {actual:.8f}")

    def score(self, name: str, written, values: list[float], what: str) -> None:
        """A score has at least SCORE_DECIMALS decimals and is the logs' value (or their mean) rounded to them."""
        if not is_number(written):
            return
        places = max(R.decimals(written), SCORE_DECIMALS)
        agrees, actual = rounds_from(written, values, places)
        if agrees:
            self.agreed.append(name)
            return
        few = R.decimals(written) < SCORE_DECIMALS
        rule = f"at least {SCORE_DECIMALS} decimals" if few else f"{places} decimals as written"
        self.problems.append(
            f"{name} {written} but {what} {actual:.8f}: expected {actual:.{places}f} ({rule}, rounded from the logs)"
        )


def tally_scores(tally: Tally, j: dict, runs: list[R.RunLog]) -> None:
    """The means and the standard deviation over the runs (one log a seed)."""
    for key in ("val_loss", "val_bpb"):
        tally.score(key, j.get(key), [getattr(log, key) for log in runs], f"the mean of the {len(runs)} run(s) is")
    if len(runs) >= 2:
        std = R.mean_std([log.val_bpb for log in runs])[1]
        tally.within("val_bpb_std", j.get("val_bpb_std"), std, 1.0, "the logs' sample standard deviation is")
    elif j.get("val_bpb_std") is not None:
        tally.problems.append(f"val_bpb_std {j['val_bpb_std']} but one log has no standard deviation (write null)")


def tally_seeds(tally: Tally, j: dict, s: Submission, scored: list[R.RunLog]) -> None:
    """The seeds, and each seed's values in seed_results against its logs."""
    logged_seeds = sorted(log.seed for log in scored if log.seed is not None)
    if isinstance(j.get("seeds"), list):
        tally.equal("seeds", sorted(j["seeds"]), logged_seeds, f"the logs ran {logged_seeds}")
    results = j.get("seed_results") if isinstance(j.get("seed_results"), dict) else {}
    if results and sorted(results) != sorted(str(x) for x in logged_seeds):
        tally.problems.append(f"seed_results has seeds {sorted(results)}, the logs {logged_seeds}")
    for log in scored:
        result = results.get(str(log.seed))
        if not isinstance(result, dict):
            continue
        for key in ("val_loss", "val_bpb"):
            tally.score(f"seed_results[{log.seed}].{key}", result.get(key), [getattr(log, key)], f"{log.name} says")
        for key, actual in (("artifact_bytes", s.total_bytes(log)), ("steps", log.steps)):
            if key in result and actual is not None:
                tally.equal(f"seed_results[{log.seed}].{key}", result[key], actual, f"{log.name} gives {actual}")


def tally_bytes(tally: Tally, j: dict, s: Submission, scored: list[R.RunLog]) -> None:
    """bytes_code against the folder; bytes_total against the largest (or, as 2026-04-05 wrote, the mean) total."""
    if isinstance(j.get("bytes_code"), int) and s.code_bytes is not None:
        tally.equal("bytes_code", j["bytes_code"], s.code_bytes, f"the folder's code is {s.code_bytes} bytes")
    totals = [t for t in (s.total_bytes(log) for log in scored) if t is not None]
    if not (isinstance(j.get("bytes_total"), int) and totals):
        return
    largest, mean = max(totals), round(sum(totals) / len(totals))
    if j["bytes_total"] in (largest, mean):
        tally.agreed.append(
            f"bytes_total ({'the largest' if j['bytes_total'] == largest else 'the mean'} of the logs')"
        )
    else:
        tally.problems.append(
            f"bytes_total {j['bytes_total']} but the logs' code + model totals are {totals} (largest {largest}, mean {mean})"
        )


def tally_machine(tally: Tally, j: dict, scored: list[R.RunLog]) -> None:
    """hardware (world size x GPU model) and pytorch_version against what the logs ran on."""
    worlds = {log.world_size for log in scored}
    models = {m for log in scored for g in log.gpus for m in re.findall(r"\b[A-Z]+\d{2,4}\b", g)}
    if isinstance(j.get("hardware"), str) and worlds and models:
        hw = j["hardware"]
        if all(hw.startswith(f"{w}x") for w in worlds) and all(m in hw for m in models):
            tally.agreed.append("hardware")
        else:
            tally.problems.append(f"hardware {hw!r} but the logs ran world_size {sorted(worlds)} on {sorted(models)}")
    versions = {log.torch_version for log in scored if log.torch_version}
    if isinstance(j.get("pytorch_version"), str) and versions:
        said = f"the logs ran {sorted(versions)}"
        tally.equal("pytorch_version", {j["pytorch_version"]}, versions, said)


def check_submission_matches_logs(s: Submission) -> Verdict:
    """Ours: every number in submission.json agrees with the logs to its written precision (scores: 5 decimals)."""
    rule, j = "submission_matches_logs", s.submission
    if not isinstance(j, dict):
        return Verdict(rule, False, s.submission_error or "submission.json is not an object", OURS)
    scored = [log for log in s.logs if log.val_bpb is not None]
    if not scored:
        return Verdict(rule, False, "no log has a score to compare with", OURS)
    tally = Tally()
    tally_scores(tally, j, [run.log for run in s.runs if run.log.val_bpb is not None])
    tally_seeds(tally, j, s, scored)
    tally_bytes(tally, j, s, scored)
    tally_machine(tally, j, scored)
    if tally.problems:
        return Verdict(rule, False, "; ".join(tally.problems), OURS)
    per_seed = [a for a in tally.agreed if a.startswith("seed_results[")]
    shown = [a for a in tally.agreed if a not in per_seed] + (
        [f"{len(per_seed)} seed_results values"] if per_seed else []
    )
    return Verdict(rule, True, f"{len(tally.agreed)} values agree with the logs: " + ", ".join(shown), OURS)


@dataclass
class Scores:
    """One side's per-run scores for the significance test; val_loss None where the side gives only val_bpb."""

    loss: list[float] | None
    bpb: list[float]
    source: str
    logs: list[R.RunLog]


def numbers(values) -> bool:
    return all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values)


def reference_scores(folder: Path) -> Scores:
    """A record's per-run scores: its submission.json's seed_results where every entry has val_loss and val_bpb, else
    its logs' score lines, else its submission.json's per-seed or single val_bpb (and val_loss where it has one).
    Also its logs (for its vocabulary, validation tokens and byte convention)."""
    j, _ = R.read_submission(folder)
    j = j if isinstance(j, dict) else {}
    logs = R.complete_with_rescores([R.read_log(p) for p in R.log_paths(folder)]) if folder.is_dir() else []
    logs = R.claim_reevaluations(R.claim_scores(logs, j), R.reevaluation_paths(folder), j)
    results = j.get("seed_results") if isinstance(j.get("seed_results"), dict) else {}
    entries = [r for r in results.values() if isinstance(r, dict)]
    name = R.submission_path(folder).name if R.submission_path(folder) else "submission.json"
    if entries and all(numbers([r.get("val_loss"), r.get("val_bpb")]) for r in entries):
        loss, bpb = [float(r["val_loss"]) for r in entries], [float(r["val_bpb"]) for r in entries]
        return Scores(loss, bpb, f"per-seed values of its {name}", logs)
    scored = [run.log for run in runs_of(logs, j) if run.log.val_loss is not None]  # one score a run
    if scored:
        return Scores(
            [log.val_loss for log in scored], [log.val_bpb for log in scored], "score lines of its logs", logs
        )
    if entries and all(numbers([r.get("val_bpb")]) for r in entries):
        return Scores(None, [float(r["val_bpb"]) for r in entries], f"per-seed val_bpb of its {name}", logs)
    if numbers([j.get("val_bpb")]) and "val_bpb" in j:
        loss = [float(j["val_loss"])] if numbers([j.get("val_loss")]) and "val_loss" in j else None
        return Scores(loss, [float(j["val_bpb"])], f"val_bpb of its {name}", logs)
    raise ValueError(f"{folder.name} has no per-seed scores, no scored logs and no val_bpb in its submission.json")


# Two submissions' scores compare only on the same validation text. The logs say how many tokens a run scored (the
# split cut to whole sequences: runs of one split with other sequence lengths differ by less than the longer
# sequence) and, through each score, the tokens per byte of the scored text (val_bpb * ln 2 / val_loss: set by the
# text and the tokenizer, the same for every seed). Another split moves both: the 2026-03-17 baseline scored
# 63,779,840 tokens at 0.409450 tokens per byte, the records after it 62,021,632 at 0.410521 (0.26% more).
# Tokens / (tokens per byte) is the bytes scored, whatever the tokenizer: 151.08 million for every published split of
# the 2026-03-19 records on (sp1024 at 0.410521, sp8192 at 0.268339, CaseOps' sp8192 with byte sidecars of the
# original text at 0.316740), 155.77 million for the baseline's. Where the tokenizations differ (other vocabularies,
# CaseOps) but the bytes agree, the two are compared in val_bpb. TOKENS_PER_BYTE_TOLERANCE covers the rounding of
# the scores (8 decimals in the logs, at least 5 in submission.json); cutting to whole sequences of T tokens drops
# fewer than T tokens, which moves a count by about T / tokens at most.
TOKENS_PER_BYTE_TOLERANCE = 1e-4  # relative
# What a run's bpb divided by (train_gpt.py logs it as val_bytes:KIND): "tokenizer" (its pieces), "sidecar" (byte
# sidecars counting the text as the tokenizer normalizes it, this project's convention) or "sidecar_raw" (sidecars
# counting the original document's UTF-8 bytes, the records' CaseOps convention); sidecars are named by sha256.
VAL_BYTES = re.compile(r"(?:^|\s)val_bytes:(\S+)")
VAL_BYTES_SHA256 = re.compile(r"(?:^|\s)val_bytes_sha256:(\S+)")


def bytes_counted(log: R.RunLog) -> str | None:
    """ "tokenizer", "sidecar sha256 H[,H...]" or "sidecar_raw ...": what the log's bpb divides by; None where the log
    does not say (the published records)."""
    _, body = R.split_head(log.path.read_text(encoding="utf-8", errors="replace"))
    source, digest = VAL_BYTES.search(body), VAL_BYTES_SHA256.search(body)
    if source is None:
        return None
    return source.group(1) + (f" sha256 {digest.group(1)}" if digest else "")


@dataclass
class ScoredText:
    """What one side's logs and scores say about the validation text it was scored on."""

    tokens: list[int]  # val_tokens of each log that gives it
    seq_len: int  # the longest sequence its logs cut the split to; 0 where none says
    tokens_per_byte: float  # the mean over its scores; NaN where it has no val_loss
    tokenizers: list[str]  # the tokenizer file names its logs give
    val_bytes: list[str]  # bytes_counted of its logs that say it
    vocab_sizes: list[int] = field(default_factory=list)
    unstated: int = 0  # logs that do not say what bpb divides by

    @classmethod
    def of(cls, logs: list[R.RunLog], losses: list[float] | None, bpbs: list[float]) -> ScoredText:
        pairs = zip(losses or [], bpbs)
        ratios = [R.tokens_per_byte(loss, bpb) for loss, bpb in pairs if loss > 0 and math.isfinite(bpb)]
        counted = [bytes_counted(log) for log in logs]
        return cls(
            tokens=sorted({log.val_tokens for log in logs if log.val_tokens is not None}),
            seq_len=max((log.val_seq_len or 0 for log in logs), default=0),
            tokens_per_byte=sum(ratios) / len(ratios) if ratios else math.nan,
            tokenizers=sorted({log.tokenizer for log in logs if log.tokenizer}),
            val_bytes=sorted({b for b in counted if b is not None}),
            vocab_sizes=sorted({log.vocab_size for log in logs if log.vocab_size}),
            unstated=sum(b is None for b in counted),
        )

    @property
    def scored_bytes(self) -> list[float]:
        """The bytes each token count stands for: tokens / (tokens per byte)."""
        if not math.isfinite(self.tokens_per_byte):
            return []
        return [n / self.tokens_per_byte for n in self.tokens]

    def convention(self) -> str:
        """What bpb divides by, as the logs say it ("not stated" where none does)."""
        stated = " / ".join(self.val_bytes)
        if not stated:
            return "not stated"
        return stated + (f" ({self.unstated} log(s) not stated)" if self.unstated else "")


def tolerance(ours: ScoredText, ref: ScoredText) -> float:
    allowed = TOKENS_PER_BYTE_TOLERANCE
    longest = max(ours.seq_len, ref.seq_len)
    if longest and ours.tokens and ref.tokens:
        allowed += 2 * longest / min(ours.tokens + ref.tokens)
    return allowed


def validation_differences(ours: ScoredText, ref: ScoredText, name: str) -> tuple[list[str], str]:
    """(what differs between the scored texts and tokenizations of two submissions, what agrees): from what both give."""
    differ, agree = [], []
    longest = max(ours.seq_len, ref.seq_len)
    if ours.tokens and ref.tokens:
        gap = max(abs(a - b) for a in ours.tokens for b in ref.tokens)
        shown = f"{'/'.join(f'{n:,}' for n in ours.tokens)} tokens here, {'/'.join(f'{n:,}' for n in ref.tokens)}"
        if gap >= max(longest, 1):
            limit = (
                f"more than one {longest}-token sequence apart" if longest else "the sequence lengths are not logged"
            )
            differ.append(f"{shown} in {name} ({limit})")
        else:
            agree.append(f"{shown} in {name}")
    if math.isfinite(ours.tokens_per_byte) and math.isfinite(ref.tokens_per_byte):
        shown = f"{ours.tokens_per_byte:.6f} tokens per byte here, {ref.tokens_per_byte:.6f} in {name}"
        if abs(ours.tokens_per_byte / ref.tokens_per_byte - 1) > tolerance(ours, ref):
            differ.append(f"{shown} (val_bpb * ln 2 / val_loss, which the text and the tokenizer set)")
        else:
            agree.append(shown)
    if ours.val_bytes and ref.val_bytes:  # a sidecar run's bytes are its sidecars': the same files, or other bytes
        shown = f"bpb's bytes from the {' / '.join(ours.val_bytes)} here, the {' / '.join(ref.val_bytes)} in {name}"
        (agree if ours.val_bytes == ref.val_bytes else differ).append(shown)
    if differ and ours.tokenizers and ref.tokenizers and ours.tokenizers != ref.tokenizers:
        differ.append(f"tokenizer {', '.join(ours.tokenizers)} here, {', '.join(ref.tokenizers)} in {name}")
    return differ, "; ".join(agree)


def other_sidecars(ours: ScoredText, ref: ScoredText) -> bool:
    """Both name sidecars of one kind by sha256, and the files differ: other bytes, whatever else agrees."""
    kinds = {b.split()[0] for b in ours.val_bytes} | {b.split()[0] for b in ref.val_bytes}
    return bool(ours.val_bytes and ref.val_bytes) and len(kinds) == 1 and ours.val_bytes != ref.val_bytes


def same_bytes(ours: ScoredText, ref: ScoredText, name: str) -> tuple[bool | None, str]:
    """Whether both were scored on the same number of bytes (None: a side gives no tokens or no tokens per byte)."""
    a, b = ours.scored_bytes, ref.scored_bytes
    if not a or not b:
        return None, "the bytes scored are not known on both sides (tokens and tokens per byte)"
    gap = max(abs(x / y - 1) for x in a for y in b)
    shown = f"{'/'.join(f'{x:,.0f}' for x in a)} bytes scored here, {'/'.join(f'{y:,.0f}' for y in b)} in {name}"
    return gap <= tolerance(ours, ref), shown + " (tokens scored × val_loss / (val_bpb · ln 2))"


def conventions(ours: ScoredText, ref: ScoredText, name: str) -> str:
    said = f"bpb divides by: {ours.convention()} here, {ref.convention()} in {name}"
    kinds = ({b.split()[0] for b in ours.val_bytes}, {b.split()[0] for b in ref.val_bytes})
    if all(kinds) and kinds[0] != kinds[1]:
        said += " (the byte conventions differ)"
    return said


def check_significance(s: Submission, against: Path | None) -> tuple[Verdict, R.Improvement | None]:
    if against is None:
        if s.track != R.RECORD_TRACK:
            return Verdict("significance", True, f"track {s.track}: no record to beat"), None
        return Verdict(
            "significance",
            True,
            f"not checked: a record must beat the current one by {R.MARGIN_NATS} nats at p < {R.P_MAX}: "
            "give --against RECORD_FOLDER to test it",
            checked=False,
        ), None
    try:
        ref = reference_scores(against)
    except ValueError as exc:
        return Verdict("significance", False, str(exc)), None
    scored = [run.log for run in s.runs if run.log.val_loss is not None]  # a seed is a run: one score each
    ours_loss, ours_bpb = [log.val_loss for log in scored], [log.val_bpb for log in scored]
    ours_text, ref_text = ScoredText.of(scored, ours_loss, ours_bpb), ScoredText.of(ref.logs, ref.loss, ref.bpb)
    bpb_note = f"val_bpb {R.mean_std(ours_bpb)[0] if scored else math.nan:.5f} vs {R.mean_std(ref.bpb)[0]:.5f}"
    convention = conventions(ours_text, ref_text, against.name)
    differ, same_text = validation_differences(ours_text, ref_text, against.name)
    vocabs = (ours_text.vocab_sizes, ref_text.vocab_sizes)
    if all(vocabs) and vocabs[0] != vocabs[1]:
        shown = ", ".join(map(str, vocabs[0])), ", ".join(map(str, vocabs[1]))
        differ.insert(0, f"the vocabularies differ ({shown[0]} here, {shown[1]} in {against.name})")
    if not differ and ref.loss is not None:  # one tokenization of one text: the 0.005 nats per token, as written
        try:
            r = R.improvement_test(ours_loss, ref.loss)
        except ValueError as exc:
            return Verdict("significance", False, f"{exc}; {bpb_note}; {convention}"), None
        unit, compared, scope = "nats", "val_loss", "the same validation set"
    else:
        agree, bytes_said = same_bytes(ours_text, ref_text, against.name)
        if other_sidecars(ours_text, ref_text) or not agree:
            if differ or other_sidecars(ours_text, ref_text):
                why = "; ".join(differ + ([bytes_said] if agree is not True else []))
                said = f"the two were scored on different validation sets: {why}"
            else:  # nothing differs, but the record gives no val_loss and its logs no tokens per byte
                said = (
                    f"the two cannot be compared: {against.name} gives val_bpb only, and no log with its tokens per "
                    "byte: neither its val_loss nor the bytes it scored are known"
                )
            return Verdict(
                "significance",
                False,
                f"{said}. Scores compare only on the same validation text (in val_loss with the same tokenizer, in "
                f"val_bpb on the same bytes); {bpb_note}; {convention}",
            ), None
        tokens_per_byte = ref_text.tokens_per_byte
        # 0.005 nats per token of the record's tokenization, in bits per byte of the same text
        scale = tokens_per_byte / math.log(2)
        try:
            r = R.improvement_test(ours_bpb, ref.bpb, R.MARGIN_NATS * scale)
        except ValueError as exc:
            return Verdict("significance", False, f"{exc}; {bpb_note}; {convention}"), None
        unit, compared, scope = "bpb", "val_bpb", "compared in val_bpb"
        same_text = (
            f"the tokenizations differ ({'; '.join(differ)}), the text is the same: {bytes_said}; the margin, "
            f"{R.MARGIN_NATS} nats per token at {against.name}'s {tokens_per_byte:.6f} tokens per byte, "
            f"is {R.MARGIN_NATS * scale:.5f} bpb"
        )
    ref_shown = f"{r.ref_mean:.5f}" + (f" ± {r.ref_std:.5f}" if r.ref_std is not None else "")
    verdict = "clears" if r.clears else "does not clear"
    if math.isfinite(r.t):
        statistic = f"{r.method} of improvement > {r.margin:.5f}: t={r.t:.3f} df={r.df:.2f} one-sided p={r.p:.4g}"
    else:  # every run on both sides gave the same value: nothing to test, the improvement is exact
        statistic = f"no t-test: every run here and in {against.name} scored the same {compared} (no spread), so the improvement is exact"
    merged = f" ({merged_runs(s.runs)})" if merged_runs(s.runs) else ""
    evidence = (
        f"{compared} {r.mean:.5f} ± {r.std:.5f} ({r.n} seeds{merged}) vs {against.name} {ref_shown} ({r.ref_n} run(s), "
        f"from the {ref.source}): improvement {r.improvement:.5f} {unit}; {statistic}: {verdict} {R.MARGIN_NATS} nats "
        f"at p < {R.P_MAX}; {bpb_note}; {convention}; {scope}: {same_text}"
    )
    return Verdict("significance", r.clears, evidence), r


CHALLENGE_RULES = [
    check_files,
    check_final_line,
    check_packed_script,
    check_size,
    check_train_time,
    check_eval_time,
    check_world_size,
    check_challenge_fields,
    check_submission_scores,
    check_script_matches_logs,
    check_same_config,
]
OUR_RULES = [
    check_script_in_logs,
    check_readable_copy,
    check_sizes_agree,
    check_other_code,
    check_time_with_gptq,
    check_exact_config,
    check_hardware,
    check_submission_fields,
    check_submission_matches_logs,
]


def check(folder: Path, against: Path | None = None) -> tuple[list[Verdict], dict]:
    """Every rule's verdict (the challenge's, significance, then ours), and the whole report as a JSON-able dict."""
    s = load(folder)
    verdicts = [rule(s) for rule in CHALLENGE_RULES]
    significance, test = check_significance(s, against)
    verdicts.append(significance)
    verdicts += [rule(s) for rule in OUR_RULES]
    runs = [
        dict(
            log=str(log.path.relative_to(folder)),
            seed=log.seed,
            score_label=log.score_label,
            val_loss=log.val_loss,
            val_bpb=log.val_bpb,
            steps=log.steps,
            train_ms=log.train_ms,
            gptq_ms=log.gptq_ms,
            eval_ms=log.eval_ms,
            code_bytes=log.code_bytes,
            model_bytes=log.model_bytes,
            total_bytes=s.total_bytes(log),
            world_size=log.world_size,
            gpus=sorted(set(log.gpus)),
            val_bytes=bytes_counted(log) or "not stated",
        )
        for log in s.logs
    ]
    challenge_ok = all(v.ok for v in verdicts if v.tier == CHALLENGE)
    report = dict(
        folder=str(folder),
        track=s.track,
        track_note=s.track_note,
        verdict="pass" if challenge_ok else "fail",
        strict_verdict="pass" if all(v.ok for v in verdicts) else "fail",
        rules=[dict(rule=v.rule, tier=v.tier, status=v.status(), evidence=v.evidence) for v in verdicts],
        runs=runs,
        significance=None if test is None else finite(asdict(test) | {"clears": test.clears}),
    )
    return verdicts, report


def finite(values: dict) -> dict:
    """JSON has no NaN or infinity (a t-test of identical runs has an infinite t and no df): null instead."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}


def verdict_line(verdicts: list[Verdict], strict: bool) -> str:
    rules = [v for v in verdicts if v.tier == CHALLENGE]
    failed = [v.rule for v in rules if not v.ok]
    unchecked = [v.rule for v in rules if not v.checked]
    ours = [v for v in verdicts if v.tier == OURS]
    noted = [v.rule for v in ours if not v.ok]
    if failed:
        said = f"FAIL: {len(failed)} of {len(rules)} challenge rules fail ({', '.join(failed)})"
    else:
        said = f"pass: {len(rules) - len(unchecked)} of {len(rules)} challenge rules pass"
        said += f" ({', '.join(unchecked)} not checked)" if unchecked else ""
    if strict and noted:
        said = ("FAIL: " + said.removeprefix("FAIL: ").removeprefix("pass: ")) if not failed else said
        return said + f"; --strict: {len(noted)} of {len(ours)} of ours fail ({', '.join(noted)})"
    if noted:
        return said + f"; ours: {len(noted)} of {len(ours)} noted ({', '.join(noted)}), failing only with --strict"
    return said + f"; ours: all {len(ours)} pass"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="the submission folder")
    parser.add_argument("--against", type=Path, help="the current record's folder: run the significance test")
    parser.add_argument("--strict", action="store_true", help="ours: notes fail too (this project's reproducibility)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    for folder in [args.folder] + ([args.against] if args.against else []):
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    verdicts, report = check(args.folder, args.against)
    passed = report["strict_verdict" if args.strict else "verdict"] == "pass"
    if args.json:
        for rule, v in zip(report["rules"], verdicts):
            rule["status"] = v.status(args.strict)
        print(json.dumps(report | {"strict": args.strict}, indent=2))
    else:
        print(f"{args.folder} (track {report['track']}, {report['track_note']}; {len(report['runs'])} log(s))")
        for v in verdicts:
            name = v.rule if v.tier == CHALLENGE else f"ours: {v.rule}"
            print(f"{name:<29} {v.status(args.strict):<11} {v.evidence}")
        print("verdict: " + verdict_line(verdicts, args.strict))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
