"""The golfer's A/B: two or more variants of a run (environment variables, or another trainer script), each trained
with the same seeds on the GPUs of one host, paired by seed; per pair the difference of every score, a paired t-test
and a one-line verdict; a table as Markdown, the train-loss curves as a PNG. Run the same command again to resume.

  # on a CPU, in about a minute on 2 free cores: the tiny model of train_gpt.py's smoke run on the data that
  # `bash quickstart.sh` builds, two runs at a time, MATRIX_LR 0.02 (the baseline: the first variant) against 0.04:
  python3 scripts/ab.py --slots 2 --out /tmp/ab_lr --seeds 1 2 --common "VOCAB_SIZE=512 ITERATIONS=20 \\
      DATA_PATH=$(ls -d data/datasets/pystdlib_*_sp512 | tail -n1) WARMUP_STEPS=0 WARMDOWN_ITERS=5 \\
      TOKENIZER_PATH=$(ls data/tokenizers/pystdlib_*_sp512.model | tail -n1) MAX_WALLCLOCK_SECONDS=0 \\
      NUM_LAYERS=2 MODEL_DIM=64 NUM_HEADS=2 NUM_KV_HEADS=1 TRAIN_SEQ_LEN=128 TRAIN_BATCH_TOKENS=8192 \\
      VAL_BATCH_SIZE=8192 TRAIN_LOG_EVERY=1" --variant base --variant lr04 MATRIX_LR=0.04

  # a tokenizer A/B on a 4-GPU host at the 180-second proxy: 2 seeds x 2 variants, all four runs at once (one a GPU);
  # each variant its own shards, tokenizer and vocabulary (here: two sp8192 tokenizers of the same text, CaseOps and not)
  python3 scripts/ab.py --out ab/caseops_p180 --seeds 1337 42 --common "RECIPE=p180 MAX_WALLCLOCK_SECONDS=180" \\
      --variant plain DATA_PATH=data/datasets/webmix_sp8192 TOKENIZER_PATH=data/tokenizers/webmix_8192.model \\
                      VOCAB_SIZE=8192 \\
      --variant caseops DATA_PATH=data/datasets/webmix_caseops_sp8192 \\
                      TOKENIZER_PATH=data/tokenizers/webmix_caseops_8192.model VOCAB_SIZE=8192
  # then an evaluation A/B on the very same four artifacts: each re-scored with TTT_EPOCHS=3 and with 1 (EVAL_ONLY=1)
  python3 scripts/ab.py --eval-only ab/caseops_p180 --out ab/caseops_p180_ttt \\
      --variant ttt3 TTT_EPOCHS=3 --variant ttt1 TTT_EPOCHS=1
  # 2 GPUs a run (torchrun), two runs at a time, on GPUs 0-3; plan only: configs compared, runs listed, nothing run
  python3 scripts/ab.py ... --gpus 0,1,2,3 --nproc 2 --plan

Every variable reaches the trainer as the environment does (the shell's, then --common, then the variant's); ab.py
sets only SEED, RUN_ID, LOG_DIR, ARTIFACT_PATH (and EVAL_ONLY) per run, CUDA_VISIBLE_DEVICES and NCCL_NVLS_ENABLE=0
per GPU group, and one compile cache for all experiments of this user on this host (TORCHINDUCTOR_CACHE_DIR=
$XDG_CACHE_HOME/parameter-golf/inductor/HOST, ~/.cache without XDG_CACHE_HOME; TORCHINDUCTOR_FX_GRAPH_CACHE=1,
TORCHINDUCTOR_AUTOGRAD_CACHE=1; each only where neither the shell nor --common sets it): the first run compiles, the
others, in this experiment or a later one, load the same code (results.json's compile_cache says what was added).
Before anything runs, each variant's config is resolved by the trainer itself (its Hyperparameters, imported in a
subprocess); settings that differ from the first variant's are printed, those the variants did not set marked, and a
variant the trainer refuses stops the command with the trainer's message. A seed's variants run at the same time (one
wave) where there are as many slots (GPU groups) as variants, so each pair shares the machine's state; with fewer,
they cannot (ab.py says so) and a seed's runs follow each other.

Each run is judged by its score, its last final score line (what the challenge scores): the verdict compares those,
whichever line each variant ends on (TTT on against off), beside a column for each kind of score. Scores are read
with every decimal logged; no p is given from one pair, or from a spread of zero or under the logged precision, and
the verdict says why. --out DIR holds console/RUN.txt (each run's output), logs/, artifacts/, results.json, report.md
and train_loss.png (with matplotlib: train loss against step and training time, validation losses as dots).

Running the same command again skips the finished runs (exit 0 and a score line) and reruns the others, saying why
they failed; more --seeds may be added. results.json records what made the runs (each variant's trainer sha256, its
resolved config, its DATA_PATH's shards by size, manifest and tokenizer by sha256, python and torch, the shell's
values of the trainer's variables that no flag sets): if any differs now (an edited train_gpt.py, MATRIX_LR=0.03 in
the shell, shards rebuilt in place), ab.py stops and says what changed; another experiment needs another --out, or
--restart to discard the folder's runs and start over. The runs of train_gpt.py run OUT/trainers/train_gpt.py, a copy
made when the command starts, so an edit while they run reaches none; a run whose log shows another source or config
than the experiment's (a fork edited meanwhile), or whose DATA_PATH changed while the command ran, is not counted.
--script VARIANT=PATH runs that variant with another trainer (a fork, an older revision, a record's train_gpt.py:
unpacked if packed, its FlashAttention 3 call replaced by SDPA where FA3 is not installed, each run in out/work/RUN/
since a record writes its artifact where it runs). --eval-only re-scores the trained runs' artifacts (EVAL_ONLY=1,
each trained run's settings, then --common and the variant's), found in that folder wherever it has moved and checked
by sha256; --val [TRAINED_VARIANT=]PATH scores them on another validation set of the same tokenizer (its token ids and
documents are checked against it first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "records"))
import recordlib  # noqa: E402  (read_log: our logs and the records'; t_sf; unpack_script)

TRAINER = ROOT / "train_gpt.py"
SET_BY_AB = {  # variables ab.py sets itself, and the flag that sets them
    "SEED": "--seeds",
    "RUN_ID": "--out",
    "LOG_DIR": "--out",
    "ARTIFACT_PATH": "--out",
    "EVAL_ONLY": "--eval-only",
    "CUDA_VISIBLE_DEVICES": "--gpus",
    "RANK": "--nproc",
    "WORLD_SIZE": "--nproc",
    "LOCAL_RANK": "--nproc",
}
VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
SHARD_HEADER_BYTES = 256 * 4  # a shard's header (train_gpt.py's format), then uint16 token ids
NOT_COMPARED = recordlib.NOT_CONFIG | {"eval_only"}  # settings that name a run, not configure it
KINDS = {  # the scores a log may have, in the order a run logs them: (the table's column, the verdict's words)
    "pre_export": ("before export", "before export"),
    "roundtrip": ("round trip", "after the round trip"),
    "sliding_window": ("sliding window", "on sliding windows"),
    "ttt": ("TTT", "after TTT"),
    # What the challenge scores: each run's last final score line, whichever kind it is. The verdict compares this
    # one, so a variant that adds a scoring path (TTT on against off) is judged by its own last line.
    "score": ("score", "as scored"),
}
SCORE_LINE = re.compile(r"^(final_\w+_exact|quantized\w*|legal_ttt\w*) val_loss:\s*([0-9.]+) val_bpb:\s*([0-9.]+)")
STEP_AVG = re.compile(r"(?:^|\s)step_avg:\s*([0-9.]+)ms")
PRE_EXPORT = re.compile(r"^pre-quantization\b.* val_bpb:\s*([0-9.]+)")  # the records' score of the weights exported
VAL_POINT = re.compile(r"(?:^|\s)val_loss:\s*([0-9.]+)\s+val_bpb:\s*([0-9.]+)")  # a validation during training
PEAK = re.compile(r"(?:^|\s)peak_memory_allocated:\s*(\d+)\s*MiB|^peak memory allocated: (\d+) MiB")
FAILED = re.compile(r"^(?:error|interrupted)\b")
PHASE = re.compile(r"^phase:(\w+) phase_time:([0-9.]+)s compile_time:([0-9.]+)s")  # train_gpt.py's, then its wall
WALL = re.compile(r"^wall_time:([0-9.]+)s")
P_SIGNIFICANT = 0.05
FA3_IMPORT = "from flash_attn_interface import flash_attn_func as flash_attn_3_func"
SDPA_SHIM = (
    "def flash_attn_3_func(q, k, v, causal=False):\n"
    "    # FA3 takes (B, T, H, D), SDPA (B, H, T, D); query head h reads kv head h // (H // Hkv) in both\n"
    "    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)\n"
    "    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.size(1) != q.size(1))\n"
    "    return y.transpose(1, 2)"
)
# Run in a subprocess, one for each trainer script, on a JSON list of environments: the trainer's own Hyperparameters
# resolves each (ours: from_env(env); a record's: its class body reads os.environ, so the script is run again for each
# environment). One JSON line out, a result for each environment.
RESOLVE = r"""
import dataclasses, importlib.machinery, importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
module, results = None, []
for env in json.load(open(sys.argv[2])):
    os.environ.clear()
    os.environ.update(env)
    try:
        hp = getattr(module, "Hyperparameters", None)
        if not hasattr(hp, "from_env"):
            loader = importlib.machinery.SourceFileLoader("trainer", sys.argv[1])  # any name: old.py.bak too
            spec = importlib.util.spec_from_file_location("trainer", sys.argv[1], loader=loader)
            module = sys.modules["trainer"] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            hp = getattr(module, "Hyperparameters", None)
        if hp is None:
            out = dict(note="it has no Hyperparameters class")
        elif hasattr(hp, "from_env"):
            out = dict(config=dataclasses.asdict(hp.from_env(env)))
        else:
            out = dict(config={k: v for k, v in vars(hp).items() if not k.startswith("_") and not callable(v)})
    except Exception as exc:
        name = type(exc).__name__
        message = str(exc) if name in ("ConfigError", "ShardError") else f"{name}: {exc}"
        if hasattr(module, "recipe_note"):
            message = module.recipe_note(message, env)
        out = dict(error=message)
    results.append(out)
versions = dict(python=sys.version.split()[0], torch=getattr(sys.modules.get("torch"), "__version__", None))
print("\nRESOLVED:" + json.dumps([dict(out, versions=versions) for out in results], default=str))
"""


class UsageError(Exception):
    """Bad input: main() prints it as one `error:` line and exits 2, before anything runs."""


# ==== Variants, runs and the plan ===================================================================================


@dataclass
class Variant:
    name: str
    env: dict[str, str]  # its own variables (--variant NAME VAR=VALUE ...)
    script: Path | None = None  # another trainer (--script NAME=PATH); None: train_gpt.py, or the trained run's


@dataclass
class Job:
    """One run: a variant, a seed and (--eval-only) the trained run whose artifact it scores."""

    variant: str
    seed: int
    name: str  # RUN_ID, and the name of its console/log/artifact files
    env: dict[str, str]  # what ab.py adds to the shell's environment: --common, the variant's, the run's
    script: Path
    trained: str = ""  # --eval-only: the trained run it re-scores ("" when it trains)
    status: str = "pending"  # pending, finished, failed, interrupted
    reason: str = ""
    rc: int | None = None
    metrics: dict = field(default_factory=dict)
    artifact_sha256: str = ""  # of the artifact a finished run wrote (or scored), as ab.py found it then
    threads: str = ""  # the OMP_NUM_THREADS it was given: CPU runs' speed and summation order depend on it
    config: dict | None = None  # its config as the trainer resolved it before any run: what its log must say
    data: dict = field(default_factory=dict)  # its data's identity (data_identity) when the command started

    @property
    def pair_key(self) -> tuple[str, int]:  # the runs of one key, one a variant, are a pair
        return (self.trained.rsplit("_seed", 1)[0] if self.trained else "", self.seed)


def parse_assignments(tokens: list[str], where: str) -> dict[str, str]:
    """VAR=VALUE tokens (each may hold several, split as a shell would) as a dict; an error names the bad one."""
    env = {}
    for token in tokens:
        try:
            words = shlex.split(token)
        except ValueError as exc:
            raise UsageError(f"{where}: cannot split {token!r} ({exc}): quote values as a shell would.") from None
        for word in words:
            var, sep, value = word.partition("=")
            if not sep or not VAR.fullmatch(var):
                raise UsageError(f"{where}: {word!r} is not VAR=VALUE: write e.g. TTT_EPOCHS=1.")
            if var in SET_BY_AB:
                raise UsageError(f"{where}: {var} is set by ab.py for each run: use {SET_BY_AB[var]} instead.")
            if var in env and env[var] != value:
                raise UsageError(f"{where}: {var} is given twice ({env[var]!r} and {value!r}): keep one.")
            env[var] = value
    return env


def parse_variants(cli) -> list[Variant]:
    if not cli.variant or len(cli.variant) < 2:
        raise UsageError("give at least two --variant NAME [VAR=VALUE ...]: the first is the baseline.")
    variants = []
    for tokens in cli.variant:
        name = tokens[0]
        if not NAME.fullmatch(name) or "=" in name or "_seed" in name or "_on_" in name:
            raise UsageError(
                f"--variant {name!r}: the first word is the variant's name (letters, digits, . _ -, "
                "not '_seed' or '_on_'), then its VAR=VALUE settings: --variant ttt1 TTT_EPOCHS=1."
            )
        if any(v.name == name for v in variants):
            raise UsageError(f"--variant {name} is given twice: name each variant once.")
        variants.append(Variant(name, parse_assignments(tokens[1:], f"--variant {name}")))
    for spec in cli.script:
        name, sep, path = spec.partition("=")
        match = [v for v in variants if v.name == name]
        if not sep or not match:
            raise UsageError(f"--script {spec!r} must be VARIANT=PATH with VARIANT one of {names(variants)}.")
        if not Path(path).is_file():
            raise UsageError(f"--script {spec}: {path} is not a file: point it at the variant's trainer script.")
        if why := not_python(Path(path)):
            raise UsageError(
                f"--script {spec}: {path} is not a Python trainer ({why}): point it at the variant's script."
            )
        match[0].script = Path(path).resolve()
    return variants


def not_python(path: Path) -> str:
    """Why a --script file is not Python source this interpreter compiles ("" if it is), a packed record unpacked."""
    try:
        compile(record_source(path), str(path), "exec")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except SyntaxError as exc:
        return f"Python {sys.version.split()[0]} cannot compile it: {exc.msg}, line {exc.lineno}"
    except ValueError as exc:  # null bytes
        return str(exc)
    return ""


def names(items) -> str:
    return ", ".join(item.name for item in items)


def parse_seeds(seeds: list[int]) -> list[int]:
    duplicates = sorted({s for s in seeds if seeds.count(s) > 1})
    if duplicates:
        raise UsageError(f"--seeds {' '.join(map(str, seeds))} repeats {duplicates[0]}: give each seed once.")
    return seeds


def record_source(path: Path) -> str:
    """A record's Python source: unpacked if it ships as lzma + base85, FA3 replaced by SDPA if FA3 is missing."""
    text = path.read_text(encoding="utf-8")
    text = recordlib.unpack_script(text) or text
    try:
        import flash_attn_interface  # noqa: F401
    except ImportError:
        if "flash_attn_interface" in text:
            if FA3_IMPORT not in text:
                raise UsageError(f"{path} has no '{FA3_IMPORT}' line to replace and FlashAttention 3 is not installed.")
            text = text.replace(FA3_IMPORT, SDPA_SHIM)
    return text


PREPARED: dict[Path, str] = {}  # out/scripts/VARIANT.py: its source, written there once the checks have passed


def prepare_script(variant: Variant, out: Path) -> Path | None:
    """The script a variant runs: ours as it is; another one unpacked (and FA3 replaced) as out/scripts/VARIANT.py."""
    if variant.script is None or variant.script == TRAINER:
        return variant.script
    source = record_source(variant.script)
    if source == variant.script.read_text(encoding="utf-8"):
        return variant.script  # a plain script (a fork of ours): run where it is, beside its own modules
    PREPARED[out / "scripts" / f"{variant.name}.py"] = source
    return out / "scripts" / f"{variant.name}.py"


COMPILE_CACHE = dict(TORCHINDUCTOR_CACHE_DIR="", TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")


def compile_cache(common: dict[str, str]) -> dict[str, str]:
    """The inductor cache variables ab.py adds to every run: one cache for every experiment of this user on this host,
    so a graph compiles once, not once an experiment (a hit loads the same generated code: results do not change;
    inductor keys an entry by the graph, its inputs' shapes, torch's source, the GPU and the compiler versions, so
    experiments that differ share only what is the same: README, "The compile cache"). Per host: a home folder on a
    network disk is not shared by the hosts' GPUs and compilers. Those the shell or --common set are theirs."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG rule: a relative path is ignored
    cache = dict(
        COMPILE_CACHE, TORCHINDUCTOR_CACHE_DIR=str(root / "parameter-golf" / "inductor" / socket.gethostname())
    )
    return {k: v for k, v in cache.items() if k not in os.environ and k not in common}


def plan_jobs(cli, variants: list[Variant], seeds: list[int], trained: list[dict]) -> list[Job]:
    """Every run, seed-major (a seed's variants side by side). --eval-only: every variant on every trained run."""
    common, out, jobs = cli.common_env, cli.out.resolve(), []
    for seed in seeds:
        for base in trained or [None]:
            for v in variants:
                if base is not None and base["seed"] != seed:
                    continue
                name = f"{v.name}_on_{base['name']}" if base else f"{v.name}_seed{seed}"
                env = dict(base["env"]) if base else {}  # the trained run's settings, less its experiment's cache
                env = {k: x for k, x in env.items() if k not in base.get("compile_cache", {})} if base else env
                env.update(cli.compile_cache)
                env.update(common)
                env.update(v.env)
                env.update(SEED=str(seed), RUN_ID=name, LOG_DIR=str(out / "logs"))
                if base:
                    env.update(EVAL_ONLY="1", ARTIFACT_PATH=base["artifact"])
                    if cli.val_for(base["variant"]):
                        env["DATA_PATH"] = str(cli.val_for(base["variant"]))
                else:
                    env["ARTIFACT_PATH"] = str(out / "artifacts" / f"{name}.ptz")
                script = v.script or (Path(base["script"]) if base else TRAINER)
                jobs.append(Job(v.name, seed, name, env, script, trained=base["name"] if base else ""))
    return jobs


def load_trained(folder: Path, seeds: list[int] | None) -> tuple[list[dict], list[int]]:
    """--eval-only: the finished runs of a training experiment (its results.json), those of --seeds if given. Each
    artifact is found in that folder, wherever it has moved (not at the absolute path it was written to, where
    another experiment may have trained since), and must be the one its run wrote (its sha256)."""
    path = folder / "results.json"
    if not path.is_file():
        raise UsageError(f"--eval-only {folder}: no results.json there: name the --out folder of a training ab.py run.")
    results = json.loads(path.read_text())
    if results["experiment"]["mode"] != "train":
        raise UsageError(f"--eval-only {folder} holds an evaluation A/B: name the folder of the runs that trained.")
    runs = []
    for r in results["runs"]:
        if r["status"] != "finished" or r.get("rc") != 0 or (seeds is not None and r["seed"] not in seeds):
            continue
        artifact = folder / (r.get("artifact_in_out") or f"artifacts/{r['name']}.ptz")  # older results.json: there
        if not artifact.is_file():  # a record's script writes its artifact where it runs, not at ARTIFACT_PATH
            continue
        expected = (
            r.get("artifact_sha256") or recordlib.read_log(folder / "console" / f"{r['name']}.txt").artifact_sha256
        )
        found = file_sha256(artifact)
        if found != expected:
            said = f"its run wrote {expected[:12]}" if expected else "its run recorded none to check it by"
            raise UsageError(
                f"--eval-only {folder}: {artifact} is not the artifact run {r['name']} wrote (sha256 {found[:12]}; "
                f"{said}): put that run's artifact back, or re-train it in a new --out."
            )
        r = dict(r, artifact=str(artifact.resolve()), artifact_sha256=found)
        if r.get("script_in_out"):  # a record's script, prepared in that folder
            r["script"] = str((folder / r["script_in_out"]).resolve())
        r["compile_cache"] = results.get("compile_cache", {})  # what ab.py added: not the trained run's setting
        runs.append(r)
    if not runs:
        raise UsageError(f"--eval-only {folder}: no finished run with its artifact there (for these seeds).")
    return runs, list(dict.fromkeys(r["seed"] for r in runs))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inside(path: str | Path, folder: Path) -> str:
    """path relative to folder where it lies inside it ("" otherwise): what stays true when the folder moves."""
    try:
        return str(Path(path).resolve().relative_to(folder.resolve()))
    except ValueError:
        return ""


# ==== Resolved configs ==============================================================================================


def resolve_configs(jobs: list[Job]) -> dict[tuple[str, str], dict]:
    """Each distinct (variant, trained variant) config as its trainer resolves it: one subprocess a script, all at
    once. {(variant, trained variant): {"config": {...}} or {"error": the trainer's message} or {"note": why none}}."""
    first: dict[tuple[str, str], Job] = {}
    for job in jobs:
        first.setdefault((job.variant, job.pair_key[0]), job)
    by_script: dict[Path, list[tuple[str, str]]] = {}
    for key, job in first.items():
        by_script.setdefault(job.script, []).append(key)
    procs, resolved = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (script, keys) in enumerate(by_script.items()):
            envs = [run_environment(first[key].env, cuda_visible="") for key in keys]
            (Path(tmp) / f"{i}.json").write_text(json.dumps(envs))
            path = script
            if script in PREPARED:  # not written into --out yet: nothing is, before the checks pass
                path = Path(tmp) / str(i) / script.name
                path.parent.mkdir()
                path.write_text(PREPARED[script], encoding="utf-8")
            cmd = [sys.executable, "-c", RESOLVE, str(path), str(Path(tmp) / f"{i}.json")]
            procs[script] = subprocess.Popen(
                cmd, env=envs[0], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        outputs = {script: proc.communicate() for script, proc in procs.items()}
    for script, (stdout, stderr) in outputs.items():
        line = [x for x in stdout.splitlines() if x.startswith("RESOLVED:")]
        outs = json.loads(line[-1][len("RESOLVED:") :]) if line else None
        for i, key in enumerate(by_script[script]):
            tail = (stderr.strip().splitlines() or ["no output"])[-1]
            resolved[key] = outs[i] if outs else dict(error=f"{script} could not be imported ({tail})")
    return resolved


def compare_configs(variants: list[Variant], jobs: list[Job], resolved: dict) -> list[str]:
    """Lines saying how each variant's config differs from the baseline's; an error for a refused or twin one."""
    refused = {key: out["error"] for key, out in resolved.items() if "error" in out}
    if len(refused) == len(resolved) and len(set(refused.values())) == 1:  # not a variant's own setting
        raise UsageError(f"the trainer refuses what every variant shares (--common, the shell): {refused.popitem()[1]}")
    for (variant, trained), error in refused.items():
        on = f" (on {trained})" if trained else ""
        raise UsageError(f"variant {variant}{on}: the trainer refuses its settings: {error}")
    scripts = {v.name: next(j.script for j in jobs if j.variant == v.name) for v in variants}
    base, lines = variants[0], []
    for trained in dict.fromkeys(t for _, t in resolved):
        on = f" on {trained}" if trained else ""
        configs = {v.name: compared(resolved[(v.name, trained)].get("config")) for v in variants}
        for i, a in enumerate(variants):
            for b in variants[i + 1 :]:
                known = configs[a.name] is not None and configs[b.name] is not None
                same = configs[a.name] == configs[b.name] if known else a.env == b.env
                if same and scripts[a.name] == scripts[b.name]:
                    raise UsageError(
                        f"variants {a.name} and {b.name} resolve to the same config{on} with the same script: "
                        "they would measure noise. Change one, or drop it."
                    )
        for v in variants[1:]:
            ca, cb = configs[base.name], configs[v.name]
            if scripts[v.name] != scripts[base.name]:
                lines.append(f"config {v.name} vs {base.name}{on}: script {scripts[base.name]} -> {scripts[v.name]}")
            if ca is None or cb is None:
                why = resolved[(v.name if cb is None else base.name, trained)].get("note", "")
                lines.append(f"config {v.name} vs {base.name}{on}: not compared ({why})")
                continue
            keys = sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
            own = set(v.env) | set(base.env)
            shown = [f"{k.upper()} {ca.get(k)!r} -> {cb.get(k)!r}" for k in keys if k.upper() in own]
            others = [f"{k.upper()} {ca.get(k)!r} -> {cb.get(k)!r}" for k in keys if k.upper() not in own]
            lines.append(f"config {v.name} vs {base.name}{on}: set by the variants: {', '.join(shown) or 'none'}")
            if others:
                lines.append(f"config {v.name} vs {base.name}{on}: ALSO DIFFERS (not set by them): {', '.join(others)}")
            off = inert(ca)
            if scripts[v.name] == scripts[base.name] and keys and set(keys) <= set(off) & set(inert(cb)):
                switches = ", ".join(f"{k.upper()}={ca[k]!r}" for k in sorted({off[k] for k in keys}))
                lines.append(
                    f"WARNING: {v.name} differs from {base.name}{on} only in settings that do nothing with {switches} "
                    f"({', '.join(k.upper() for k in keys)}): the A/B would measure noise. Turn that on in --common, "
                    "or drop the variant."
                )
    return lines


INERT_UNLESS = {  # train_gpt.py's settings that act only when a switch is on, by switch
    "ttt_enabled": ("ttt_lr", "ttt_epochs", "ttt_momentum", "ttt_chunk_tokens"),
    "num_loops": ("loop_start", "loop_end", "enable_looping_at"),
}


def inert(config: dict) -> dict[str, str]:
    """The settings of a resolved config that do nothing in it, each with the switch that is off."""
    return {k: switch for switch, keys in INERT_UNLESS.items() if switch in config and not config[switch] for k in keys}


def check_val_vocabulary(cli, jobs: list[Job], resolved: dict) -> None:
    """--val: every token id of its validation shards under the trained runs' VOCAB_SIZE, and their documents made by
    the trained runs' TOKENIZER_PATH (decoded and encoded again, they give their own ids, as the trainer checks),
    checked once here rather than by each run, which would start and fail in seconds."""
    import numpy as np

    checked = set()
    for job in jobs:
        path = cli.val_for(job.pair_key[0]) if job.trained else None
        config = resolved[(job.variant, job.pair_key[0])].get("config") or {}
        vocab, tokenizer = config.get("vocab_size"), config.get("tokenizer_path")
        if path is None or not vocab or (path, vocab, tokenizer) in checked:
            continue
        checked.add((path, vocab, tokenizer))
        for shard in sorted(Path(path).glob("fineweb_val_*.bin")):
            if "fineweb_val_bytes_" in shard.name or shard.stat().st_size <= SHARD_HEADER_BYTES:
                continue  # a sidecar, or no tokens: the trainer says what is wrong with it
            tokens = np.memmap(shard, np.uint16, "r", SHARD_HEADER_BYTES)
            top = int(tokens.max())
            if top >= int(vocab):
                raise UsageError(
                    f"--val {path}: {shard.name} holds token id {top} >= VOCAB_SIZE={vocab}, the vocabulary of "
                    f"{job.pair_key[0]}'s runs: made with another tokenizer. Give shards of their tokenizer "
                    f"(--val {job.pair_key[0]}=PATH for that trained variant alone)."
                )
            same, docs = round_trips(tokens, tokenizer)
            if same < docs:
                raise UsageError(
                    f"--val {path}: {shard.name} was not made by {tokenizer}, the tokenizer of {job.pair_key[0]}'s "
                    f"runs: {same} of {docs} documents decode and encode again to their own ids. Give shards of "
                    f"their tokenizer (--val {job.pair_key[0]}=PATH for that trained variant alone)."
                )


def round_trips(tokens, tokenizer: str | None, docs: int = 32) -> tuple[int, int]:
    """(how many, of the first `docs` whole documents of a shard) give their own ids decoded and encoded again by
    the tokenizer; (0, 0) where it cannot be loaded here (the run says why)."""
    import numpy as np
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    except (OSError, RuntimeError, TypeError):
        return 0, 0
    bos = np.flatnonzero(tokens[: 1 << 22] == sp.bos_id())[: docs + 1]  # a prefix: FineWeb's split is 62M tokens
    ids = [tokens[a + 1 : b].tolist() for a, b in zip(bos[:-1], bos[1:])]
    return sum(sp.encode(sp.decode(doc)) == doc for doc in ids), len(ids)


def compared(config: dict | None) -> dict | None:
    """A resolved config less the settings that name a run (RUN_ID, SEED, paths of its log and artifact)."""
    return None if config is None else {k: v for k, v in config.items() if k not in NOT_COMPARED}


# ==== Devices and scheduling ========================================================================================


def list_gpus() -> list[str]:
    """The GPUs nvidia-smi lists (index order), by name; none without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


@dataclass
class Slot:
    """Where one run goes: its GPUs (CUDA_VISIBLE_DEVICES; "" on a CPU) and its processes."""

    cuda_visible: str
    nproc: int


def make_slots(cli) -> tuple[list[Slot], str]:
    """--gpus / --nproc / --slots as the slots runs go to, and a line saying so."""
    if cli.nproc < 1:
        raise UsageError(f"--nproc {cli.nproc}: give the processes (GPUs) of each run, 1 or more.")
    if cli.slots is not None:
        if cli.gpus is not None:
            raise UsageError("--slots runs on the CPU and --gpus on GPUs: give one of them.")
        if cli.slots < 1:
            raise UsageError(f"--slots {cli.slots}: give the CPU runs at a time, 1 or more.")
        return [Slot("", cli.nproc) for _ in range(cli.slots)], f"cpu: {cli.slots} runs at a time"
    gpus = list_gpus()
    if cli.gpus is None:
        if not gpus:
            return [Slot("", cli.nproc)], "cpu: no GPU listed by nvidia-smi; one run at a time (--slots N for more)"
        chosen = list(range(len(gpus)))
    else:
        try:
            chosen = [int(x) for x in cli.gpus.split(",")]
        except ValueError:
            raise UsageError(f"--gpus {cli.gpus!r} must be GPU indices separated by commas, e.g. 0,1,2,3.") from None
        missing = [i for i in chosen if not 0 <= i < len(gpus)]
        if missing:
            have = f"0-{len(gpus) - 1}" if gpus else "none (nvidia-smi lists no GPU)"
            raise UsageError(f"--gpus {cli.gpus}: GPU {missing[0]} does not exist; this machine has {have}.")
        if len(set(chosen)) != len(chosen):
            raise UsageError(f"--gpus {cli.gpus} names a GPU twice: name each once.")
    if len(chosen) % cli.nproc:
        raise UsageError(f"--nproc {cli.nproc} does not divide the {len(chosen)} GPUs {chosen}: runs would share GPUs.")
    groups = [chosen[i : i + cli.nproc] for i in range(0, len(chosen), cli.nproc)]
    kinds = sorted({gpus[i] for i in chosen})
    note = f"gpus: {len(groups)} runs at a time, {cli.nproc} GPU(s) each: {groups} ({', '.join(kinds)})"
    if len(kinds) > 1:
        note += "; WARNING: GPUs of different kinds, a pair's runs may not share one kind"
    return [Slot(",".join(map(str, g)), cli.nproc) for g in groups], note


def waves(jobs: list[Job], slots: int) -> list[list[Job]]:
    """Pending runs in waves of at most `slots`, a seed's runs in one wave where they fit: a pair runs at once."""
    by_key: dict = {}
    for job in jobs:
        by_key.setdefault(job.pair_key, []).append(job)
    result, wave = [], []
    for group in by_key.values():
        if len(wave) + len(group) > slots and wave:
            result.append(wave)
            wave = []
        while len(group) > slots:  # more variants than slots: this seed's runs cannot all run at once
            result.append(group[:slots])
            group = group[slots:]
        wave = wave + group
    return result + ([wave] if wave else [])


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports (all bound at once, then released): torchrun's rendezvous of each run of a wave."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_environment(env: dict[str, str], cuda_visible: str, nproc: int = 1, slots: int = 1) -> dict[str, str]:
    """The shell's environment, less torchrun's variables, with the run's on top."""
    full = {k: v for k, v in os.environ.items() if k not in SET_BY_AB and k not in ("LOCAL_WORLD_SIZE", "GROUP_RANK")}
    full.update(env)
    full["CUDA_VISIBLE_DEVICES"] = cuda_visible
    if cuda_visible:
        full["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off: it hangs some hosts (KINDS.md)
    elif "OMP_NUM_THREADS" not in os.environ:
        full["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // (slots * nproc)))
    return full


def command(script: Path, slot: Slot, port: int) -> list[str]:
    if slot.nproc == 1:
        return [sys.executable, str(script)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc_per_node={slot.nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        str(script),
    ]


# ==== Reading a run's output ========================================================================================


def console_path(out: Path, job: Job) -> Path:
    return out / "console" / f"{job.name}.txt"


def read_run(path: Path, rc: int | None = 0) -> tuple[str, str, dict]:
    """(status, reason, metrics) of a run from its console output and exit status (None: not recorded): finished
    once it has exited 0 with a score and no error. A run killed while it scored on (kill -9 during the sliding
    windows) has a round trip's score line: it failed. Each score keeps the decimals it was logged with
    (metrics["decimals"]): the statistics know their resolution."""
    if not path.is_file():
        return "pending", "", {}
    _, body = recordlib.split_head(path.read_text(encoding="utf-8", errors="replace"))
    lines = recordlib.LINE_CLOCK.sub("", body).splitlines()
    log = recordlib.read_log(path)
    metrics: dict = {}
    decimals: dict[str, int] = {}
    if log.steps is not None and log.train_loss:
        metrics["steps"] = log.steps
    validations, pre_export, exported = [], None, False
    for line in lines:
        if match := STEP_AVG.search(line):
            metrics["step_avg_ms"] = float(match.group(1))
        if match := PEAK.search(line):
            metrics["peak_mib"] = int(match.group(1) or match.group(2))
        if recordlib.ARTIFACT.search(line):
            exported = True
        if match := SCORE_LINE.match(line):
            label = match.group(1)
            kind = "ttt" if "ttt" in label else "sliding_window" if "sliding" in label else "roundtrip"
            for name in (kind, "score"):
                metrics[name] = float(match.group(3))
                decimals[name] = recordlib.decimals(match.group(3))
            metrics["score_kind"] = kind  # which of the columns before it the score is
        elif (step := recordlib.STEP.search(line)) and (match := VAL_POINT.search(line)):
            train_time = recordlib.TRAIN_TIME.search(line)
            ms = float(train_time.group(1)) * recordlib.UNITS_MS[train_time.group(2)] if train_time else None
            validations.append([int(step.group(1) or step.group(3)), ms, float(match.group(1))])
            if not exported:  # the last validation before the export scores the weights exported
                pre_export = match.group(2)
        if match := PRE_EXPORT.match(line):  # a record's, after its EMA: not on a step line
            pre_export = match.group(1)
    if pre_export is not None and (exported or "score" in metrics):  # not a validation of a run stopped before it
        metrics["pre_export"] = float(pre_export)
        decimals["pre_export"] = recordlib.decimals(pre_export)
    if "step_avg_ms" not in metrics and log.train_ms and log.steps:  # the records log no step_avg
        metrics["step_avg_ms"] = round(log.train_ms / log.steps, 2)
    metrics["decimals"] = decimals
    metrics.update(read_phases(lines))
    metrics["train_loss"] = [[p.step, p.train_ms, p.value] for p in log.train_loss]  # (step, ms, loss)
    # The records log no time on validation lines: the train line's at that step, the last train_time at the last.
    times = {0: 0.0, log.steps: log.train_ms} | {p.step: p.train_ms for p in log.train_loss}
    metrics["val_loss"] = [[step, times.get(step) if ms is None else ms, loss] for step, ms, loss in validations]
    failure = [line.strip() for line in lines if FAILED.match(line.strip())]
    if failure:
        return "failed", failure[-1], metrics
    timing = [line for line in lines if PHASE.match(line) or WALL.match(line)]  # the wall's accounting: no reason
    tail = [line.strip() for line in lines if line.strip() and line not in timing]
    if rc is None:
        return "failed", "its exit status was not recorded (ab.py stopped before the run did)", metrics
    if rc != 0:
        after = (
            f"after its {KINDS[metrics['score_kind']][0]} score" if "score" in metrics else (tail or ["no output"])[-1]
        )
        return "failed", f"exit {exit_text(rc)}: {after}", metrics
    if "score" in metrics:
        return "finished", "", metrics
    return "failed", (tail[-1] if tail else "no output"), metrics


def read_phases(lines: list[str]) -> dict:
    """Where a run's wall time went, from train_gpt.py's phase lines: {"phases": {name: [seconds, of which
    torch.compile's]}}, summed by name (validation repeats), in the order logged, and "wall_s", the wall the log
    states; {} for a log without them (a record's)."""
    phases, found = {}, {}
    for line in lines:
        if match := PHASE.match(line):
            total = phases.setdefault(match.group(1), [0.0, 0.0])
            total[0] = round(total[0] + float(match.group(2)), 2)
            total[1] = round(total[1] + float(match.group(3)), 2)
        elif match := WALL.match(line):
            found["wall_s"] = float(match.group(1))
    return dict(found, phases=phases) if phases else found


def exit_text(rc: int) -> str:
    """An exit status as a person reads it: -9 (SIGKILL) for a signal."""
    if rc < 0:
        try:
            return f"{rc} ({signal.Signals(-rc).name})"
        except ValueError:
            pass
    return str(rc)


def reason_text(job: Job) -> str:
    """Why a run is not finished, once: its status word not repeated (interrupted: interrupted: ...), never empty."""
    if job.status == "pending":
        return job.reason or "not started (ab.py stopped before its turn)"
    reason = job.reason.strip()
    if reason.startswith(f"{job.status}:"):
        reason = reason[len(job.status) + 1 :].strip()
    return reason or "no reason in its output (see its console file)"


# ==== Statistics and the report =====================================================================================


def paired_test(diffs: list[float], resolution: float = 0.0) -> tuple[float, float | None, float | None, str]:
    """(mean, sd, two-sided p, why there is no p) of paired differences. No p from one pair (sd None too), from
    differences all equal, or from a spread under `resolution`, the step of the values as logged (scores read at 4
    decimals differ by multiples of 0.0001: their spread is then rounding, and a t-test on it claims p=0)."""
    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return mean, None, None, "needs 2 or more pairs"
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0:
        return mean, 0.0, None, f"the {n} differences are all equal"
    if sd < resolution:
        return mean, sd, None, f"the spread is under the {recordlib.decimals(resolution)} decimals logged"
    t = mean / (sd / math.sqrt(n))
    return mean, sd, min(1.0, 2 * recordlib.t_sf(abs(t), n - 1)), ""


def shown_decimals(spread: float | None, least: int) -> int:
    """Decimals that show a spread to 2 significant digits: at least `least`, at most 8 (what the logs give)."""
    if not spread:
        return least
    return max(least, min(8, 1 - math.floor(math.log10(spread))))


def comparisons(jobs: list[Job], variants: list[Variant]) -> list[dict]:
    """Each variant against the baseline, per trained variant (--eval-only) and over all runs: paired by key."""
    done = {(j.variant, j.pair_key): j.metrics for j in jobs if j.status == "finished"}
    groups = list(dict.fromkeys(j.pair_key[0] for j in jobs))
    scopes = [(g, [k for k in dict.fromkeys(j.pair_key for j in jobs) if k[0] == g]) for g in groups]
    if len(groups) > 1:
        scopes.append(("all", list(dict.fromkeys(j.pair_key for j in jobs))))
    base, result = variants[0].name, []
    for scope, keys in scopes:
        for v in variants[1:]:
            row = dict(variant=v.name, baseline=base, scope=scope, kinds={})
            for kind in KINDS:
                pairs = [
                    (k, done[(v.name, k)][kind] - done[(base, k)][kind]) for k in keys if both(done, v, base, k, kind)
                ]
                if pairs:
                    resolution = max(resolution_of(done[(name, k)], kind) for k, _ in pairs for name in (base, v.name))
                    mean, sd, p, why = paired_test([d for _, d in pairs], resolution)
                    each = [d for _, d in pairs]
                    row["kinds"][kind] = dict(n=len(pairs), mean=mean, sd=sd, p=p, no_p=why, each=each)
            if "score" in row["kinds"]:  # which line each variant's score is, over these pairs
                paired = [k for k in keys if both(done, v, base, k, "score")]
                row["score_lines"] = {
                    name: sorted({done[(name, k)]["score_kind"] for k in paired}, key=list(KINDS).index)
                    for name in (base, v.name)
                }
                row["verdict"] = verdict(row)
                result.append(row)
    return result


def resolution_of(metrics: dict, kind: str) -> float:
    """The step of a value as its log wrote it: 0.0001 for 4 decimals; 0 where unknown."""
    digits = metrics.get("decimals", {}).get(kind)
    return 0.0 if digits is None else 10.0**-digits


def both(done: dict, v: Variant, base: str, key, kind: str) -> bool:
    return kind in done.get((v.name, key), {}) and kind in done.get((base, key), {})


def verdict(row: dict) -> str:
    """One line on the score each run is judged by (its last final line): who is better, by how much, how sure."""
    s = row["kinds"]["score"]
    unit = "artifact" if row["scope"] else "seed"  # --eval-only pairs two scores of one artifact
    a, b = row["baseline"], row["variant"]
    lines = row["score_lines"]
    if lines[a] == lines[b] and len(lines[a]) == 1:  # one kind of line on both sides: say which
        what = f"bpb {KINDS[lines[a][0]][1]}"
    else:  # the variants end on different lines (TTT on against off): the score is each one's last
        ends = "; ".join(f"{name}: {', '.join(KINDS[k][0] for k in lines[name])}" for name in (a, b))
        what = f"bpb as scored ({ends})"
    n = f"{s['n']} {unit}{'s' if s['n'] > 1 else ''}"
    on = f" (on {row['scope']})" if row["scope"] else ""
    d = shown_decimals(s["sd"] if s["p"] is not None else None, 4)
    sd = f" ± {s['sd']:.{d}f}" if s["sd"] is not None else ""
    if s["p"] is None:  # no p to judge by: the difference, and why there is no test
        return f"{b} - {a} = {s['mean']:+.{d}f}{sd} {what}, {n}: no test ({s['no_p']}){on}"
    spread = f"{abs(s['mean']):.{d}f}{sd} {what}, p={s['p']:.3g}, {n}{on}"
    if s["p"] < P_SIGNIFICANT:
        return f"{b if s['mean'] < 0 else a} better by {spread}"
    return f"no clear difference: {b} - {a} = {s['mean']:+.{d}f}{sd} {what}, p={s['p']:.3g}, {n}{on}"


def fmt(value, digits: int = 5) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    mean, sd = recordlib.mean_std(values)
    d = shown_decimals(sd, 5)
    return f"{mean:.{d}f}" + (f" ± {sd:.{d}f}" if sd is not None else "")


def markdown(jobs: list[Job], variants: list[Variant], rows: list[dict], cmd: str) -> str:
    kinds = [k for k in KINDS if any(k in j.metrics for j in jobs)]
    head = ["run", "seed", "steps", "step_avg ms", "peak MiB"] + [KINDS[k][0] for k in kinds] + ["status"]
    lines = [f"`{cmd}`", "", "val_bpb of each run:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j in jobs:
        m = j.metrics
        cells = [j.name, str(j.seed), fmt(m.get("steps")), fmt(m.get("step_avg_ms"), 1), fmt(m.get("peak_mib"))]
        cells += [fmt(m.get(k)) for k in kinds] + [j.status + (f": {reason_text(j)}" if j.status != "finished" else "")]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if not kinds:  # no run has scored: nothing to average or compare
        return "\n".join(lines) + "\n"
    lines += ["", "| variant, mean ± sd | runs | " + " | ".join(KINDS[k][0] for k in kinds) + " |"]
    lines.append("|" + "---|" * (2 + len(kinds)))
    for scope in dict.fromkeys(j.pair_key[0] for j in jobs):
        for v in variants:
            runs = [j for j in jobs if j.variant == v.name and j.pair_key[0] == scope and j.status == "finished"]
            label = f"{v.name} on {scope}" if scope else v.name
            cells = [mean_sd([j.metrics[k] for j in runs if k in j.metrics]) for k in kinds]
            lines.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + " |")
    lines += phase_table(jobs, variants)
    if rows:
        head = ["paired difference, mean ± sd (p)", "pairs"] + [KINDS[k][0] for k in kinds] + ["each pair (score)"]
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            label = f"{row['variant']} - {row['baseline']}" + (f" on {row['scope']}" if row["scope"] else "")
            n = max(s["n"] for s in row["kinds"].values())
            cells = []
            for k in kinds:
                s = row["kinds"].get(k)
                if s is None:
                    cells.append("-")
                    continue
                d = shown_decimals(s["sd"] if s["p"] is not None else None, 5)
                sd = f" ± {s['sd']:.{d}f}" if s["sd"] is not None else ""
                cells.append(
                    f"{s['mean']:+.{d}f}{sd} " + (f"(p={s['p']:.3g})" if s["p"] is not None else f"(no p: {s['no_p']})")
                )
            score = row["kinds"]["score"]
            d = shown_decimals(score["sd"] if score["p"] is not None else None, 5)
            cells.append(" ".join(f"{x:+.{d}f}" for x in score["each"]))
            lines.append(f"| {label} | {n} | " + " | ".join(cells) + " |")
        lines += [""] + [f"- {row['verdict']}" for row in rows]
    return "\n".join(lines) + "\n"


TOTALS = ("sum of the phases", "wall, as logged", "process, as ab.py timed it", "not in the log")


def timed_rows(m: dict) -> dict[str, tuple[float, float]]:
    """A run's rows of the phase table, from its metrics: each phase's (seconds, of which torch.compile's), then the
    TOTALS it has (no compile part): the phases' sum, the log's wall, the process's wall, and their difference."""
    rows = {name: (seconds, compiling) for name, (seconds, compiling) in m.get("phases", {}).items()}
    if rows:
        rows[TOTALS[0]] = (sum(seconds for seconds, _ in rows.values()), 0.0)
    if "wall_s" in m:
        rows[TOTALS[1]] = (m["wall_s"], 0.0)
    if "process_s" in m:
        rows[TOTALS[2]] = (m["process_s"], 0.0)
    if "wall_s" in m and "process_s" in m:
        rows[TOTALS[3]] = (m["process_s"] - m["wall_s"], 0.0)
    return rows


def phase_table(jobs: list[Job], variants: list[Variant]) -> list[str]:
    """Where each variant's minutes go (Markdown lines; none if no finished run was timed): the mean over its finished
    runs of each phase's seconds as the log gives them (torch.compile's part in brackets), their sum, the wall the log
    states, and the process's wall as ab.py timed it from launch to exit; the last two differ by what no log line can
    time (torchrun's start-up and exit, the interpreter's)."""
    columns = []  # (label, each finished run's rows)
    for scope in dict.fromkeys(j.pair_key[0] for j in jobs):
        for v in variants:
            runs = [j for j in jobs if j.variant == v.name and j.pair_key[0] == scope and j.status == "finished"]
            if runs:
                columns.append((f"{v.name} on {scope}" if scope else v.name, [timed_rows(j.metrics) for j in runs]))
    found = [name for _, runs in columns for rows in runs for name in rows]
    if not found:
        return []
    head = ["seconds, mean over runs (compile)"] + [
        f"{label} ({len(runs)} run{'s' * (len(runs) > 1)})" for label, runs in columns
    ]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [n for n in dict.fromkeys(found) if n not in TOTALS] + [n for n in TOTALS if n in found]:
        cells = []
        for _, runs in columns:
            values = [rows[name] for rows in runs if name in rows]
            seconds, compiling = (sum(v[i] for v in values) / max(len(values), 1) for i in (0, 1))
            cells.append("-" if not values else f"{seconds:.1f}" + (f" ({compiling:.1f})" if compiling >= 0.05 else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def plot_series(jobs: list[Job], variants: list[Variant]) -> dict | None:
    """What train_loss.png draws, matplotlib or not: each run's train loss by step and by training seconds (a variant
    slower per step ends further right there), its validation losses, and the y range of the part where runs differ
    (after the first steps' fall: the first 50, or a fifth of a shorter run, or a tenth of a longer one). None: no
    run has logged a train loss."""
    curves = [j for j in jobs if j.metrics.get("train_loss")]
    if not curves:
        return None
    colors = {v.name: f"C{i % 10}" for i, v in enumerate(variants)}
    seeds = list(dict.fromkeys(j.seed for j in jobs))
    last = max(point[0] for j in curves for point in j.metrics["train_loss"])
    skip = max(min(50, last // 5), last // 10)
    series, shown = [], []
    for j in curves:
        train, val = j.metrics["train_loss"], j.metrics.get("val_loss", [])
        series.append(
            dict(
                name=j.name,
                color=colors[j.variant],
                style=["-", "--", ":", "-."][seeds.index(j.seed) % 4],
                steps=[step for step, _, _ in train],
                seconds=[None if ms is None else ms / 1000 for _, ms, _ in train],
                loss=[loss for _, _, loss in train],
                val_steps=[step for step, _, _ in val],
                val_seconds=[None if ms is None else ms / 1000 for _, ms, _ in val],
                val_loss=[loss for _, _, loss in val],
            )
        )
        shown += [loss for step, _, loss in train + val if step > skip and math.isfinite(loss)]
    shown = shown or [loss for s in series for loss in s["loss"] if math.isfinite(loss)] or [0.0]
    low, high = min(shown), max(shown)
    pad = 0.05 * (high - low) or 0.01 * abs(high) or 0.01
    return dict(series=series, ylim=(low - pad, high + pad), after_step=skip)


def figure(data: dict):
    """The plot_series data as a matplotlib figure: train loss against step (left) and training time (right), one
    color a variant, one line style a seed, validation losses as dots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for s in data["series"]:
        panels = [
            (axes[0], s["steps"], s["loss"], s["val_steps"], s["val_loss"]),
            (axes[1], s["seconds"], s["loss"], s["val_seconds"], s["val_loss"]),
        ]
        for ax, x, y, val_x, val_y in panels:  # a point without a time (none logged) is left off the right panel
            points = [(a, b) for a, b in zip(x, y) if a is not None]
            val = [(a, b) for a, b in zip(val_x, val_y) if a is not None]
            if points:
                ax.plot(*zip(*points), s["style"], color=s["color"], label=s["name"], linewidth=1)
            if val:
                ax.plot(*zip(*val), "o", color=s["color"], markersize=4)
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("training time (s)")
    axes[0].set_ylabel("train loss (dots: validation loss)")
    axes[0].set_ylim(*data["ylim"])
    axes[0].set_title(f"y range: the losses after step {data['after_step']}", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(jobs: list[Job], variants: list[Variant], path: Path) -> str:
    """train_loss.png (figure); a note instead when matplotlib is missing or nothing trained."""
    data = plot_series(jobs, variants)
    if data is None:
        return "plot: no train_loss lines to plot"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "plot: skipped, matplotlib is not installed (pip install matplotlib)"
    import matplotlib.pyplot as plt

    fig = figure(data)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


# ==== The experiment folder =========================================================================================


def experiment_of(cli, variants: list[Variant]) -> dict:
    """What makes two commands one experiment (their runs comparable); seeds may be added, and --gpus/--slots vary."""
    return dict(
        mode="eval" if cli.eval_only else "train",
        common=cli.common_env,
        variants={v.name: dict(env=v.env, script=str(v.script or "")) for v in variants},
        nproc=cli.nproc,
        val=[str(x) for x in cli.val],
    )


def check_out(out: Path, experiment: dict, restart: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: name a folder, new or one ab.py made.")
    if why := cannot_write(out):
        raise UsageError(f"--out {out}: {why}: name a folder you can write in.")
    path = out / "results.json"
    if path.is_file():
        before = json.loads(path.read_text())["experiment"]
        keys = [k for k in experiment if k in before and before[k] != experiment[k]]  # older files: what they have
        if keys and not restart:
            raise UsageError(
                f"--out {out} holds another experiment's runs (its {', '.join(keys)} differ from this command's): "
                "choose another --out, or add --restart to discard its runs and start over."
            )
    elif out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--out {out} is not empty and holds no ab.py results.json: choose a new or empty folder.")


def cannot_write(out: Path) -> str:
    """Why ab.py could not make folder `out` or write in it ("" if it can), tried in the folder or its nearest
    existing parent with a temporary folder made and removed: --plan leaves nothing behind."""
    where = out.absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        return f"{where} is a file, not a folder"
    try:
        tempfile.TemporaryDirectory(dir=where, prefix=".ab_probe_").cleanup()
    except OSError as exc:
        return f"cannot write in {where} ({exc.strerror})"
    return ""


def identity_of(jobs: list[Job], resolved: dict, trained: list[dict]) -> dict:
    """What made the runs, beyond the command's words: for each variant (on each trained variant) its trainer's
    sha256, its config as the trainer resolves it and the python and torch that resolved it; the shell's values of
    the trainer's variables and of inductor's switches (TORCHINDUCTOR_*: they change the code compiled; not the cache's
    place) that no flag sets; --eval-only: the sha256 of the artifacts it scores. An edited
    train_gpt.py or MATRIX_LR=0.03 in the shell changes it: the runs made before are then another experiment."""
    made = {}
    for job in jobs:
        key = (job.variant, job.pair_key[0])
        label = f"{job.variant} on {key[1]}" if key[1] else job.variant
        if label not in made:
            found = resolved[key]
            made[label] = dict(
                script=str(job.script),
                sha256=script_sha256(job.script),
                config=compared(found.get("config")),
                versions=found.get("versions"),
                data=data_identity(found.get("config")),
            )
    names = {k.upper() for found in resolved.values() for k in found.get("config") or {}}
    names |= {k for k in os.environ if k.startswith("TORCHINDUCTOR_") and k not in COMPILE_CACHE}
    set_by_flags = {k for job in jobs for k in job.env} | set(SET_BY_AB)
    environment = {k: os.environ[k] for k in sorted(names - set_by_flags) if k in os.environ}
    artifacts = {r["name"]: r["artifact_sha256"] for r in trained}
    return json.loads(json.dumps(dict(made=made, environment=environment, artifacts=artifacts), default=str))


SOURCES: dict[Path, bytes] = {}  # each script's bytes as this command first read them: what its runs run


def script_bytes(script: Path) -> bytes:
    """What a variant runs: a prepared record's source, or the script's bytes as this command first read them."""
    if script in PREPARED:
        return PREPARED[script].encode()
    if script not in SOURCES:
        SOURCES[script] = script.read_bytes()
    return SOURCES[script]


def script_sha256(script: Path) -> str:
    return hashlib.sha256(script_bytes(script)).hexdigest()


def data_identity(config: dict | None) -> dict:
    """What a run's data is, read cheaply: DATA_PATH's shards by name and size (a split rebuilt in place changes
    them), the sha256 of its manifest where it has one (data/build_shards.py's, with each shard's sha256) and of
    TOKENIZER_PATH. {} for a script whose config names no DATA_PATH."""
    if not (config or {}).get("data_path"):
        return {}
    folder, tokenizer = Path(config["data_path"]), Path(config.get("tokenizer_path") or "")
    found = {p.name: p.stat().st_size for p in sorted(folder.glob("fineweb_*.bin"))} if folder.is_dir() else {}
    if (folder / "manifest.json").is_file():
        found["manifest.json sha256"] = file_sha256(folder / "manifest.json")[:12]
    if tokenizer.is_file():
        found[f"{tokenizer} sha256"] = file_sha256(tokenizer)[:12]
    return found


def data_changes(before: dict, now: dict) -> str:
    """How DATA_PATH's identity changed: each file, its size (or sha256) before and now."""
    keys = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    return ", ".join(f"{k} {before.get(k, 'absent')} -> {now.get(k, 'absent')}" for k in keys)


def identity_changes(before: dict, now: dict) -> list[str]:
    """What differs between two identities, each change as a phrase; variants or artifacts only one of them has
    (more --seeds) are no change."""
    changes = []
    for label in [label for label in now["made"] if label in before["made"]]:
        a, b = before["made"][label], now["made"][label]
        if a["sha256"] != b["sha256"]:
            changes.append(
                f"{label}'s trainer {b['script']} is not the one its runs ran (sha256 {a['sha256'][:12]} -> {b['sha256'][:12]})"
            )
        if a["config"] is not None and b["config"] is not None and a["config"] != b["config"]:
            keys = sorted(k for k in set(a["config"]) | set(b["config"]) if a["config"].get(k) != b["config"].get(k))
            diff = ", ".join(f"{k.upper()} {a['config'].get(k)!r} -> {b['config'].get(k)!r}" for k in keys)
            changes.append(f"{label}'s config resolves otherwise: {diff}")
        if a.get("data") and b.get("data") and a["data"] != b["data"]:  # older results.json: none recorded
            changes.append(f"{label}'s DATA_PATH is other data: {data_changes(a['data'], b['data'])}")
        for name, version in (b.get("versions") or {}).items():
            if (a.get("versions") or {}).get(name, version) != version:
                changes.append(f"{label}'s {name} {a['versions'][name]} -> {version}")
    for k in sorted(set(before["environment"]) | set(now["environment"])):
        if before["environment"].get(k) != now["environment"].get(k):
            was, new = (env.get(k, "unset") for env in (before["environment"], now["environment"]))
            changes.append(f"the shell's {k}: {was} -> {new}")
    for name in [name for name in now["artifacts"] if name in before["artifacts"]]:
        if before["artifacts"][name] != now["artifacts"][name]:
            was, new = before["artifacts"][name][:12], now["artifacts"][name][:12]
            changes.append(f"trained run {name}'s artifact is another (sha256 {was} -> {new})")
    return changes


def check_identity(out: Path, identity: dict, restart: bool) -> list[str]:
    """Refuses to add runs to runs made by other code or settings (a UsageError that says what changed); lines to
    print otherwise."""
    path = out / "results.json"
    if restart or not path.is_file():
        return []
    before = json.loads(path.read_text()).get("identity")
    if before is None:
        return [f"note: {path} was written before ab.py recorded what made its runs: they are not checked"]
    changes = identity_changes(before, identity)
    if changes:
        raise UsageError(
            f"--out {out} holds runs made by other code or settings than this command's: {'; '.join(changes)}. "
            "New runs would be pooled with them: give this command a new --out, or add --restart to discard that "
            "folder's runs and start over."
        )
    return []


RESULTS = ("results.json", "report.md", "train_loss.png", "console", "logs", "artifacts", "work", "scripts", "trainers")
TRAINER_COPY = Path("trainers") / "train_gpt.py"  # in --out: the runs of train_gpt.py run this copy, made at the start


def discard_runs(out: Path) -> None:
    """--restart: what ab.py wrote in out (not the compile cache an older ab.py kept there: code, not results)."""
    for name in RESULTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def write_results(out: Path, header: dict, jobs: list[Job], rows: list[dict]) -> None:
    """results.json: the header (experiment, what ab.py added), every run, the comparisons."""
    runs = []
    for j in jobs:
        run = dict(name=j.name, variant=j.variant, seed=j.seed, trained=j.trained, status=j.status, reason=j.reason)
        artifact = j.env.get("ARTIFACT_PATH", "")
        run.update(
            rc=j.rc, env=j.env, script=str(j.script), script_in_out=inside(j.script, out), omp_num_threads=j.threads
        )
        run.update(artifact=artifact, artifact_in_out=inside(artifact, out), artifact_sha256=j.artifact_sha256)
        run.update(console=str(console_path(out, j)), log=str(out / "logs" / f"{j.name}.txt"))
        run["metrics"] = {k: v for k, v in j.metrics.items() if k not in ("train_loss", "val_loss")}  # curves: the logs
        runs.append(run)
    data = dict(header, runs=runs, comparisons=rows)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out / "results.json")  # whole or not at all: an interrupt leaves the last complete one


def start(job: Job, slot: Slot, port: int, out: Path, slots: int) -> subprocess.Popen:
    console = console_path(out, job)
    if console.exists():  # a failed or interrupted attempt: kept beside, the trainer's log cleared for the new one
        console.replace(console.with_suffix(".failed.txt"))
    (out / "logs" / f"{job.name}.txt").unlink(missing_ok=True)
    env, cwd = job.env, None
    if job.script != TRAINER:  # a record's script writes its artifact and logs where it runs, whatever
        cwd = out.resolve() / "work" / job.name  # ARTIFACT_PATH says: each run in a folder of its own, the
        cwd.mkdir(parents=True, exist_ok=True)  # caller's data/ linked in, its paths made absolute
        if Path("data").is_dir() and not (cwd / "data").exists():
            (cwd / "data").symlink_to(Path("data").resolve())
        env = {k: str(Path(v).resolve()) if "/" in v and os.path.exists(v) else v for k, v in env.items()}
    env = run_environment(env, slot.cuda_visible, slot.nproc, slots)
    job.threads = env.get("OMP_NUM_THREADS") or ("1 (torchrun's)" if slot.nproc > 1 else "unset (torch's: a core each)")
    with open(console, "w") as f:
        cmd = command(out.resolve() / TRAINER_COPY if job.script == TRAINER else job.script, slot, port)
        return subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def die_with_parent() -> None:
    """In the trainer's process before it starts (Linux): SIGTERM when ab.py ends, even by SIGKILL, so no run is left
    training on a GPU that a resumed ab.py hands to another (torchrun passes it to its workers). Elsewhere: nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def run_all(pending: list[Job], slots: list[Slot], out: Path, save) -> bool:
    """Runs the pending jobs wave by wave; each as it ends is read, printed and saved. False if interrupted."""
    running: dict[str, tuple[Job, subprocess.Popen, float]] = {}
    try:
        for wave in waves(pending, len(slots)):
            for job, slot, port in zip(wave, slots, free_ports(len(wave))):
                where = f"gpus {slot.cuda_visible}" if slot.cuda_visible else "cpu"
                print(f"start {job.name} ({where})", flush=True)
                running[job.name] = (job, start(job, slot, port, out, len(slots)), time.time())
            while running:
                time.sleep(0.2)
                for name, (job, proc, t0) in list(running.items()):
                    if proc.poll() is not None:
                        del running[name]
                        job.rc = proc.returncode
                        judge(job, out)
                        job.metrics["process_s"] = round(time.time() - t0, 2)  # launch to exit, as ab.py saw it
                        print(line_of(job, job.metrics["process_s"]), flush=True)
                        save()
    except BaseException as exc:  # the runs under way are stopped as the trainer stops on SIGTERM (it logs where):
        # on an interrupt (SIGINT, SIGTERM, SIGHUP), a closed stdout (BrokenPipeError: `ab.py ... | head -5`) or a
        # fault of ab.py's own; never left running without ab.py (they run in sessions of their own)
        for job, proc, _ in running.values():
            with_signal(proc, signal.SIGTERM)
        for job, proc, _ in running.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with_signal(proc, signal.SIGKILL)
                proc.wait()
            job.rc = proc.returncode
            judge(job, out)
            if job.status != "finished":
                job.status, job.reason = "interrupted", job.reason or "stopped by ab.py"
        save()
        if isinstance(exc, KeyboardInterrupt):
            return False
        raise
    return True


def judge(job: Job, out: Path) -> None:
    """A run that has ended, read from its output: finished only if its log does not say that another trainer,
    config or data made it (not_this_experiments); the sha256 of the artifact a finished one wrote."""
    job.status, job.reason, job.metrics = read_run(console_path(out, job), job.rc)
    if job.status == "finished" and (why := not_this_experiments(job, out)):
        job.status, job.reason = "failed", why
    job.artifact_sha256 = artifact_sha256(job)


def not_this_experiments(job: Job, out: Path) -> str:
    """Why a run that finished is not one of this experiment's ("" if it is): the source at the head of its log is
    not its script as this command read it (the trainer was edited while the experiment ran: the runs of ours run a
    copy, a fork runs where it is), its logged config is not the one resolved for it, or its DATA_PATH has changed
    since the command started. A log without a source head or a config line (a record's) is not checked for it."""
    path = out / "logs" / f"{job.name}.txt"
    log = recordlib.read_log(path) if path.is_file() else None
    if log is not None and log.script is not None:
        logged, source = log.script.splitlines(), script_bytes(job.script).decode("utf-8", "replace").splitlines()
        if logged != source:
            line = next(i for i, (a, b) in enumerate(zip(logged + [None], source + [None]), 1) if a != b)
            return (
                f"the source in its log is not {job.script} as this experiment read it (from line {line}): an edited "
                "trainer ran"
            )
    if log is not None and job.config is not None and log.config_source == "config:{json} line":
        config = compared(log.config)
        keys = sorted(
            k for k in set(config) | set(job.config) if not recordlib.same_setting(k, job.config.get(k), config.get(k))
        )
        if keys:
            diff = ", ".join(f"{k.upper()} {job.config.get(k)!r} -> {config.get(k)!r}" for k in keys)
            return f"its log's config is not the one resolved for it: {diff}"
    if job.data and (now := data_identity(job.config)) != job.data:
        return f"its DATA_PATH changed since this command started: {data_changes(job.data, now)}"
    return ""


def artifact_sha256(job: Job) -> str:
    """The sha256 of a finished run's artifact, as it is now ("" for an unfinished run, or none at ARTIFACT_PATH)."""
    path = Path(job.env.get("ARTIFACT_PATH", ""))
    return file_sha256(path) if job.status == "finished" and path.is_file() else ""


def with_signal(proc: subprocess.Popen, sig: int) -> None:
    """The signal to the run's own process group (torchrun and its workers), which ab.py started."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def line_of(job: Job, seconds: float | None = None) -> str:
    m = job.metrics
    took = f" in {seconds:.0f}s" if seconds is not None else ""
    if job.status != "finished":
        return f"{job.status} {job.name}{took}: {reason_text(job)} (console/{job.name}.txt)"
    scores = " ".join(f"{k}:{m[k]:.4f}" for k in KINDS if k in m)
    return f"finished {job.name}{took}: steps:{m.get('steps', '-')} {scores}"


# ==== main ==========================================================================================================


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__[__doc__.index("\n\n") :], formatter_class=Raw
    )
    parser.add_argument("--out", required=True, help="folder of this experiment's runs and report")
    parser.add_argument(
        "--variant",
        nargs="+",
        action="append",
        metavar=("NAME", "VAR=VALUE"),
        help="a variant: its name, then its settings; the first is the baseline. Repeat for each (2 or more).",
    )
    parser.add_argument("--common", nargs="+", action="extend", default=[], metavar="VAR=VALUE", help="settings of all")
    parser.add_argument("--script", action="append", default=[], metavar="VARIANT=PATH", help="another trainer")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 1337 42 (--eval-only: all)")
    parser.add_argument("--gpus", help="GPU indices, e.g. 0,1,2,3 (default: every GPU nvidia-smi lists)")
    parser.add_argument("--nproc", type=int, default=1, help="GPUs (torchrun processes) of each run (default 1)")
    parser.add_argument("--slots", type=int, help="runs at a time on the CPU (no GPU used)")
    parser.add_argument("--eval-only", type=Path, metavar="TRAINED_OUT", help="re-score that experiment's artifacts")
    parser.add_argument(
        "--val", action="append", default=[], metavar="[VARIANT=]PATH", help="--eval-only: another validation set"
    )
    parser.add_argument("--plan", action="store_true", help="resolve and compare configs, list the runs; run nothing")
    parser.add_argument(
        "--restart", action="store_true", help="discard the runs already in --out (another experiment's) and run all"
    )
    return parser.parse_args(argv)


class Raw(argparse.RawDescriptionHelpFormatter):
    pass


def prepare(cli) -> tuple[list[Variant], list[Job], dict, list[str]]:
    """Everything checked before any run: (variants, jobs, results.json's header, lines to print); a UsageError
    otherwise."""
    if not cli.out.strip():
        raise UsageError(f"--out {cli.out!r} names no folder: give the experiment's, e.g. --out ab/lr04.")
    cli.out = Path(cli.out)
    variants = parse_variants(cli)
    cli.common_env = parse_assignments(cli.common, "--common")
    trained = []
    if cli.eval_only:
        if cli.eval_only.resolve() == cli.out.resolve():
            raise UsageError(f"--out {cli.out} is the trained experiment itself: give the evaluation its own folder.")
        trained, seeds = load_trained(cli.eval_only, parse_seeds(cli.seeds) if cli.seeds else None)
    else:
        if cli.val:
            raise UsageError("--val re-scores artifacts on another validation set: it needs --eval-only.")
        seeds = parse_seeds(cli.seeds or [1337, 42])
    vals = {}
    for spec in cli.val:
        name, sep, path = spec.rpartition("=")
        vals[name if sep else "*"] = Path(path)
        if not Path(path).is_dir():
            raise UsageError(f"--val {spec}: {path} is not a folder of shards: name the folder holding fineweb_val_*.")
    unknown = sorted(set(vals) - {"*"} - {r["variant"] for r in trained})
    if unknown:
        raise UsageError(f"--val {unknown[0]}=...: {cli.eval_only} has no trained variant {unknown[0]}.")
    cli.val_for = lambda variant: vals.get(variant, vals.get("*"))  # None: the trained run's own DATA_PATH
    cli.compile_cache = compile_cache(cli.common_env)
    for v in variants:
        v.script = prepare_script(v, cli.out.resolve()) if v.script else None
    jobs = plan_jobs(cli, variants, seeds, trained)
    experiment = experiment_of(cli, variants)
    check_out(cli.out, experiment, cli.restart)
    for job in jobs:  # each script read once, now: what its runs run (ours: a copy) and what their logs must say
        try:
            script_bytes(job.script)
        except OSError as exc:  # --eval-only: the trained runs' script, where they recorded it
            raise UsageError(
                f"variant {job.variant}: its trainer {job.script} cannot be read ({exc.strerror}): give the one to "
                f"run with --script {job.variant}=PATH."
            ) from None
    resolved = resolve_configs(jobs)
    lines = compare_configs(variants, jobs, resolved)
    check_val_vocabulary(cli, jobs, resolved)
    identity = identity_of(jobs, resolved, trained)
    lines += check_identity(cli.out, identity, cli.restart)
    for job in jobs:
        job.config = compared(resolved[(job.variant, job.pair_key[0])].get("config"))
        job.data = data_identity(job.config)
    header = dict(experiment=experiment, identity=identity, compile_cache=cli.compile_cache)
    if any(job.script == TRAINER for job in jobs):  # what the runs of train_gpt.py run
        header["trainer_copy"] = dict(path=str(TRAINER_COPY), sha256=script_sha256(TRAINER))
    if cli.eval_only:
        header["trained_from"] = str(cli.eval_only.resolve())  # where it was then: the artifacts' sha256 say which
    if cli.compile_cache:
        where = cli.compile_cache.get("TORCHINDUCTOR_CACHE_DIR", "the cache folder you set")
        lines.append(
            f"compile cache: one for all runs on this host, {where} ("
            + " ".join(f"{k}={v}" for k, v in cli.compile_cache.items())
            + ")"
        )
    else:
        lines.append("compile cache: yours (TORCHINDUCTOR_CACHE_DIR, _FX_GRAPH_CACHE and _AUTOGRAD_CACHE set)")
    return variants, jobs, header, lines


def interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv=None) -> int:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # each stops the runs under way, keeps the finished
        signal.signal(signum, interrupt)
    cli = parse_args(argv)
    try:
        slots, where = make_slots(cli)
        prepared = prepare(cli)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: before any run started", file=sys.stderr)
        return 130
    try:
        return run_experiment(cli, argv, slots, where, *prepared)
    except BrokenPipeError:  # stdout's reader has gone (`| head -5`): the runs under way were stopped, the rest kept
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error as Python flushes stdout
        try:
            print(
                "interrupted: stdout was closed; the runs under way were stopped, run the same command again to resume",
                file=sys.stderr,
            )
        except BrokenPipeError:
            pass
        return 128 + signal.SIGPIPE


def run_experiment(cli, argv, slots, where, variants, jobs, header, config_lines) -> int:
    """main() once everything is checked: what is done already, the runs, the report. Its exit status."""
    out = cli.out
    print(where)
    print("\n".join(config_lines))
    before = json.loads((out / "results.json").read_text())["runs"] if (out / "results.json").is_file() else []
    if cli.restart and before:
        print(f"restart: {'would discard' if cli.plan else 'discarding'} the {len(before)} runs recorded in {out}")
        before = []
    interrupted = {r["name"] for r in before if r["status"] == "interrupted"}
    recorded = {r["name"]: r for r in before}
    for job in [] if cli.restart else jobs:  # --restart: every run is to run
        job.rc = recorded.get(job.name, {}).get("rc")  # a run is finished only if it exited 0
        job.threads = recorded.get(job.name, {}).get("omp_num_threads", "")
        job.status, job.reason, job.metrics = read_run(console_path(out, job), job.rc)
        if job.status == "finished" and (why := not_this_experiments(job, out)):  # made by an edited trainer
            job.status, job.reason = "failed", why
        if job.status == "finished":
            job.artifact_sha256 = recorded[job.name].get("artifact_sha256") or artifact_sha256(job)
            if "process_s" in recorded[job.name].get("metrics", {}):  # timed by the ab.py that ran it
                job.metrics["process_s"] = recorded[job.name]["metrics"]["process_s"]
    pending = [j for j in jobs if j.status != "finished"]
    for job in jobs:
        if job.status == "finished":
            print(f"done before: {line_of(job)}")
        elif job.status != "pending":
            print(
                f"rerun {job.name}: it {'was interrupted' if job.name in interrupted else 'failed'}: {reason_text(job)}"
            )
    print(f"runs: {len(jobs)}, to run: {len(pending)} in {len(waves(pending, len(slots)))} wave(s) of <= {len(slots)}")
    if len(slots) < len(variants):
        print(
            f"note: {len(variants)} variants on {len(slots)} slot(s): a seed's variants cannot run at once, so a pair "
            "does not share the machine's state (its step times compare less well); give a slot a variant for that"
        )
    if cli.plan:
        for job in pending:
            print(f"plan {job.name}: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in job.env.items()))
        return 0
    if cli.restart:
        discard_runs(out)
    for sub in ("console", "logs", "artifacts"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for path, source in PREPARED.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(source, encoding="utf-8")
    if "trainer_copy" in header:  # train_gpt.py as the command read it: an edit while the runs go on changes none
        (out / TRAINER_COPY).parent.mkdir(exist_ok=True)
        (out / TRAINER_COPY).write_bytes(script_bytes(TRAINER))
    cmd = "python3 scripts/ab.py " + shlex.join(sys.argv[1:] if argv is None else argv)

    def save():
        write_results(out, header, jobs, comparisons(jobs, variants))

    save()
    completed = run_all(pending, slots, out, save)
    rows = comparisons(jobs, variants)
    save()
    report = markdown(jobs, variants, rows, cmd)
    (out / "report.md").write_text(report)
    print("\n" + report)
    print(plot(jobs, variants, out / "train_loss.png"))
    failed = [j for j in jobs if j.status != "finished"]
    for job in failed:
        print(f"not finished: {job.name}: {reason_text(job)}")
    if not completed:
        print("interrupted: the finished runs are kept; run the same command again to run the others")
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
