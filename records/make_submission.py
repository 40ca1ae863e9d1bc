r"""Make a submission folder from the logs of finished runs, so that nothing in it is typed by hand.

  # after one run per seed (each log holds the script that wrote it):
  python3 records/make_submission.py logs/seed1337.txt logs/seed1338.txt logs/seed1339.txt \
      --name "My change" --author "Ada Lovelace" --github-id ada --blurb "What it does, in one line."
  # optional, before the runs: pack the script (lzma + base85) so more of the 16,000,000 bytes go to weights
  python3 records/make_submission.py --pack train_gpt.py --output train_gpt_packed.py

The folder (records/track_<track>/<date>_<name> unless --output says otherwise) gets train_gpt.py exactly
as the logs ran it (and train_gpt_human.py, unpacked, when it is packed), the logs as train_seed<SEED>.log,
submission.json filled from the logs, and a README.md with the results table and the command; the one
thing left to write is why the change helps. It ends by printing check_submission.py's verdict on the folder.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import shlex
import shutil
import sys
import unicodedata
from pathlib import Path

import check_submission
import recordlib as R

ROOT = Path(__file__).resolve().parents[1]
NOT_LITERAL = object()


class MakeError(ValueError):
    """Logs that cannot make a folder; the message says why and what to do."""


def read_runs(paths: list[Path], allow_config_differences: bool = False) -> list[R.RunLog]:
    if not paths:
        raise MakeError("no logs given: pass the log of every seed (logs/RUN_ID.txt)")
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise MakeError(f"no such log: {', '.join(missing)}: give the log of every seed (logs/RUN_ID.txt)")
    logs = R.complete_with_rescores([R.read_log(p) for p in paths])  # a run stopped while scoring + its re-score
    for log in logs:
        if log.script is None:
            raise MakeError(f"{log.path} holds no script at its head: the maker needs logs that train_gpt.py wrote")
        if log.failure:
            again = (
                f"its artifact {log.artifact_sha256[:12]} was written: score it with EVAL_ONLY=1 (same script and "
                "config, ARTIFACT_PATH that file) and give that log too, or run that seed again"
                if log.artifact_sha256
                else "run that seed again"
            )
            raise MakeError(f"{log.path}: the run failed ({log.failure[:100]}); {again}")
        if log.config.get("eval_only") is True:
            raise MakeError(
                f'{log.path} is an EVAL_ONLY run (its config has "eval_only": true): it scored an '
                "artifact without training, so it has no training steps or time to submit; give the log "
                f"of the run that trained seed {log.seed} and wrote that artifact instead"
            )
        if log.val_bpb is None:
            raise MakeError(f"{log.path} has no final score line: did the run finish?")
        if log.seed is None or log.model_bytes is None:
            raise MakeError(f"{log.path} logs no seed or no artifact line: is it a train_gpt.py log?")
        if log.steps is None or log.train_ms is None:
            raise MakeError(
                f"{log.path} has no training step lines (step:N/M ... train_time:...): a submission "
                "reports how every seed trained; give the log of the run that trained it"
            )
        if log.script != logs[0].script:
            line = check_submission.first_difference(log.script.encode(), logs[0].script.encode())
            raise MakeError(
                f"{log.path} ran another script than {logs[0].path} (they differ from line {line}): "
                "a submission ships one train_gpt.py, so run every seed with the same one"
            )
    seeds = [log.seed for log in logs]
    if len(set(seeds)) < len(seeds):
        raise MakeError(f"seeds {seeds}: a seed ran twice; give one log per seed")
    logs = sorted(logs, key=lambda log: log.seed)
    differences = config_differences(logs)
    if differences and not allow_config_differences:
        raise MakeError(
            f"the seeds ran different configs: {'; '.join(differences)}. A submission's seeds run one "
            "config (the checker's same_config rule fails the folder otherwise): run those seeds again "
            "with the others' settings, or give --allow-config-differences to make the folder anyway"
        )
    return logs


def config_differences(logs: list[R.RunLog]) -> list[str]:
    """Each log whose config differs from the first's, with the differing settings as variables (MATRIX_LR=0.03)."""
    first = logs[0]
    found = []
    for log in logs[1:]:
        differ = check_submission.differing_settings(first, log)
        if differ:
            shown = ", ".join(
                f"{key.upper()}={json.dumps(log.config.get(key))} (not {json.dumps(first.config.get(key))})"
                for key in differ
            )
            found.append(f"{log.path} differs from {first.path} in {shown}")
    return found


def hardware(log: R.RunLog) -> str:
    return f"{log.world_size}x{log.gpus[0] if log.gpus else 'unknown GPU'}"


def build_submission(
    logs: list[R.RunLog], code_bytes: int, *, name: str, author: str, github_id: str, blurb: str, track: str, date: str
) -> dict:
    loss_mean, _ = R.mean_std([log.val_loss for log in logs])
    bpb_mean, bpb_std = R.mean_std([log.val_bpb for log in logs])
    return dict(
        author=author,
        github_id=github_id,
        name=name,
        blurb=blurb,
        date=date,
        track=track,
        val_loss=round(loss_mean, 8),
        val_bpb=round(bpb_mean, 8),
        val_bpb_std=None if bpb_std is None else round(bpb_std, 8),
        seeds=[log.seed for log in logs],
        seed_results={
            str(log.seed): dict(
                val_loss=log.val_loss, val_bpb=log.val_bpb, artifact_bytes=code_bytes + log.model_bytes, steps=log.steps
            )
            for log in logs
        },
        hardware=hardware(logs[0]),
        pytorch_version=logs[0].torch_version,
        bytes_total=max(code_bytes + log.model_bytes for log in logs),  # every seed's artifact must fit
        bytes_code=code_bytes,
    )


def script_defaults(code: str) -> tuple[dict, dict] | None:
    """The Hyperparameters defaults and the RECIPES of our train_gpt.py, read from its source (not run): a field's
    literal, or the first argument of its setting(...); a default or recipe that is not a literal is left out (its
    setting then shows in the command)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None

    def literal(node):
        try:
            return ast.literal_eval(node)
        except ValueError:
            return NOT_LITERAL

    defaults, recipes = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Hyperparameters":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value:
                    node_value = item.value
                    if (
                        isinstance(node_value, ast.Call)
                        and getattr(node_value.func, "id", "") == "setting"
                        and node_value.args
                    ):  # setting(default, rule, role): the default is its first argument
                        node_value = node_value.args[0]
                    if (value := literal(node_value)) is not NOT_LITERAL:
                        defaults[item.target.id] = value
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else node.targets[0]
            if isinstance(node, ast.Assign)
            else None
        )
        if isinstance(target, ast.Name) and target.id == "RECIPES" and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if key is not None and (recipe := recipe_literal(value, recipes, literal)) is not None:
                    recipes[literal(key)] = recipe
        if isinstance(target, ast.Subscript) and getattr(target.value, "id", "") == "RECIPES":  # RECIPES["x"] = ...
            if (recipe := recipe_literal(node.value, recipes, literal)) is not None:
                recipes[literal(target.slice)] = recipe
    return (defaults, recipes) if defaults else None


def recipe_literal(value, recipes: dict, literal) -> dict | None:
    """dict(name=literal, ...), or dict(RECIPES["earlier"], name=literal, ...): the earlier recipe's values, then
    these; None for anything else, or a value that is not a literal."""
    if not (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "dict") or len(value.args) > 1:
        return None
    recipe = {}
    if value.args:
        base = value.args[0]
        if not (isinstance(base, ast.Subscript) and getattr(base.value, "id", "") == "RECIPES"):
            return None
        if literal(base.slice) not in recipes:
            return None
        recipe = dict(recipes[literal(base.slice)])
    recipe |= {kw.arg: literal(kw.value) for kw in value.keywords}
    return None if NOT_LITERAL in recipe.values() or None in recipe else recipe


def command_line(log: R.RunLog, code: str) -> str | None:
    """The command that reruns a seed: the logged settings that differ from the script's defaults."""
    found = script_defaults(code)
    if found is None or not log.config:
        return None
    defaults, recipes = found
    base = defaults | recipes.get(log.config.get("recipe", ""), {})
    env = [f"SEED={log.seed}"]
    for key, value in sorted(log.config.items()):
        if key in R.NOT_CONFIG or (key in base and value == base[key]):
            continue
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
        env.append(f"{key.upper()}={shlex.quote(text)}")
    launch = (
        "python3 train_gpt.py"
        if log.world_size == 1
        else f"torchrun --standalone --nproc_per_node={log.world_size} train_gpt.py"
    )
    return " ".join(env + [launch])


def readme_text(submission: dict, logs: list[R.RunLog], code: str, packed: bool) -> str:
    n, std = len(logs), submission["val_bpb_std"]
    spread = f", std {std:.8f}" if std is not None else ""
    rows = [
        f"| {log.seed} | {log.steps} | {(log.train_ms + log.gptq_ms) / 1000:.3f} s | "
        f"{(log.eval_ms or 0) / 1000:.3f} s | {log.val_loss:.8f} | {log.val_bpb:.8f} | "
        f"{submission['seed_results'][str(log.seed)]['artifact_bytes']:,} |"
        for log in logs
    ]
    command = command_line(logs[0], code)
    seeds = ", ".join(str(log.seed) for log in logs)
    packed_note = (
        ", packed (lzma + base85, run as `__main__`); `train_gpt_human.py` is the same code unpacked" if packed else ""
    )
    files = [
        "- `train_gpt.py`: the script exactly as it ran (every log starts with it)"
        + ("; packed: `python3 records/make_submission.py --pack` wrote it" if packed else ""),
        *(["- `train_gpt_human.py`: the code inside the packed `train_gpt.py`, to read"] if packed else []),
        *[f"- `train_seed{log.seed}.log`: seed {log.seed}'s log, as train_gpt.py wrote it" for log in logs],
        "- `submission.json`: filled from the logs by `records/make_submission.py`",
    ]
    return "\n".join(
        [
            f"# {submission['name']}",
            "",
            f"**val_bpb {submission['val_bpb']:.8f}** ({f'mean of {n} seeds{spread}' if n > 1 else 'one seed'}), "
            f"val_loss {submission['val_loss']:.8f}; track `{submission['track']}`; {submission['hardware']}, "
            f"PyTorch {submission['pytorch_version']}.",
            "",
            submission["blurb"],
            "",
            "## Results",
            "",
            f"Read from the logs; the score is each log's last `{logs[0].score_label}` line. Train time includes GPTQ "
            "where the log times it; eval time is the evaluation of the artifact.",
            "",
            "| seed | steps | train time | eval time | val_loss | val_bpb | code + model bytes |",
            "|---|---|---|---|---|---|---|",
            *rows,
            f"| **mean** | | | | **{submission['val_loss']:.8f}** | **{submission['val_bpb']:.8f}** | |",
            "",
            f"Code: `train_gpt.py`, {submission['bytes_code']:,} bytes{packed_note}.",
            "",
            "## Command",
            "",
            f"One run per seed ({seeds}); the settings are those of the logged `config:` line that differ from the "
            "script's defaults."
            if command
            else "The logged `config:` line of each log holds every setting.",
            "",
            *(["```bash", command, "```", ""] if command else []),
            "## What changed, and why",
            "",
            R.README_PLACEHOLDER,
            "",
            "## Files",
            "",
            *files,
            "",
        ]
    )


def make_folder(
    log_paths: list[Path],
    output: Path | None,
    *,
    name: str,
    author: str,
    github_id: str,
    blurb: str,
    track: str,
    date: str,
    allow_config_differences: bool = False,
) -> Path:
    if track not in R.TRACKS:
        raise MakeError(f"--track {track!r} is not one of {', '.join(R.TRACKS)}")
    logs = read_runs(log_paths, allow_config_differences)
    if output is None:
        output = ROOT / "records" / f"track_{track}" / f"{date}_{folder_slug(name)}"
    if output.exists():
        raise MakeError(f"{output} already exists: give another --output or --name (a folder is never overwritten)")
    script = logs[0].script.encode("utf-8")
    code = R.unpack_script(logs[0].script)
    submission = build_submission(
        logs, len(script), name=name, author=author, github_id=github_id, blurb=blurb, track=track, date=date
    )
    readme = readme_text(submission, logs, code or logs[0].script, code is not None)
    files = {"train_gpt.py": script}
    if code is not None:
        files[R.HUMAN_COPY] = code.encode("utf-8")
    files["submission.json"] = (json.dumps(submission, indent=2) + "\n").encode("utf-8")
    files["README.md"] = readme.encode("utf-8")
    copies = {f"train_seed{log.seed}.log": log.path for log in logs}
    copies |= {f"rescore_seed{log.seed}.log": log.rescored_by for log in logs if log.rescored_by}
    write_folder(output, files, copies)
    return output


def folder_slug(name: str) -> str:
    """The folder name's part from --name: letters without their accents (Ü -> U), digits, one _ between words."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9]+", "_", ascii_name).strip("_")
    if not slug:
        raise MakeError(f"--name {name!r} has no letter or digit to name the folder: give one that has, or --output")
    return slug


def iso_date(text: str) -> str:
    """--date: a real day, written YYYY-MM-DD (the folder's name starts with it)."""
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date written YYYY-MM-DD, such as 2026-11-23") from None


def write_folder(output: Path, files: dict[str, bytes], copies: dict[str, Path]) -> None:
    """Write the folder complete or not at all: into a hidden sibling, renamed into place at the end. An error
    or an interrupt (Ctrl-C) on the way removes the sibling and any parent folder made for it, so a second
    attempt does not find a half-made folder in its way."""
    made_parents = [parent for parent in output.parents if not parent.exists()]  # the deepest first
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.parent / f".{output.name}.partial-{os.getpid()}"
    partial.mkdir()
    try:
        for name, data in files.items():
            (partial / name).write_bytes(data)
        for name, source in copies.items():
            shutil.copyfile(source, partial / name)
        if output.exists():
            raise MakeError(f"{output} appeared while the folder was being written: give another --output or --name")
        partial.rename(output)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # an error here must not hide the one that stopped the writing
        for parent in made_parents:
            if not any(parent.iterdir()):
                parent.rmdir()
        raise


def pack_file(script: Path, output: Path) -> str:
    try:
        source = script.read_text(encoding="utf-8")
        compile(source, str(script), "exec")  # the wrapper runs it: it must be Python this interpreter takes
    except UnicodeDecodeError:
        raise MakeError(f"--pack {script}: not UTF-8 text, so not a Python script: give the training script") from None
    except SyntaxError as exc:
        here = f"Python {sys.version_info.major}.{sys.version_info.minor}"
        raise MakeError(
            f"--pack {script}: not Python that {here} compiles (line {exc.lineno}: {exc.msg}): give the training "
            "script, and pack it with the Python that will run it"
        ) from None
    if R.PACKED_DATA.search(source):  # packing it again would ship a wrapper of a wrapper
        raise MakeError(f"{script} is packed already: pack the readable script it came from")
    packed = R.pack_script(source)
    if R.unpack_script(packed) != source:  # never ship a wrapper that does not give back the source
        raise MakeError(f"packing {script} did not round-trip")
    if output.exists():
        raise MakeError(f"{output} already exists: give another --output")
    output.write_text(packed, encoding="utf-8")
    size, packed_size = len(source.encode()), len(packed.encode())
    return (
        f"wrote {output}: {size:,} -> {packed_size:,} bytes of code ({size - packed_size:,} more for weights). "
        f"Run it for every seed (it logs and trains exactly as {script.name} does), then make the folder from "
        "those logs: a folder ships the script its logs ran."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("logs", nargs="*", type=Path, help="the log of every seed (train_gpt.py's logs/RUN_ID.txt)")
    parser.add_argument("--name", help="the submission's name, e.g. 'SP8192 + GPTQ embeddings'")
    parser.add_argument("--author", help="your name")
    parser.add_argument("--github-id", help="your GitHub user name")
    parser.add_argument("--blurb", help="one or two sentences: what the submission does")
    parser.add_argument("--track", default=R.RECORD_TRACK, help=f"{' or '.join(R.TRACKS)} (default: %(default)s)")
    parser.add_argument(
        "--date", type=iso_date, default=datetime.date.today().isoformat(), help="default: today, %(default)s"
    )
    parser.add_argument("--output", type=Path, help="the folder to make (or, with --pack, the packed script)")
    parser.add_argument("--pack", type=Path, metavar="SCRIPT", help="pack SCRIPT instead, before the runs")
    parser.add_argument(
        "--allow-config-differences",
        action="store_true",
        help="make the folder from seeds whose configs differ (refused without it; the checker's "
        "same_config rule still fails such a folder)",
    )
    args = parser.parse_args(argv)
    try:
        if args.pack:
            if args.logs:
                raise MakeError("--pack takes no logs: pack first, run the packed script, then make the folder")
            print(pack_file(args.pack, args.output or args.pack.with_name(args.pack.stem + "_packed.py")))
            return 0
        missing = [f"--{k.replace('_', '-')}" for k in ("name", "author", "github_id", "blurb") if not getattr(args, k)]
        if missing:
            raise MakeError(f"give {', '.join(missing)}: submission.json needs them and the logs cannot say them")
        folder = make_folder(
            args.logs,
            args.output,
            name=args.name,
            author=args.author,
            github_id=args.github_id,
            blurb=args.blurb,
            track=args.track,
            date=args.date,
            allow_config_differences=args.allow_config_differences,
        )
    except (MakeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"made {folder}: train_gpt.py, {len(args.logs)} log(s), submission.json, README.md")
    print(f"next: write what changed and why in {folder / 'README.md'}, then check it (--against the current record):")
    check_submission.main([str(folder)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
