"""Check a submission folder against the challenge's rules: one verdict line per rule (its name, pass or
FAIL, the evidence read from the folder), then the overall verdict. Exit code 0 only when every rule passes.

  python3 records/check_submission.py records/track_10min_16mb/2026-11-23_MyChange
  python3 records/check_submission.py FOLDER --against records/track_10min_16mb/2026-04-05_...  # the t-test
  python3 records/check_submission.py FOLDER --json                                             # as JSON

It reads our logs (train_gpt.py's) fully and the published records' two older formats far enough to
check their scores, sizes and times. records/README.md lists the rules and what the published folders get.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path

import recordlib as R


@dataclass
class Verdict:
    rule: str
    ok: bool
    evidence: str


@dataclass
class Submission:
    """A folder as the rules see it: its files, parsed once."""

    folder: Path
    track: str
    track_note: str  # how the track was decided
    script: bytes | None  # train_gpt.py as shipped
    code: str | None  # the code that runs: the unpacked source of a packed train_gpt.py
    packed: bool
    pack_error: str | None
    code_files: list[Path]  # train_gpt.py and the folder's modules it imports
    logs: list[R.RunLog]
    submission: dict | None
    submission_error: str | None

    @property
    def code_bytes(self) -> int | None:
        return sum(p.stat().st_size for p in self.code_files) if self.script is not None else None

    def total_bytes(self, log: R.RunLog) -> int | None:
        if self.code_bytes is None or log.model_bytes is None:
            return None
        return self.code_bytes + log.model_bytes


def load(folder: Path) -> Submission:
    script_path = folder / "train_gpt.py"
    script = script_path.read_bytes() if script_path.is_file() else None
    code, packed, pack_error = None, False, None
    if script is not None:
        text = script.decode("utf-8", errors="replace")
        try:
            unpacked = R.unpack_script(text)
            code, packed = (unpacked, True) if unpacked is not None else (text, False)
        except R.PackError as exc:
            packed, pack_error = True, str(exc)
    code_files = [] if script is None else [script_path] + (R.local_modules(code, folder) if code is not None else [])
    submission, submission_error = R.read_submission(folder)
    track, note = find_track(folder, submission)
    logs = R.complete_with_rescores([R.read_log(p) for p in R.log_paths(folder)])  # a run stopped while scoring
    return Submission(
        folder, track, note, script, code, packed, pack_error, code_files, logs, submission, submission_error
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


def check_files(s: Submission) -> Verdict:
    missing = [n for n in ("README.md", "submission.json", "train_gpt.py") if not (s.folder / n).is_file()]
    problems = [f"missing {', '.join(missing)}"] if missing else []
    if not s.logs:
        problems.append("no logs (*.log or train_gpt.py's *.txt)")
    readme = s.folder / "README.md"
    if readme.is_file() and R.README_PLACEHOLDER in readme.read_text(encoding="utf-8", errors="replace"):
        problems.append("README.md still holds the maker's TODO: say what you changed and why it helps")
    if problems:
        return Verdict("files", False, "; ".join(problems))
    names = ", ".join(log.name for log in s.logs)
    return Verdict("files", True, f"README.md, submission.json, train_gpt.py and {len(s.logs)} log(s): {names}")


def check_final_line(s: Submission) -> Verdict:
    problems, found = [], []
    for log in s.logs:
        if log.failure:
            problems.append(f"{log.name}: the run failed: {log.failure[:120]}")
        elif log.val_bpb is None:
            problems.append(f"{log.name}: no final score line (final_<format>_exact val_loss:... val_bpb:...)")
        else:
            found.append(f"{log.name}: {log.score_label} val_loss:{log.val_loss} val_bpb:{log.val_bpb}")
    if not s.logs:
        problems.append("no logs")
    return Verdict("final_line", not problems, "; ".join(problems or found))


def check_script_matches_logs(s: Submission) -> Verdict:
    if s.script is None:
        return Verdict("script_matches_logs", False, "no train_gpt.py")
    problems = []
    for log in s.logs:
        if log.script is None:
            problems.append(
                (log.name, "the log does not hold the script it ran (train_gpt.py logs its own source first)")
            )
            continue
        logged = log.script.encode("utf-8")
        if logged != s.script:
            problems.append(
                (
                    log.name,
                    f"the script in the log differs from train_gpt.py from line "
                    f"{first_difference(logged, s.script)} ({len(logged):,} vs {len(s.script):,} bytes)",
                )
            )
    if problems or not s.logs:
        return Verdict("script_matches_logs", False, grouped(problems) or "no logs")
    return Verdict(
        "script_matches_logs",
        True,
        f"the script at the head of all {len(s.logs)} log(s) is train_gpt.py, byte for byte ({len(s.script):,} bytes)",
    )


def check_packed_script(s: Submission) -> Verdict:
    if s.script is None:
        return Verdict("packed_script", False, "no train_gpt.py")
    if s.pack_error:
        return Verdict("packed_script", False, f"train_gpt.py looks packed but does not unpack: {s.pack_error}")
    try:
        compile(s.code, "train_gpt.py", "exec")
    except SyntaxError as exc:
        what = "the unpacked code" if s.packed else "train_gpt.py"
        return Verdict("packed_script", False, f"{what} is not valid Python: line {exc.lineno}: {exc.msg}")
    if not s.packed:
        return Verdict("packed_script", True, "train_gpt.py is plain Python (not packed) and compiles")
    unpacked = s.code.encode("utf-8")
    evidence = f"train_gpt.py ({len(s.script):,} bytes) unpacks to {len(unpacked):,} bytes of Python that compiles"
    human = s.folder / R.HUMAN_COPY
    if not human.is_file():
        return Verdict("packed_script", True, f"{evidence}; no {R.HUMAN_COPY} beside it")
    if (readable := human.read_bytes()) != unpacked:
        return Verdict(
            "packed_script",
            False,
            f"{evidence}, but {R.HUMAN_COPY} ({len(readable):,} bytes) is not "
            f"that code (they differ from line {first_difference(readable, unpacked)}): the readable "
            "copy is not the code that ran",
        )
    return Verdict("packed_script", True, f"{evidence}; {R.HUMAN_COPY} is that code, byte for byte")


def check_size(s: Submission) -> Verdict:
    if s.script is None:
        return Verdict("size", False, "no train_gpt.py")
    code = " + ".join(f"{p.name} {p.stat().st_size:,}" for p in s.code_files)
    problems, totals = [], []
    for log in s.logs:
        total = s.total_bytes(log)
        if total is None:
            problems.append(f"{log.name}: no compressed model size in the log")
            continue
        totals.append(total)
        if total > R.LIMIT_BYTES:
            problems.append(f"{log.name}: {s.code_bytes:,} + {log.model_bytes:,} = {total:,} bytes > {R.LIMIT_BYTES:,}")
        if log.code_bytes is not None and log.code_bytes != s.code_bytes:
            problems.append(
                f"{log.name}: its size line counts {log.code_bytes:,} code bytes, the folder's code is {s.code_bytes:,}"
            )
    if problems or not totals:
        return Verdict("size", False, f"code: {code} bytes; " + ("; ".join(problems) or "no logs"))
    return Verdict(
        "size",
        True,
        f"code: {code} bytes (recomputed from the folder); code + model per log: "
        f"{', '.join(f'{t:,}' for t in totals)} bytes, the largest {max(totals):,} <= {R.LIMIT_BYTES:,}",
    )


def check_time(s: Submission, rule: str, limit_ms: float, what: str) -> Verdict:
    required = s.track == R.RECORD_TRACK
    problems, found = [], []
    for log in s.logs:
        if rule == "train_time":
            ms, logged = (None if log.train_ms is None else log.train_ms + log.gptq_ms), log.train_ms
            part = f"{seconds(logged)} + GPTQ {seconds(log.gptq_ms)} = " if log.gptq_ms and logged is not None else ""
        else:
            ms, part = log.eval_ms, ""
        if ms is None:
            problems.append(f"{log.name}: no {what} in the log")
        elif ms > limit_ms:
            problems.append(f"{log.name}: {part}{seconds(ms)} > {limit_ms / 1000:.0f} s")
        else:
            found.append(f"{log.name}: {part}{seconds(ms)}")
    if not required:
        note = f"track {s.track} has no time limit; " + "; ".join(problems + found)
        return Verdict(rule, True, note)
    if problems or not s.logs:
        return Verdict(rule, False, "; ".join(problems) or "no logs")
    return Verdict(rule, True, "; ".join(found) + f" (limit {limit_ms / 1000:.0f} s)")


def check_train_time(s: Submission) -> Verdict:
    return check_time(s, "train_time", R.TRAIN_LIMIT_MS, "train_time before the artifact (training + GPTQ)")


def check_eval_time(s: Submission) -> Verdict:
    return check_time(s, "eval_time", R.EVAL_LIMIT_MS, "eval_time after the artifact line")


def differing_settings(first: R.RunLog, log: R.RunLog) -> list[str]:
    """The settings in which two logs' configs differ, leaving out those that name the run (R.NOT_CONFIG):
    what same_config fails on, and what make_submission.py refuses before it makes a folder."""
    keys = (set(first.config) | set(log.config)) - R.NOT_CONFIG
    return sorted(k for k in keys if not R.same_setting(k, first.config.get(k), log.config.get(k)))


def check_same_config(s: Submission) -> Verdict:
    if not s.logs:
        return Verdict("same_config", False, "no logs")
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
        return Verdict("same_config", False, "; ".join(problems))
    if len(s.logs) == 1:
        return Verdict("same_config", True, f"one log (seed {seeds[0]}): nothing to compare")
    return Verdict(
        "same_config",
        True,
        f"{len(s.logs)} logs, seeds {', '.join(map(str, seeds))}: the same "
        f"{len(keys)} settings apart from the seed, read from the {first.config_source}",
    )


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
        return Verdict("hardware", True, f"track {s.track} has no hardware rule; " + grouped(found))
    if problems or not s.logs:
        return Verdict("hardware", False, grouped(problems) or "no logs")
    return Verdict("hardware", True, "8xH100: " + grouped(found))


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


def check_submission_fields(s: Submission) -> Verdict:
    j = s.submission
    if j is None:
        return Verdict("submission_fields", False, s.submission_error)
    if not isinstance(j, dict):
        return Verdict("submission_fields", False, "submission.json is not a JSON object")
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
        return Verdict("submission_fields", False, "; ".join(problems))
    return Verdict("submission_fields", True, f"all {len(FIELDS)} fields, with the published types")


# The fewest decimals of a score (val_loss, val_bpb) in submission.json. The score lines give 8; the published
# records round them to 5 (2026-04-05: 1.08563, 1.08554), make_submission.py writes all 8. Fewer lets a
# rounding hide differences between entries: 4.9 and 5.0 both "agree" with a mean of 4.9596 to one decimal.
SCORE_DECIMALS = 5


def close(written, actual: float, units_in_last_place: float, places: int | None = None) -> bool:
    """A value agrees with `actual` to within this many units of its last place: its last written decimal, or
    the `places`-th where given (JSON drops trailing zeros: 1.08100 is written 1.081)."""
    places = R.decimals(written) if places is None else places
    return abs(float(written) - actual) <= units_in_last_place * 10.0**-places + 1e-12


def check_submission_matches_logs(s: Submission) -> Verdict:
    j = s.submission
    if not isinstance(j, dict):
        return Verdict("submission_matches_logs", False, s.submission_error or "submission.json is not an object")
    scored = [log for log in s.logs if log.val_bpb is not None]
    if not scored:
        return Verdict("submission_matches_logs", False, "no log has a score to compare with")
    problems, agreed = [], []

    def compare(name, written, actual, ulp, what):
        if written is None or isinstance(written, bool) or not isinstance(written, NUMBER):
            return
        if close(written, actual, ulp):
            agreed.append(name)
        else:
            problems.append(f"{name} {written} but {what} {actual:.8f}")

    def compare_score(name, written, values: list[float], what):
        """A score has at least SCORE_DECIMALS decimals and is the logs' value rounded to them: for one value, to
        half a unit of its last place; for a mean, the mean of the values or of the values rounded to that many
        decimals (how the 2026-04-05 record made 1.08563 of a mean of 1.0856248), rounded."""
        if written is None or isinstance(written, bool) or not isinstance(written, NUMBER):
            return
        places = max(R.decimals(written), SCORE_DECIMALS)
        actual = sum(values) / len(values)
        mean_of_rounded = sum(round(v, places) for v in values) / len(values)
        if close(written, actual, 0.5, places) or close(written, mean_of_rounded, 0.5, places):
            agreed.append(name)
            return
        rule = (
            f"at least {SCORE_DECIMALS} decimals"
            if R.decimals(written) < SCORE_DECIMALS
            else f"{places} decimals as written"
        )
        problems.append(
            f"{name} {written} but {what} {actual:.8f}: expected {actual:.{places}f} ({rule}, rounded from the logs)"
        )

    for key in ("val_loss", "val_bpb"):
        compare_score(
            key, j.get(key), [getattr(log, key) for log in scored], f"the mean of the {len(scored)} log(s) is"
        )
    if len(scored) >= 2:
        compare(
            "val_bpb_std",
            j.get("val_bpb_std"),
            R.mean_std([log.val_bpb for log in scored])[1],
            1.0,
            "the logs' sample standard deviation is",
        )
    elif j.get("val_bpb_std") is not None:
        problems.append(f"val_bpb_std {j['val_bpb_std']} but one log has no standard deviation (write null)")
    logged_seeds = sorted(log.seed for log in scored if log.seed is not None)
    if isinstance(j.get("seeds"), list):
        if sorted(j["seeds"]) == logged_seeds:
            agreed.append("seeds")
        else:
            problems.append(f"seeds {j['seeds']} but the logs ran {logged_seeds}")
    results = j.get("seed_results") if isinstance(j.get("seed_results"), dict) else {}
    if results and sorted(results) != sorted(str(x) for x in logged_seeds):
        problems.append(f"seed_results has seeds {sorted(results)}, the logs {logged_seeds}")
    for log in scored:
        result = results.get(str(log.seed))
        if not isinstance(result, dict):
            continue
        for key in ("val_loss", "val_bpb"):
            compare_score(f"seed_results[{log.seed}].{key}", result.get(key), [getattr(log, key)], f"{log.name} says")
        for key, actual in (("artifact_bytes", s.total_bytes(log)), ("steps", log.steps)):
            if key in result and actual is not None:
                (
                    agreed.append(f"seed_results[{log.seed}].{key}")
                    if result[key] == actual
                    else problems.append(f"seed_results[{log.seed}].{key} {result[key]} but {log.name} gives {actual}")
                )
    if isinstance(j.get("bytes_code"), int) and s.code_bytes is not None:
        (
            agreed.append("bytes_code")
            if j["bytes_code"] == s.code_bytes
            else problems.append(f"bytes_code {j['bytes_code']} but the folder's code is {s.code_bytes} bytes")
        )
    totals = [t for t in (s.total_bytes(log) for log in scored) if t is not None]
    if isinstance(j.get("bytes_total"), int) and totals:
        largest, mean = max(totals), round(sum(totals) / len(totals))
        if j["bytes_total"] in (largest, mean):
            which = "the largest" if j["bytes_total"] == largest else "the mean"
            agreed.append(f"bytes_total ({which} of the logs')")
        else:
            problems.append(
                f"bytes_total {j['bytes_total']} but the logs' code + model totals are {totals} "
                f"(largest {largest}, mean {mean})"
            )
    worlds = {log.world_size for log in scored}
    models = {m for log in scored for g in log.gpus for m in re.findall(r"\b[A-Z]+\d{2,4}\b", g)}
    if isinstance(j.get("hardware"), str) and worlds and models:
        hw = j["hardware"]
        if all(hw.startswith(f"{w}x") for w in worlds) and all(m in hw for m in models):
            agreed.append("hardware")
        else:
            problems.append(f"hardware {hw!r} but the logs ran world_size {sorted(worlds)} on {sorted(models)}")
    versions = {log.torch_version for log in scored if log.torch_version}
    if isinstance(j.get("pytorch_version"), str) and versions:
        (
            agreed.append("pytorch_version")
            if versions == {j["pytorch_version"]}
            else problems.append(f"pytorch_version {j['pytorch_version']!r} but the logs ran {sorted(versions)}")
        )
    if problems:
        return Verdict("submission_matches_logs", False, "; ".join(problems))
    per_seed = [a for a in agreed if a.startswith("seed_results[")]
    shown = [a for a in agreed if a not in per_seed] + ([f"{len(per_seed)} seed_results values"] if per_seed else [])
    return Verdict("submission_matches_logs", True, f"{len(agreed)} values agree with the logs: " + ", ".join(shown))


def reference_scores(folder: Path) -> tuple[list[float], list[float], str, list[R.RunLog]]:
    """A record's per-seed val_loss and val_bpb: its submission.json's seed_results, else its logs' score
    lines, else its submission.json's one val_loss. Also its logs (for its vocabulary and validation set)."""
    j, _ = R.read_submission(folder)
    logs = [R.read_log(p) for p in R.log_paths(folder)] if folder.is_dir() else []
    results = j.get("seed_results") if isinstance(j, dict) and isinstance(j.get("seed_results"), dict) else {}
    if results:
        loss = [float(r["val_loss"]) for r in results.values()]
        bpb = [float(r["val_bpb"]) for r in results.values()]
        return loss, bpb, "per-seed values of its submission.json", logs
    scored = [log for log in logs if log.val_loss is not None]
    if scored:
        return [log.val_loss for log in scored], [log.val_bpb for log in scored], "score lines of its logs", logs
    if isinstance(j, dict) and "val_loss" in j:
        return [float(j["val_loss"])], [float(j.get("val_bpb", "nan"))], "val_loss of its submission.json", logs
    raise ValueError(f"{folder} has no per-seed values, no scored logs and no submission.json val_loss")


# Two submissions' scores compare only on the same validation text, tokenized alike. The logs say how many tokens
# a run scored (the split cut to whole sequences: runs of one split with other sequence lengths differ by less
# than the longer sequence) and, through each score, the tokens per byte of the scored text (val_bpb * ln 2 /
# val_loss: set by the text and the tokenizer, the same for every seed). Another split, or another tokenizer of the
# same size, moves both: the 2026-03-17 baseline scored 63,779,840 tokens at 0.409450 tokens per byte, the records
# after it 62,021,632 at 0.410521 (0.26% more). Cutting a split to whole sequences of T tokens drops fewer than T
# tokens, which moves tokens per byte by about T / tokens at most; TOKENS_PER_BYTE_TOLERANCE covers the rounding
# of the scores (8 decimals in the logs, at least 5 in submission.json).
TOKENS_PER_BYTE_TOLERANCE = 1e-4  # relative
# Where a run's bpb took its bytes from (train_gpt.py logs it): "tokenizer" (its pieces), or the byte sidecars beside
# the validation shards (CaseOps data), named by each sidecar's sha256. Two runs compare only on the same bytes.
VAL_BYTES = re.compile(r"(?:^|\s)val_bytes:(\S+)")
VAL_BYTES_SHA256 = re.compile(r"(?:^|\s)val_bytes_sha256:(\S+)")


def bytes_counted(log: R.RunLog) -> str | None:
    """ "tokenizer" or "sidecar sha256 H[,H...]": what the log's bpb divides by; None where the log does not say."""
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
    tokens_per_byte: float  # the mean over its scores
    tokenizers: list[str]  # the tokenizer file names its logs give
    val_bytes: list[str]  # bytes_counted of its logs that say it

    @classmethod
    def of(cls, logs: list[R.RunLog], losses: list[float], bpbs: list[float]) -> ScoredText:
        ratios = [R.tokens_per_byte(loss, bpb) for loss, bpb in zip(losses, bpbs) if loss > 0 and math.isfinite(bpb)]
        return cls(
            tokens=sorted({log.val_tokens for log in logs if log.val_tokens is not None}),
            seq_len=max((log.val_seq_len or 0 for log in logs), default=0),
            tokens_per_byte=sum(ratios) / len(ratios) if ratios else math.nan,
            tokenizers=sorted({log.tokenizer for log in logs if log.tokenizer}),
            val_bytes=sorted({b for log in logs if (b := bytes_counted(log)) is not None}),
        )


def validation_differences(ours: ScoredText, ref: ScoredText, name: str) -> tuple[list[str], str]:
    """(what differs between the validation sets of two submissions, what agrees): from what both logs give."""
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
        allowed = TOKENS_PER_BYTE_TOLERANCE
        if longest and ours.tokens and ref.tokens:
            allowed += 2 * longest / min(ours.tokens + ref.tokens)
        shown = f"{ours.tokens_per_byte:.6f} tokens per byte here, {ref.tokens_per_byte:.6f} in {name}"
        if abs(ours.tokens_per_byte / ref.tokens_per_byte - 1) > allowed:
            differ.append(f"{shown} (val_bpb * ln 2 / val_loss, which the text and the tokenizer set)")
        else:
            agree.append(shown)
    if ours.val_bytes and ref.val_bytes:  # a sidecar run's bytes are its sidecars': the same files, or other bytes
        shown = f"bpb's bytes from the {' / '.join(ours.val_bytes)} here, the {' / '.join(ref.val_bytes)} in {name}"
        (agree if ours.val_bytes == ref.val_bytes else differ).append(shown)
    if differ and ours.tokenizers and ref.tokenizers and ours.tokenizers != ref.tokenizers:
        differ.append(f"tokenizer {', '.join(ours.tokenizers)} here, {', '.join(ref.tokenizers)} in {name}")
    return differ, "; ".join(agree)


def check_significance(s: Submission, against: Path | None) -> tuple[Verdict, R.Improvement | None]:
    if against is None:
        if s.track != R.RECORD_TRACK:
            return Verdict("significance", True, f"track {s.track}: no record to beat"), None
        return Verdict(
            "significance",
            False,
            f"a record must beat the current one by {R.MARGIN_NATS} nats at "
            f"p < {R.P_MAX}: give --against RECORD_FOLDER",
        ), None
    try:
        ref_loss, ref_bpb, source, ref_logs = reference_scores(against)
    except ValueError as exc:
        return Verdict("significance", False, str(exc)), None
    scored = [log for log in s.logs if log.val_loss is not None]
    vocabs = {log.vocab_size for log in scored} - {None}
    ref_vocab = next((log.vocab_size for log in ref_logs if log.vocab_size), None)
    bpb_mean = R.mean_std([log.val_bpb for log in scored])[0] if scored else float("nan")
    bpb_note = f"val_bpb {bpb_mean:.5f} vs {R.mean_std(ref_bpb)[0]:.5f}"
    if ref_vocab and vocabs and vocabs != {ref_vocab}:
        ours = ", ".join(map(str, sorted(vocabs)))
        return Verdict(
            "significance",
            False,
            f"val_loss is nats per token and the vocabularies differ ({ours} here, "
            f"{ref_vocab} in {against.name}): the losses are not comparable; {bpb_note}",
        ), None
    differ, same_text = validation_differences(
        ScoredText.of(scored, [log.val_loss for log in scored], [log.val_bpb for log in scored]),
        ScoredText.of(ref_logs, ref_loss, ref_bpb),
        against.name,
    )
    if differ:
        return Verdict(
            "significance",
            False,
            f"the two were scored on different validation sets: {'; '.join(differ)}. Scores compare only on the "
            f"same validation text and tokenizer: score yours on the record's; {bpb_note}",
        ), None
    try:
        r = R.improvement_test([log.val_loss for log in scored], ref_loss)
    except ValueError as exc:
        return Verdict("significance", False, str(exc)), None
    ref = f"{r.ref_mean:.5f}" + (f" ± {r.ref_std:.5f}" if r.ref_std is not None else "")
    verdict = "clears" if r.clears else "does not clear"
    evidence = (
        f"val_loss {r.mean:.5f} ± {r.std:.5f} ({r.n} seeds) vs {against.name} {ref} ({r.ref_n} run(s), "
        f"from the {source}): improvement {r.improvement:.5f} nats; {r.method} of improvement > {r.margin}: "
        f"t={r.t:.3f} df={r.df:.2f} one-sided p={r.p:.4g}: {verdict} {r.margin} nats at p < {R.P_MAX}; "
        f"{bpb_note}; the same validation set: {same_text}"
    )
    return Verdict("significance", r.clears, evidence), r


RULES = [
    check_files,
    check_final_line,
    check_script_matches_logs,
    check_packed_script,
    check_size,
    check_train_time,
    check_eval_time,
    check_same_config,
    check_hardware,
    check_submission_fields,
    check_submission_matches_logs,
]


def check(folder: Path, against: Path | None = None) -> tuple[list[Verdict], dict]:
    """Every rule's verdict, and the whole report as a JSON-able dict."""
    s = load(folder)
    verdicts = [rule(s) for rule in RULES]
    significance, test = check_significance(s, against)
    verdicts.append(significance)
    runs = [
        dict(
            log=log.name,
            seed=log.seed,
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
        )
        for log in s.logs
    ]
    report = dict(
        folder=str(folder),
        track=s.track,
        track_note=s.track_note,
        verdict="pass" if all(v.ok for v in verdicts) else "fail",
        rules=[dict(rule=v.rule, status="pass" if v.ok else "fail", evidence=v.evidence) for v in verdicts],
        runs=runs,
        significance=None if test is None else finite(asdict(test) | {"clears": test.clears}),
    )
    return verdicts, report


def finite(values: dict) -> dict:
    """JSON has no NaN or infinity (a t-test of identical runs has an infinite t and no df): null instead."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="the submission folder")
    parser.add_argument("--against", type=Path, help="the current record's folder: run the significance test")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    for folder in [args.folder] + ([args.against] if args.against else []):
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    verdicts, report = check(args.folder, args.against)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.folder} (track {report['track']}, {report['track_note']}; {len(report['runs'])} log(s))")
        for v in verdicts:
            print(f"{v.rule:<24} {'pass' if v.ok else 'FAIL'}  {v.evidence}")
        failed = [v.rule for v in verdicts if not v.ok]
        print(
            f"verdict: {'FAIL' if failed else 'pass'}: "
            + (
                f"{len(failed)} of {len(verdicts)} rules fail ({', '.join(failed)})"
                if failed
                else f"all {len(verdicts)} rules pass"
            )
        )
    return 0 if report["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
