"""What the record tools share: reading run logs (ours and the published formats), reading a submission
folder, packing a script, and the statistics of the significance test.

Used by make_submission.py, check_submission.py and plot_runs.py beside it; nothing runs at import.
records/README.md says what a submission folder holds and what each rule checks.
"""

from __future__ import annotations

import ast
import base64
import json
import lzma
import math
import os
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

# =================================================================================================
# The challenge's limits
# =================================================================================================

LIMIT_BYTES = 16_000_000  # code bytes + compressed model bytes, decimal
TRAIN_LIMIT_MS = 600_000  # training, GPTQ included, on 8xH100
EVAL_LIMIT_MS = 600_000  # evaluation of the artifact, after training
MARGIN_NATS = 0.005  # a new record beats the current one by at least this much val_loss...
P_MAX = 0.01  # ...at this one-sided significance
TRACKS = ("10min_16mb", "non_record_16mb")  # records/track_<name>/
RECORD_TRACK = "10min_16mb"
HUMAN_COPY = "train_gpt_human.py"  # beside a packed train_gpt.py: the same code unpacked, to read
README_PLACEHOLDER = "TODO(make_submission.py): what you changed against the current record, and why it helps."
SEPARATOR = "=" * 100  # ends the script source at the head of a log
# Settings that name the run rather than configure it: two seeds of one config differ in these.
NOT_CONFIG = {"seed", "run_id", "log_dir", "artifact_path", "logfile", "rank", "local_rank", "is_main_process"}
# Settings whose values the config already holds resolved: RECIPE's values are in the other settings (a recipe and
# the same values set by hand are one config), DATA_DIR's in DATA_PATH and TOKENIZER_PATH.
RESOLVED_ELSEWHERE = {"recipe", "data_dir"}
PATH_SETTINGS = {"data_path", "tokenizer_path"}  # the same file spelt two ways is one setting (same_path)


def same_path(a, b) -> bool:
    """Two spellings of one path as two runs logged them: ./data/x/ and data/x, or relative and absolute (the
    absolute one ends with the relative one: the runs started in different folders, which the log does not say)."""
    parts_a, parts_b = (Path(os.path.normpath(str(p))).parts for p in (a, b))
    if Path(str(a)).is_absolute() == Path(str(b)).is_absolute():
        return parts_a == parts_b
    short, long = sorted((parts_a, parts_b), key=len)
    return len(short) > 0 and long[len(long) - len(short) :] == short


def same_setting(key: str, a, b) -> bool:
    return key in RESOLVED_ELSEWHERE or a == b or (key in PATH_SETTINGS and None not in (a, b) and same_path(a, b))


# =================================================================================================
# Run logs
# Three formats: ours (train_gpt.py: source, separator, one key:value event per line, config as one
# JSON line), the 2026-03 records (source, separator, nvidia-smi, key:value lines, "Total submission
# size int8+zlib: N bytes") and the 2026-04 records (a Hyperparameters block instead of the source,
# "key: value" with spaces, train_time in minutes, "quantized_sliding_window val_loss:..."). One
# reader for all three: each field has one pattern that matches every format that logs it.
# =================================================================================================

STEP = re.compile(r"(?:^|\s)step:\s*(\d+)/(\d+)|^(\d+)/(\d+)\s")
TRAIN_TIME = re.compile(r"(?:^|\s)train_time:\s*([0-9.]+)(ms|s|m)\b")
STEP_AVG = re.compile(r"(?:^|\s)step_avg:\s*([0-9.]+)ms\b")  # ours and the 2026-03 records: train_time / step
EVAL_TIME = re.compile(r"(?:^|\s)eval_time:\s*([0-9.]+)ms\b")
# The 2026-04-10 records and later state their scoring's time once, excluding the "diagnostic" evaluations that
# score nothing they submit: total_eval_time:500.1s.
TOTAL_EVAL_TIME = re.compile(r"^total_eval_time:\s*([0-9.]+)s\b")
DIAGNOSTIC = re.compile(r"^diagnostic\b", re.IGNORECASE)
GPTQ_TIME = re.compile(r"(?:^|\s)gptq_time:\s*([0-9.]+)ms\b|^GPTQ:collected \d+ Hessians in ([0-9.]+)s")
TRAIN_LOSS = re.compile(r"(?:^|\s)train_loss:\s*(-?[0-9.]+(?:e[-+]?\d+)?|nan|inf)\b")
VAL_BPB = re.compile(r"(?:^|\s)val_bpb:\s*([0-9.]+)")
# The score: the last of these lines. Ours and the 2026-03 records print final_<format>_exact (some records
# final_int6_roundtrip, final_sliding_window_eval_exact stride:64, final_ttt_lora, final_sliding), legal TTT
# legal_ttt_exact, the 2026-04 records quantized, quantized_sliding_window, quantized_ttt, quantized_ttt_lora,
# quantized_ttt_phased. "diagnostic quantized ..." lines are not scores (they do not start the line).
SCORE = re.compile(r"^((?:final|quantized|legal_ttt)\w*)(?: stride:\d+)? val_loss:\s*([0-9.]+) val_bpb:\s*([0-9.]+)")
# A score's rounded twin, printed from the same two numbers just before the exact line: ours log
# `roundtrip_val_loss:5.3505 roundtrip_val_bpb:3.1234 ...` before `final_int8_zlib_roundtrip_exact` (4 decimals against
# 8), the 2026-03 records `final_int8_zlib_roundtrip val_loss:2.0727 val_bpb:1.2244` before `..._roundtrip_exact`.
KIND_SCORE = re.compile(r"^(\w+)_val_loss:([0-9.]+) \1_val_bpb:([0-9.]+)(?:\s|$)")
ARTIFACT = re.compile(r"^artifact:\S|^Total submission size \S+: \d+ bytes|^budget:\d+/")
ARTIFACT_SHA256 = re.compile(r"^artifact:\S+ sha256:([0-9a-f]{64})\b")
MODEL_BYTES = re.compile(r"(?:^|\s)model_bytes:(\d+)|^Serialized model \S+: (\d+) bytes")
# Code bytes: ours, the 2026-03 records' "Code size: N bytes", the 2026-04-13 records' "Code size (compressed)"
# (the packed file that ships; their "(uncompressed)" line is the source inside it), the ternary record's
# "artifact:15.92MB ... code:N" with its "budget:TOTAL/16000000" line.
CODE_BYTES = re.compile(
    r"(?:^|\s)code_bytes:(\d+)|^Code size(?: \(compressed\))?: (\d+) bytes|^artifact:\S+MB .* code:(\d+)$"
)
CODE_BYTES_UNPACKED = re.compile(r"^Code size \(uncompressed\): (\d+) bytes")  # what the compressed size packed
TOTAL_BYTES = re.compile(r"(?:^|\s)total_bytes:(\d+)|^Total submission size \S+: (\d+) bytes|^budget:(\d+)/")
# A clock at the head of every line (the 2026-04-13 record's logs: "1776142360.540 seed: 0"): dropped on reading.
LINE_CLOCK = re.compile(r"^\d{9,10}\.\d+ ", re.MULTILINE)
WORLD_SIZE = re.compile(r"(?:^|\s)world_size:\s*(\d+)")
# The validation tokens a run scores (the split cut to whole sequences): ours and the 2026-04 records log
# val_tokens:N, the 2026-03 records "val_loader:shards pattern=... tokens:N".
VAL_TOKENS = re.compile(r"(?:^|\s)val_tokens:\s*(\d+)|^val_loader:.*\stokens:(\d+)")
TORCH_VERSION = re.compile(r"(?:^|\s)torch:(\S+)|^Running PyTorch (\S+)")
GPU_TOKEN = re.compile(r"(?:^|\s)gpu:(\S+)")
SMI_GPU = re.compile(r"^\|\s+\d+\s+(NVIDIA .*?|Tesla .*?)\s+(?:On|Off)\s+\|")  # a GPU row of nvidia-smi's table
SETTING = re.compile(r"(?:^|\s)([a-z_][a-z0-9_]*)[:=](\S+)")
WARMUP_STEP = re.compile(r"(?:^|\s)warmup_step:\s*\d+/")
FAILURE = re.compile(r"^(?:error|interrupted):")
UNITS_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass
class Point:
    step: int
    value: float
    train_ms: float | None


@dataclass
class RunLog:
    path: Path
    script: str | None  # the source at the head of the log, as the run read it; None: the log has none
    config: dict  # the run's settings as logged (values as logged: JSON values for ours, strings otherwise)
    config_source: str  # where `config` came from, for the evidence
    score_label: str | None = None  # e.g. final_int8_zlib_roundtrip_exact
    val_loss: float | None = None
    val_bpb: float | None = None
    steps: int | None = None  # N of the last step:N/M
    train_ms: float | None = None  # the last train_time before the artifact
    gptq_ms: float = 0.0  # GPTQ after training: counts inside the training limit
    eval_ms: float | None = None  # eval_time summed over the lines after the artifact line
    code_bytes: int | None = None  # as logged
    code_bytes_unpacked: int | None = None  # the source whose packed size code_bytes is, where the log says both
    model_bytes: int | None = None
    total_bytes: int | None = None  # as logged
    gpus: list[str] = field(default_factory=list)
    world_size: int | None = None
    val_tokens: int | None = None  # the validation tokens the score counts
    torch_version: str | None = None
    failure: str | None = None  # an error: or interrupted: line
    artifact_sha256: str | None = None  # ours: the artifact: line's
    rescored_by: Path | None = None  # the EVAL_ONLY log whose score completes this run (complete_with_rescores)
    train_loss: list[Point] = field(default_factory=list)
    scores: list[tuple[str, float, float]] = field(default_factory=list)  # every score line: (label, loss, bpb)
    clock: list[tuple[int, float]] = field(default_factory=list)  # (step, train_time ms) as logged, before the artifact
    claimed_note: str | None = None  # set by claim_scores where the score is not the log's last score line
    source_code: str | None = None  # the 2026-04 records' "Source code:" section: the script, where the head has none
    val_bpb_curve: list[Point] = field(default_factory=list)
    step_avg_ms: float | None = None  # the last step_avg before the artifact, where the log states one
    # (an exact score line's label, its val_loss, val_bpb; its rounded twin's text, val_loss and val_bpb as written)
    score_twins: list[tuple[str, float, float, str, str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def mean_step_ms(self) -> float | None:
        """The run's mean step time: its own step_avg, else its last train_time over its steps."""
        if self.step_avg_ms:
            return self.step_avg_ms
        return self.train_ms / self.steps if self.train_ms and self.steps else None

    @property
    def closing_step_ms(self) -> float | None:
        """The mean step time between the last two train_time points of the log at different steps, in the order logged (a log holding
        two runs, like the 2026-03-19 MixedQuant record's, ends with its last run's): the pace of the step that
        crossed the time limit. The run's mean step where the log has fewer points."""
        if self.clock:
            step_b, ms_b = self.clock[-1]
            earlier = next(((step, ms) for step, ms in reversed(self.clock) if step < step_b), None)
            if earlier is not None:  # the last point of an earlier step (a validation line may repeat a step)
                return (ms_b - earlier[1]) / (step_b - earlier[0])
        return self.train_ms / self.steps if self.train_ms and self.steps else None

    @property
    def seed(self) -> int | None:
        value = self.config.get("seed")
        return int(value) if value is not None and str(value).lstrip("-").isdigit() else None

    @property
    def val_seq_len(self) -> int | None:
        """The sequence length the validation split is cut to: EVAL_SEQ_LEN, else TRAIN_SEQ_LEN (0 or absent: unknown)."""
        for key in ("eval_seq_len", "train_seq_len"):
            value = str(self.config.get(key, ""))
            if value.isdigit() and int(value) > 0:
                return int(value)
        return None

    @property
    def tokenizer(self) -> str | None:
        """The file name of the tokenizer the run used (its folder differs from machine to machine)."""
        path = self.config.get("tokenizer_path")
        return Path(str(path)).name if path else None

    @property
    def vocab_size(self) -> int | None:
        if "vocab_size" in self.config:
            return int(self.config["vocab_size"])
        for value in self.config.values():  # the 2026-03 records log only their dataset's name
            if match := re.search(r"fineweb10B_sp(\d+)", str(value)):
                return int(match.group(1))
        return None


def split_head(text: str) -> tuple[str | None, str]:
    """(the script source a log starts with, the rest). The source is followed by a line of 100 '=' and
    then the versions line; requiring the versions line lets a script hold such a line itself."""
    if text.startswith(SEPARATOR + "\n"):  # the 2026-04 records: the hyperparameters, not the source
        return None, text
    marker = "\n" + SEPARATOR + "\n"
    for match in re.finditer(re.escape(marker), text):
        rest = text[match.end() :]
        if rest.startswith(("python:", "Running Python")):
            return text[: match.start()], rest
    return None, text


SOURCE_SECTION = "\nSource code:\n" + SEPARATOR + "\n"


def logged_source(text: str) -> str | None:
    """The script a 2026-04 record's log holds after its Hyperparameters block ("Source code:", a separator, the
    source, a separator, then the versions line, as split_head requires of ours); None where it holds none."""
    start = text.find(SOURCE_SECTION)
    if start < 0:
        return None
    source, _ = split_head(text[start + len(SOURCE_SECTION) :])
    return source


def read_config(lines: list[str]) -> tuple[dict, str]:
    for line in lines:
        if line.startswith("config:{"):
            return json.loads(line[len("config:") :]), "config:{json} line"
    if "Hyperparameters:" in lines:
        block = lines[lines.index("Hyperparameters:") + 1 :]
        config = {}
        for line in block:
            if not (match := re.fullmatch(r"  (\w+): (.*)", line)):
                break
            config[match.group(1)] = match.group(2)
        return config, "Hyperparameters block"
    config = {}  # the 2026-03 records: the key:value settings lines printed before training starts
    for line in lines:
        if WARMUP_STEP.search(line) or STEP.search(line):
            break
        config.update(SETTING.findall(line))
    return config, "settings lines before training (this format logs only part of its config)"


def read_log(path: str | Path) -> RunLog:
    path = Path(path)
    with open(path, encoding="utf-8", errors="replace", newline="") as f:  # newline="": the bytes' line ends
        text = f.read()
    script, body = split_head(text)
    lines = LINE_CLOCK.sub("", body).splitlines()
    config, source = read_config(lines)
    log = RunLog(path, script, config, source)
    log.source_code = logged_source(body) if script is None else None
    artifact_at = max((i for i, line in enumerate(lines) if ARTIFACT.search(line)), default=None)
    eval_ms, stated_eval_ms, twin = [], None, None
    for i, line in enumerate(lines):
        if FAILURE.match(line):
            log.failure = line
        if match := ARTIFACT_SHA256.match(line):
            log.artifact_sha256 = match.group(1)
        if match := SCORE.match(line):
            log.score_label, log.val_loss, log.val_bpb = match.group(1), float(match.group(2)), float(match.group(3))
            log.scores.append((log.score_label, log.val_loss, log.val_bpb))
            if twin is not None and log.score_label.endswith("_exact") and log.score_label.endswith(twin[0]):
                log.score_twins.append((log.score_label, log.val_loss, log.val_bpb, *twin[1:]))
            said = f"{match.group(1)} val_loss:{match.group(2)} val_bpb:{match.group(3)}"
            twin = (match.group(1) + "_exact", said, match.group(2), match.group(3))
        elif match := KIND_SCORE.match(line):
            said = f"{match.group(1)}_val_loss:{match.group(2)} {match.group(1)}_val_bpb:{match.group(3)}"
            twin = (f"_{match.group(1)}_exact", said, match.group(2), match.group(3))
        step = None
        if match := STEP.search(line):
            step = int(match.group(1) or match.group(3))
            log.steps = step
        time_ms = None
        if match := TRAIN_TIME.search(line):
            time_ms = float(match.group(1)) * UNITS_MS[match.group(2)]
            if artifact_at is None or i < artifact_at:
                log.train_ms = time_ms
                if step is not None:
                    log.clock.append((step, time_ms))
                if match := STEP_AVG.search(line):
                    log.step_avg_ms = float(match.group(1))
        if match := GPTQ_TIME.search(line):
            log.gptq_ms += float(match.group(1)) if match.group(1) else 1000 * float(match.group(2))
        if artifact_at is not None and i > artifact_at and not DIAGNOSTIC.match(line):
            if match := EVAL_TIME.search(line):
                eval_ms.append(float(match.group(1)))
            if match := TOTAL_EVAL_TIME.match(line):
                stated_eval_ms = round(1000 * float(match.group(1)), 3)
        for pattern, name in [(MODEL_BYTES, "model_bytes"), (CODE_BYTES, "code_bytes"), (TOTAL_BYTES, "total_bytes")]:
            if match := pattern.search(line):
                setattr(log, name, int(next(g for g in match.groups() if g is not None)))
        if match := CODE_BYTES_UNPACKED.match(line):
            log.code_bytes_unpacked = int(match.group(1))
        if match := WORLD_SIZE.search(line):
            log.world_size = int(match.group(1))
        if log.val_tokens is None and (match := VAL_TOKENS.search(line)):
            log.val_tokens = int(match.group(1) or match.group(2))
        if match := TORCH_VERSION.search(line):
            log.torch_version = match.group(1) or match.group(2)
        if match := GPU_TOKEN.search(line):  # ours: gpu:NAME (none on a CPU) beside world_size:N
            gpu = match.group(1).replace("_", " ")
            log.gpus = ["CPU" if gpu == "none" else gpu] * (log.world_size or 1)
        if match := SMI_GPU.match(line):
            log.gpus.append(match.group(1).strip())
        if step is not None and (match := TRAIN_LOSS.search(line)):
            log.train_loss.append(Point(step, float(match.group(1)), time_ms))
        elif step is not None and (match := VAL_BPB.search(line)):
            log.val_bpb_curve.append(Point(step, float(match.group(1)), time_ms))
    if artifact_at is not None and eval_ms:
        log.eval_ms = sum(eval_ms)
    if stated_eval_ms is not None:  # the log's own sum, which leaves out its diagnostic evaluations
        log.eval_ms = stated_eval_ms
    if log.model_bytes is None and log.total_bytes is not None and log.code_bytes is not None:
        log.model_bytes = log.total_bytes - log.code_bytes  # the ternary record states code and total only
    # The 2026-04 records log no time on validation lines: take the train line's at the same step.
    times = {p.step: p.train_ms for p in log.train_loss if p.train_ms is not None}
    if log.train_ms is not None and log.steps is not None:
        times.setdefault(log.steps, log.train_ms)
    for point in log.val_bpb_curve:
        if point.train_ms is None:
            point.train_ms = times.get(point.step)
    return log


def claim_scores(logs: list[RunLog], submission: dict | None) -> list[RunLog]:
    """Each log's score is its last score line, unless submission.json gives this seed's val_bpb (seed_results, or the
    one val_bpb of a one-log folder) and another of its score lines is that value: the run scored several ways and the
    submission claims that one (the 2026-04-04 record's seed 42: its sliding-window score, not the TTT after it)."""
    j = submission if isinstance(submission, dict) else {}
    results = j.get("seed_results") if isinstance(j.get("seed_results"), dict) else {}
    claimed = []
    for log in logs:
        entry = results.get(str(log.seed)) if log.seed is not None else None
        written = entry.get("val_bpb") if isinstance(entry, dict) else (j.get("val_bpb") if len(logs) == 1 else None)
        if not isinstance(written, (int, float, Decimal)) or isinstance(written, bool) or len(log.scores) < 2:
            claimed.append(log)
            continue
        places = decimals(written)
        tolerance = 0.5 * 10.0**-places + 1e-12
        matching = [score for score in log.scores if abs(score[2] - float(written)) <= tolerance]
        if not matching or abs(log.val_bpb - float(written)) <= tolerance:
            claimed.append(log)
            continue
        label, loss, bpb = matching[-1]
        note = f"the score submission.json gives ({written}); its last score line is {log.score_label} val_bpb:{log.val_bpb}"
        claimed.append(replace(log, score_label=label, val_loss=loss, val_bpb=bpb, claimed_note=note))
    return claimed


def written_bpb(submission: dict | None, seed: int | None):
    """The val_bpb submission.json's seed_results gives this seed, as written (a Decimal or int); None where none."""
    j = submission if isinstance(submission, dict) else {}
    results = j.get("seed_results") if isinstance(j.get("seed_results"), dict) else {}
    entry = results.get(str(seed)) if seed is not None else None
    written = entry.get("val_bpb") if isinstance(entry, dict) else None
    return written if isinstance(written, (int, Decimal)) and not isinstance(written, bool) else None


def agrees(value: float, written) -> bool:
    """A logged score is a written one rounded to its decimals (within half a unit of its last place)."""
    return abs(value - float(written)) <= 0.5 * 10.0 ** -decimals(written) + 1e-12


def reevaluation_paths(folder: Path) -> list[Path]:
    """Logs in the folder's subfolders other than logs/: the 2026-04-23 record's ttt_pr1767/seed_N.log scored each seed's
    artifact again with a later TTT, and its submission.json gives those scores. They are not runs of their own."""
    if not folder.is_dir():
        return []
    subfolders = [p for p in sorted(folder.iterdir()) if p.is_dir() and p.name != "logs"]
    return [p for sub in subfolders for p in sorted(sub.glob("*.log")) if p.is_file()]


def claim_reevaluations(logs: list[RunLog], reevaluations: list[Path], submission: dict | None) -> list[RunLog]:
    """A run whose submission.json score (seed_results' val_bpb) none of its score lines gives, where a re-evaluation
    of the same seed (a log in a subfolder that trained nothing) gives it: the run takes that score, saying so."""
    rescored = [read_log(p) for p in reevaluations]
    rescored = [r for r in rescored if r.steps is None and r.seed is not None and r.scores]
    claimed = []
    for log in logs:
        written = written_bpb(submission, log.seed)
        if written is None or any(agrees(bpb, written) for _, _, bpb in log.scores):
            claimed.append(log)
            continue
        found = [(r, score) for r in rescored if r.seed == log.seed for score in r.scores if agrees(score[2], written)]
        if not found:
            claimed.append(log)
            continue
        rescore, (label, loss, bpb) = found[-1]
        where = f"{rescore.path.parent.name}/{rescore.name}"
        note = (
            f"the score submission.json gives ({written}), from {where}, which scored this seed's artifact again "
            f"without training; this log's last score line is {log.score_label} val_bpb:{log.val_bpb}"
        )
        eval_ms = rescore.eval_ms if rescore.eval_ms is not None else log.eval_ms
        claimed.append(
            replace(
                log,
                score_label=label,
                val_loss=loss,
                val_bpb=bpb,
                eval_ms=eval_ms,
                claimed_note=note,
                rescored_by=rescore.path,
            )
        )
    return claimed


def complete_with_rescores(logs: list[RunLog]) -> list[RunLog]:
    """A run stopped after its export (its artifact: line is logged, then an error or an interrupt, say while TTT
    scored), completed by the EVAL_ONLY log that scored that same artifact (its sha256) with the same script and
    config: one log with the run's training and the re-score's score and eval_time. The EVAL_ONLY logs so used are
    left out; every other log stays as it is."""
    rescores = {log.artifact_sha256: log for log in logs if is_rescore(log)}
    completed, used = [], set()
    for log in logs:
        rescore = rescores.get(log.artifact_sha256) if log.failure and log.steps is not None else None
        if rescore is not None and rescore.script == log.script and same_config(log, rescore, ignore={"eval_only"}):
            score = dict(score_label=rescore.score_label, val_loss=rescore.val_loss, val_bpb=rescore.val_bpb)
            log = replace(log, **score, eval_ms=rescore.eval_ms, failure=None, rescored_by=rescore.path)
            used.add(rescore.path)
        completed.append(log)
    return [log for log in completed if log.path not in used]


def is_rescore(log: RunLog) -> bool:
    """An EVAL_ONLY run of ours that scored an artifact to the end."""
    return (
        log.config.get("eval_only") is True
        and bool(log.artifact_sha256)
        and log.val_bpb is not None
        and not log.failure
    )


def same_config(a: RunLog, b: RunLog, ignore: set[str] = frozenset()) -> bool:
    keys = (set(a.config) | set(b.config)) - NOT_CONFIG - ignore
    return all(same_setting(k, a.config.get(k), b.config.get(k)) for k in keys)


def log_paths(folder: Path) -> list[Path]:
    """The logs in a submission folder: *.log (what make_submission.py writes) and *.txt (train_gpt.py's
    own name for them), but not requirements.txt; also those in its logs/ folder (the 2026-04-10 records)."""
    found = [
        p
        for where in (folder, folder / "logs")
        if where.is_dir()
        for p in where.iterdir()
        if p.is_file() and (p.suffix == ".log" or (p.suffix == ".txt" and not p.name.startswith("requirements")))
    ]
    return sorted(found, key=lambda p: [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", p.name)])


def submission_path(folder: Path) -> Path | None:
    """submission.json, else the folder's one submission*.json (the 2026-03-24 record's submission_ternary.json)."""
    if (folder / "submission.json").is_file():
        return folder / "submission.json"
    found = sorted(folder.glob("submission*.json")) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def read_submission(folder: Path) -> tuple[dict | None, str | None]:
    """submission.json with numbers as Decimal (their written precision is what a value is checked to)."""
    path = submission_path(folder)
    if path is None:
        return None, "no submission.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal), None
    except json.JSONDecodeError as exc:
        return None, f"submission.json is not valid JSON: {exc}"


def decimals(value) -> int:
    """Digits after the point as written: 1.08554 -> 5."""
    exponent = Decimal(str(value)).as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


# =================================================================================================
# Packing
# The records ship train_gpt.py as lzma + base85 + exec (the 2026-04-05 record: 15,516 bytes of code
# instead of ~50 KB), so more of the 16,000,000 bytes go to weights. The wrapper runs the code as
# __main__, with the wrapper's own __file__ (so the log's head is the shipped file and code_bytes its
# size). Triton reads a kernel's source through inspect.getsource, which finds nothing for code made
# from a string: the wrapper registers the source in linecache under the name it compiles it with.
# =================================================================================================

LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]  # raw: no container header
PACKED_TEMPLATE = """\
# train_gpt_human.py, packed (lzma + base85); linecache lets inspect (Triton) read the unpacked source
import lzma,base64,linecache
_source=lzma.decompress(base64.b85decode("{data}"),format=lzma.FORMAT_RAW,filters=[{{"id":lzma.FILTER_LZMA2}}]).decode()
_name=__file__+":unpacked"
linecache.cache[_name]=(len(_source),None,_source.splitlines(True),_name)
exec(compile(_source,_name,"exec"))
"""
PACKED_DATA = re.compile(r"""b85decode\(\s*["']([0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]{1000,})["']\s*\)""")


class PackError(ValueError):
    """A script that looks packed but does not unpack."""


def pack_script(source: str) -> str:
    data = lzma.compress(source.encode("utf-8"), format=lzma.FORMAT_RAW, filters=LZMA_FILTERS)
    return PACKED_TEMPLATE.format(data=base64.b85encode(data).decode("ascii"))


def unpack_script(text: str) -> str | None:
    """The source inside a packed script (ours or the records' raw-LZMA2 wrappers); None if not packed."""
    match = PACKED_DATA.search(text)
    if match is None:
        return None
    data = base64.b85decode(match.group(1))
    for kwargs in (dict(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2}]), dict(format=lzma.FORMAT_AUTO)):
        try:
            return lzma.decompress(data, **kwargs).decode("utf-8")
        except (lzma.LZMAError, UnicodeDecodeError):
            continue
    raise PackError("its base85 data is neither raw LZMA2 nor an xz/lzma stream of UTF-8 text")


# An import statement: at a line's start, or after a ":" or ";" on it (the records' packed code writes
# "if h.ngram_tilt_enabled:from ngram_tilt import NgramTiltState;...").
IMPORT_LINE = re.compile(
    r"(?:^|[:;])[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import\b|import[ \t]+(\w+)((?:[ \t]*,[ \t]*[\w.]+)*))", re.M
)


# A .py file named in a string of the code: the 2026-04-06 HessianSDClip record's train_gpt.py is
# exec(open(__file__.replace("train_gpt.py","train_gpt_decode.py")).read()), its code in train_gpt_decode.py.
NAMED_PY = re.compile(r"""["'](?:[^"'\s]*/)?(\w+\.py)["']""")


def local_modules(code: str, folder: Path) -> list[Path]:
    """Files in `folder` that `code` imports (module.py, or every .py of package/) or names in a string (a file it
    reads and runs): they are code too."""
    try:
        tree = ast.parse(code)
        names = {
            alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    except SyntaxError:  # code of a newer Python's grammar (3.12 f-strings under 3.11): its import lines, read as text
        names = {m.group(1) or m.group(2) for m in IMPORT_LINE.finditer(code)}
        names |= {
            n.strip().split(".")[0] for m in IMPORT_LINE.finditer(code) if m.group(3) for n in m.group(3).split(",")
        }
        names.discard(None)
    found = []
    for name in sorted(names):
        if (folder / f"{name}.py").is_file() and name != "train_gpt":
            found.append(folder / f"{name}.py")
        elif (folder / name / "__init__.py").is_file():
            found.extend(sorted((folder / name).rglob("*.py")))
    for name in sorted(set(NAMED_PY.findall(code)) - {"train_gpt.py", HUMAN_COPY}):  # a file it reads to run
        if (folder / name).is_file() and folder / name not in found:
            found.append(folder / name)
    return found


def run_modules(code: str, folder: Path) -> list[Path]:
    """local_modules of `code`, then of each module found, until none is new: a module the script imports may import
    another of the folder's, which runs with it and counts as well."""
    found, queue = [], local_modules(code, folder)
    while queue:
        path = queue.pop(0)
        if path not in found:
            found.append(path)
            queue += local_modules(path.read_text(encoding="utf-8", errors="replace"), folder)
    return found


# =================================================================================================
# Statistics
# A one-sided t-test of "the new runs beat the record by more than MARGIN_NATS". No scipy: Student's
# t tail through the regularized incomplete beta function, by its continued fraction (Numerical
# Recipes 6.4, modified Lentz), which converges fast for x < (a+1)/(a+b+2) and by symmetry otherwise.
# =================================================================================================


def betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * beta_continued_fraction(a, b, x) / a
    return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b


def beta_continued_fraction(a: float, b: float, x: float, eps: float = 1e-15, max_terms: int = 1000) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, max_terms + 1):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even term, then the odd
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < eps:
            return result
    raise ArithmeticError(f"incomplete beta continued fraction did not converge for a={a}, b={b}, x={x}")


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom (df may be fractional, as Welch's is)."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def tokens_per_byte(val_loss: float, val_bpb: float) -> float:
    """Tokens per byte of the scored validation text, from a score: val_bpb = val_loss / ln 2 * tokens / bytes.
    The text and the tokenizer fix it, not the model: every seed of a record gives the same (0.2683389 for the
    2026-04 records' sp8192 FineWeb split, 0.4105208 for the published sp1024 one)."""
    return val_bpb * math.log(2) / val_loss


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1); None for one value."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


@dataclass
class Improvement:
    n: int
    mean: float
    std: float
    ref_n: int
    ref_mean: float
    ref_std: float | None
    improvement: float  # ref_mean - mean: positive is better
    t: float
    df: float
    p: float  # one-sided: P(improvement this large | the true improvement is only `margin`)
    margin: float
    method: str

    @property
    def clears(self) -> bool:
        return self.improvement > self.margin and self.p < P_MAX


def improvement_test(new: list[float], reference: list[float], margin: float = MARGIN_NATS) -> Improvement:
    """One-sided test of mean(reference) - mean(new) > margin, lower is better. Welch's t-test when the
    reference has two or more runs; against the reference's single value as a constant otherwise."""
    if len(new) < 2:
        raise ValueError(f"{len(new)} run: a t-test needs at least 2 seeds (usually 3) to measure the spread")
    mean, std = mean_std(new)
    ref_mean, ref_std = mean_std(reference)
    improvement = ref_mean - mean
    if ref_std is None:
        se2, df, method = std**2 / len(new), len(new) - 1.0, "one-sample t-test (the record has one run)"
    else:
        a, b = std**2 / len(new), ref_std**2 / len(reference)
        se2, method = a + b, "Welch's t-test"
        df = se2**2 / (a**2 / (len(new) - 1) + b**2 / (len(reference) - 1)) if se2 > 0 else math.nan
    if se2 > 0:
        t = (improvement - margin) / math.sqrt(se2)
        p = t_sf(t, df)
    else:  # every run gave the same value: the improvement is exact, no test needed
        t = math.inf if improvement > margin else -math.inf
        p = 0.0 if improvement > margin else 1.0
    return Improvement(len(new), mean, std, len(reference), ref_mean, ref_std, improvement, t, df, p, margin, method)
