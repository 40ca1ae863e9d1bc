"""Bad input and faults (issue 10): what train_gpt.py refuses, and what it logs when a run is cut short.
Each test fails without the check it covers; test_readme_fault_table_is_true keeps README.md's
"Bad input and faults" table true, row by row.

Issues 20, 24 and 34 (each test names its row): a fresh machine's faults, a full disk among them.

Run: python3 -m pytest -q -n 2 tests/test_hardening.py   (CPU only; 2 min 18 s on 2 shared cores: tiny runs)
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch

import train_gpt
from helpers import OUR_NAMES, ROOT, TinyData, cpu_run, score_line, tiny_env
from helpers import encode_documents as helpers_encode
from helpers import train_tokenizer as helpers_train_tokenizer
from test_end_to_end import FINAL_LINE, SCRIPT, Run, run_script

sys.path.insert(0, str(ROOT / "data"))
import build_shards  # noqa: E402
import quickstart  # noqa: E402

ConfigError, ShardError, Hyperparameters = train_gpt.ConfigError, train_gpt.ShardError, train_gpt.Hyperparameters
KNOWN = [f.name.upper() for f in dataclasses.fields(Hyperparameters)]
README = ROOT / "README.md"
ONE_CPU = train_gpt.DistContext(0, 1, 0, train_gpt.torch.device("cpu"))  # one process, no process group


def train_tokenizer(docs: list[str], path: Path, **settings) -> spm.SentencePieceProcessor:
    """The tests' tokenizer (tests/helpers.py) of 512 pieces, with overrides."""
    return helpers_train_tokenizer(docs, path, **{"vocab_size": 512, **settings})


def decoded_vs_counted_bytes(sp, docs: list[str]) -> tuple[int, int]:
    """UTF-8 bytes of the decoded documents, and what bpb counts for them ([BOS] + ids, as in a shard)."""
    base_bytes, has_space, is_boundary = train_gpt.build_byte_luts(sp, sp.vocab_size())
    decoded = counted = 0
    for doc in docs:
        ids = sp.encode(doc)
        decoded += len(sp.decode(ids).encode("utf-8"))
        prev = [sp.bos_id()] + ids[:-1]
        counted += sum(int(base_bytes[y]) + int(has_space[y] and not is_boundary[x]) for x, y in zip(prev, ids))
    return decoded, counted


def copy_data(data: TinyData, tmp_path: Path) -> Path:
    folder = tmp_path / "shards"
    shutil.copytree(data.data_path, folder)
    return folder


def args_for(data: TinyData, tmp_path: Path, **overrides) -> Hyperparameters:
    return Hyperparameters.from_env(tiny_env(data, tmp_path, **overrides))


# =================================================================================================
# 1. The tokenizer: the one the data was made with, and one whose pieces count bytes right
# =================================================================================================


def check_tokenizer_bytes(sp) -> None:
    train_gpt.check_tokenizer_bytes(sp, train_gpt.build_byte_luts(sp, sp.vocab_size()))


def test_the_tests_tokenizer_and_the_published_ones_pass_the_byte_probe(tiny_data):
    check_tokenizer_bytes(tiny_data.sp)
    for name in ("fineweb_1024_bpe.model", "fineweb_8192_bpe.model"):
        path = ROOT.parent / "shared" / "data" / "tokenizers" / name
        if path.is_file():
            check_tokenizer_bytes(spm.SentencePieceProcessor(model_file=str(path)))


@pytest.mark.parametrize(
    "settings",
    [dict(remove_extra_whitespaces=False), dict(user_defined_symbols=["of\u2581the"])],
    ids=["keeps_whitespace", "inner_space_piece"],
)
def test_a_tokenizer_whose_pieces_miscount_bytes_is_refused(tiny_data, tmp_path, settings):
    path = tmp_path / "odd.model"
    sp = train_tokenizer(tiny_data.train_docs, path, **settings)
    # it really miscounts on ordinary documents (the probe is not stricter than the rule)
    docs = tiny_data.val_docs + ["  indented first line, and one of the others"]
    decoded, counted = decoded_vs_counted_bytes(sp, docs)
    assert decoded != counted
    with pytest.raises(ConfigError) as error:
        train_gpt.load_tokenizer(str(path), 512)
    assert f"TOKENIZER_PATH={path}" in str(error.value) and "remove_extra_whitespaces=true" in str(error.value)


def build_with_manifest(data: TinyData, tmp_path: Path) -> Path:
    """data/build_shards.py's folder for the test documents, tokenized with the tests' tokenizer."""
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": d}) + "\n" for d in data.train_docs + data.val_docs))
    out = tmp_path / "built"
    build_shards.build(
        build_shards.parse_args(
            [
                str(source),
                "--output",
                str(out),
                "--tokenizer",
                str(data.tokenizer_path),
                "--val-fraction",
                "0.2",
                "--workers",
                "1",
            ]
        )
    )
    return out


def test_a_right_size_tokenizer_that_did_not_make_the_shards_is_refused_naming_the_tool_that_finds_it(
    tiny_data, tmp_path
):
    data_path = build_with_manifest(tiny_data, tmp_path)  # a manifest does not matter: the shards themselves tell
    args = args_for(tiny_data, tmp_path, DATA_PATH=data_path)
    verified = train_gpt.preflight(args, ONE_CPU).tokenizer_verified
    assert re.fullmatch(r"round_trip_(\d+)/\1", verified) and int(verified.split("/")[1]) >= 32  # every document
    folder = tmp_path / "tokenizers"
    folder.mkdir()
    wrong = folder / "wrong.model"  # same settings, same size, other text: other ids for the same pieces
    train_tokenizer(tiny_data.train_docs[::-1][: len(tiny_data.train_docs) // 2], wrong)
    shutil.copy(tiny_data.tokenizer_path, folder / "right.model")
    args = args_for(tiny_data, tmp_path, DATA_PATH=data_path, TOKENIZER_PATH=wrong, RUN_ID="wrong")
    with pytest.raises(ConfigError) as error:
        train_gpt.preflight(args, ONE_CPU)
    message = str(error.value)
    assert f"TOKENIZER_PATH={wrong} did not make the shards in {data_path}" in message
    # the search for the one that did is the data tool's (tests/test_data*.py), not the trainer's
    assert f"Find the one that did: python3 data/build_shards.py --which-tokenizer {data_path}" in message
    same, tried = map(int, re.search(r"(\d+) of (\d+) sampled documents", message).groups())
    assert same * 2 < tried


def test_shards_without_a_manifest_are_checked_by_the_round_trip_too(tiny_data, tmp_path):
    assert not (tiny_data.data_path / "manifest.json").exists()
    sp = spm.SentencePieceProcessor(model_file=str(tiny_data.tokenizer_path))
    args = args_for(tiny_data, tmp_path)
    val = [tiny_data.data_path / "fineweb_val_000000.bin"]
    # all but the last document (it may go on in a next shard), at most 32 of them (the stdlib corpus has more)
    tried = min(len(tiny_data.val_docs) - 1, 32)
    assert train_gpt.check_shards(sp, args, val, []) == f"round_trip_{tried}/{tried}"
    other_sp = train_tokenizer(tiny_data.val_docs, tmp_path / "other.model")
    with pytest.raises(ConfigError, match=rf"(\d+) of {tried} sampled documents decode") as error:
        train_gpt.check_shards(other_sp, args, val, [])
    assert int(re.search(r"(\d+) of", str(error.value)).group(1)) * 2 < tried


SHARED = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "fineweb_sample_sp1024").is_dir(), reason="needs ../shared/data (the FineWeb sample)")
def test_sp1024_shards_with_the_sp8192_tokenizer_are_refused_naming_sp1024(tmp_path):
    """The fault as a user met it: sp1024 FineWeb shards without a manifest, TOKENIZER_PATH of the sp8192 model and
    VOCAB_SIZE=8192 trained and scored 4.0585 bpb, meaningless. Now the pre-flight refuses it and names sp1024."""
    shutil.copy(SHARED / "fineweb_sample_sp1024" / "fineweb_val_000000.bin", tmp_path / "fineweb_val_000000.bin")
    sp8192 = SHARED / "tokenizers" / "fineweb_8192_bpe.model"
    args = Hyperparameters.from_env(
        dict(
            DATA_PATH=str(tmp_path),
            TOKENIZER_PATH=str(sp8192),
            VOCAB_SIZE="8192",
            EVAL_ONLY="0",
            TRAIN_SEQ_LEN="1024",
            TRAIN_BATCH_TOKENS=str(8 * 1024),
            VAL_BATCH_SIZE=str(8 * 1024),
            LOG_DIR=str(tmp_path / "logs"),
        )
    )
    sp = spm.SentencePieceProcessor(model_file=str(sp8192))
    val = [tmp_path / "fineweb_val_000000.bin"]
    with pytest.raises(ConfigError) as error:
        train_gpt.check_shards(sp, args, val, [])
    # issue 21: RECIPE=record on sp1024 shards is this case; the data README gives the records' sp8192 download
    assert f"python3 data/build_shards.py --which-tokenizer {tmp_path}" in str(error.value)
    assert "(data/README.md)" in str(error.value)
    sp1024 = spm.SentencePieceProcessor(model_file=str(SHARED / "tokenizers" / "fineweb_1024_bpe.model"))
    assert train_gpt.check_shards(sp1024, args, val, []) == "round_trip_32/32"


# =================================================================================================
# 2. Training shards with ids outside the vocabulary
# =================================================================================================


@pytest.mark.parametrize("name", ["fineweb_train_000001.bin", "fineweb_val_000000.bin"])
def test_a_shard_with_an_id_outside_the_vocabulary_is_refused_before_training(tiny_data, tmp_path, name):
    data_path = copy_data(tiny_data, tmp_path)
    tokens = train_gpt.load_data_shard(data_path / name).numpy().copy()
    tokens[len(tokens) // 2] = tiny_data.vocab_size + 7
    build_shards.write_data_shard(data_path / name, tokens)
    with pytest.raises(ShardError) as error:
        train_gpt.preflight(args_for(tiny_data, tmp_path, DATA_PATH=data_path), ONE_CPU)
    message = str(error.value)
    assert str(data_path / name) in message and f"token id {tiny_data.vocab_size + 7}" in message
    assert f"VOCAB_SIZE={tiny_data.vocab_size}" in message and "TOKENIZER_PATH" in message


# =================================================================================================
# 3. Typos that are not near misses
# =================================================================================================


@pytest.mark.parametrize(
    "typo, ours",
    [
        ("iterations", "ITERATIONS"),
        ("Num_Layers", "NUM_LAYERS"),
        ("ITERS", "ITERATIONS"),
        ("NUM_LAY", "NUM_LAYERS"),
        ("WARMUP_STEP", "WARMUP_STEPS"),
        ("warmdown_iter", "WARMDOWN_ITERS"),
        ("model_dim", "MODEL_DIM"),
    ],
)
def test_ours_in_another_case_or_abbreviated_is_an_error_naming_ours(typo, ours):
    with pytest.raises(ConfigError) as error:
        Hyperparameters.from_env({typo: "5"})
    assert re.search(rf"\b{typo}='5'.*did you mean {ours}\?", str(error.value))


def test_no_false_alarm_on_common_variables_or_on_this_machines_environment():
    common = [
        "HOME",
        "PATH",
        "USER",
        "SHELL",
        "TERM",
        "PWD",
        "OLDPWD",
        "LANG",
        "LANGUAGE",
        "HOSTNAME",
        "LOGNAME",
        "MAIL",
        "EDITOR",
        "PAGER",
        "DISPLAY",
        "TZ",
        "SHLVL",
        "COLUMNS",
        "LINES",
        "TMPDIR",
        "SSH_TTY",
        "SSH_CLIENT",
        "LS_COLORS",
        "HF_HOME",
        "HF_TOKEN",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "DEBIAN_FRONTEND",
        "COMP_WORDBREAKS",
        "TOKENIZERS_PARALLELISM",
        "http_proxy",
        "no_proxy",
        "_",
    ]
    train_gpt.check_unknown_env({name: "x" for name in common}, KNOWN)
    train_gpt.check_unknown_env(dict(os.environ), KNOWN)


# =================================================================================================
# 4 and 10. Two identical runs: the same numbers, and the first artifact is kept
# =================================================================================================

PAIR_SETTINGS = dict(MODEL_DIM=144, ITERATIONS=8, VAL_LOSS_EVERY=4, WARMUP_STEPS=12)


@pytest.fixture(scope="module")
def pair(tiny_data, tmp_path_factory) -> tuple[Run, Run]:
    """The same config twice, into the same ARTIFACT_PATH; two CPU threads each."""
    directory = tmp_path_factory.mktemp("pair")
    runs = []
    for run_id in ("first", "second"):
        env = tiny_env(tiny_data, directory, RUN_ID=run_id, **PAIR_SETTINGS)
        run = run_script(env, directory)
        assert run.result.returncode == 0, run.result.stderr
        runs.append(run)
    return runs[0], runs[1]


def test_the_same_seed_and_config_give_the_same_losses_on_cpu(pair):
    first, second = pair
    for key in ("train_loss", "val_loss", "val_bpb"):
        assert first.losses(key) and first.losses(key) == second.losses(key), key
    assert first.score_line == second.score_line and FINAL_LINE.fullmatch(first.score_line)


def test_a_second_run_moves_the_first_artifact_aside_and_logs_where(pair):
    first, second = pair
    [old] = first.events("artifact")
    assert not first.events("artifact_previous_moved_to")
    [moved] = second.events("artifact_previous_moved_to")
    kept = Path(moved["artifact_previous_moved_to"])
    assert kept == Path(f"{first.artifact_path}.{old['sha256'][:12]}")
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == old["sha256"]  # the first run's artifact, intact
    [new] = second.events("artifact")
    assert hashlib.sha256(second.artifact_path.read_bytes()).hexdigest() == new["sha256"]
    assert sorted(p.name for p in first.artifact_path.parent.glob("*.ptz*")) == sorted([kept.name, "model.int8.ptz"])


def test_an_interrupted_save_leaves_no_temp_file_and_the_old_artifact(tmp_path, monkeypatch):
    path = tmp_path / "model.int8.ptz"
    path.write_bytes(b"an earlier run's artifact")

    def interrupted(src, dst):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(train_gpt.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_gpt.save_artifact({"quantized": {}, "w": train_gpt.torch.ones(3)}, {"compressor": "zlib"}, str(path))
    assert os.listdir(tmp_path) == [path.name] and path.read_bytes() == b"an earlier run's artifact"


# =================================================================================================
# 5. SIGINT and SIGTERM
# =================================================================================================


def interrupt_run(data: TinyData, directory: Path, signum: int) -> tuple[subprocess.CompletedProcess, list[str], Path]:
    """Start a long run, wait for a few steps, send the signal; (the finished process, its log lines, its folder)."""
    env_vars = tiny_env(data, directory, ITERATIONS=1_000_000)
    env = {k: v for k, v in os.environ.items() if k not in OUR_NAMES} | env_vars | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)], cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in proc.stdout:
        if line.startswith("step:3/"):
            break
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    log = (Path(env_vars["LOG_DIR"]) / "test.txt").read_text(encoding="utf-8")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), log.splitlines(), directory


@pytest.fixture(scope="module")
def interrupted(tiny_data, tmp_path_factory) -> dict[str, tuple]:
    return {
        name: interrupt_run(tiny_data, tmp_path_factory.mktemp(name), getattr(signal, name))
        for name in ("SIGTERM", "SIGINT")
    }


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_an_interrupted_run_exits_128_plus_the_signal_and_logs_the_step_reached(interrupted, name, code):
    result, log, directory = interrupted[name]
    assert result.returncode == code
    assert result.stderr.splitlines() == [f"interrupted: {name}; the log's last line says where the run was"]
    match = re.fullmatch(rf"interrupted:{name} step:(\d+)/1000000 train_time:(\d+)ms", log[-1])
    assert match, log[-1]
    last_logged = max(int(line.split()[0].split(":")[1].split("/")[0]) for line in log if line.startswith("step:"))
    assert int(match.group(1)) >= last_logged >= 3
    assert result.stdout.splitlines()[-1] == log[-1]
    assert sorted(p.name for p in directory.rglob("*")) == ["logs", "test.txt"]  # no artifact, no temp file


# =================================================================================================
# 6 and 7. What a CPU user sees: warm-up progress, the GPU defaults, the docstring's smoke command
# =================================================================================================


def test_warmup_logs_its_progress(pair):
    steps = [e["warmup_step"] for e in pair[0].events("warmup_step")]
    assert steps == ["1/12", "2/12", "3/12", "10/12", "12/12"]
    assert not any(line.startswith("cpu_note") for line in pair[0].lines)  # a small config: no note


def docstring_smoke_command() -> str:
    block = train_gpt.__doc__.split("# CPU smoke run")[1].split("\n", 1)[1].split("\n  #")[0]
    return " ".join(block.replace("\\", " ").split())


def two_tokens() -> train_gpt.ValData:
    """A validation split for the log header, which names where its bytes come from."""
    return train_gpt.ValData(
        torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int32), {"val_bytes": "tokenizer"}, 1, 1
    )


def test_on_cpu_the_defaults_log_a_note_pointing_at_the_smoke_command(tiny_data, tmp_path, capsys):
    args = args_for(tiny_data, tmp_path, TRAIN_BATCH_TOKENS=393_216)
    train_gpt.log_header(cpu_run(args, two_tokens(), log=train_gpt.Logger(tmp_path / "log.txt")))
    [note] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cpu_note:")]
    assert (
        note == "cpu_note: these are GPU settings (minutes a step on a CPU); a CPU smoke run: head -n 10 train_gpt.py"
    )
    # and what the note points at is true: the docstring's first command is the smoke run, and the file's first 10
    # lines hold all of it, no more
    assert train_gpt.__doc__.split("\n  # ")[1].startswith("CPU smoke run")
    head = "\n".join(SCRIPT.read_text(encoding="utf-8").splitlines()[:10])
    shown = " ".join(head.split("# CPU smoke run")[1].split("\n", 1)[1].replace("\\", " ").split())
    assert shown == docstring_smoke_command()
    assert "WARMUP_STEPS=0" in shown and "DATA_PATH=" in shown


def test_the_docstring_smoke_command_runs_from_the_repo_root_after_the_quick_start(tiny_data, tmp_path):
    # A repo root as `bash quickstart.sh` leaves it without FineWeb (data/quickstart.py names the dataset
    # and tokenizer), with the test data standing in for the standard-library text (also 512 pieces).
    name = f"pystdlib_{platform.python_version()}_sp{quickstart.STDLIB_VOCAB_SIZE}"
    (tmp_path / "data" / "datasets").mkdir(parents=True)
    (tmp_path / "data" / "tokenizers").mkdir()
    (tmp_path / "data" / "datasets" / name).symlink_to(tiny_data.data_path)
    (tmp_path / "data" / "tokenizers" / f"{name}.model").symlink_to(tiny_data.tokenizer_path)
    (tmp_path / "train_gpt.py").symlink_to(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in OUR_NAMES} | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        ["bash", "-c", docstring_smoke_command()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert FINAL_LINE.fullmatch(score_line(result.stdout.splitlines()))
    assert "\nstep:20/20 " in result.stdout and "\nwarmup_step:" not in result.stdout


def test_no_shards_error_names_data_path_where_it_points_and_the_data_readme(tmp_path, monkeypatch):
    """Issue 24 row 12: an empty DATA_PATH with an sp512 tokenizer was told to download --variant sp512, which no
    repository has, and never heard that ./data is relative to the current folder. Which shards fit which vocabulary
    is the data README's (data/README.md), not the trainer's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "datasets" / "mine_sp512").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as error:
        train_gpt.find_shards("./data/datasets/mine_sp512", "train")
    message = str(error.value)
    assert "no training shards match DATA_PATH: ./data/datasets/mine_sp512/fineweb_train_*.bin" in message
    assert f"(here: {tmp_path.resolve() / 'data' / 'datasets' / 'mine_sp512'})" in message
    assert "data/README.md" in message and "--variant" not in message


# =================================================================================================
# Issue 20: a fresh machine's faults: names meant for ours, a damaged artifact, folders, the data hint, the smoke run
# =================================================================================================


@pytest.mark.parametrize(
    "name, candidates",
    [
        ("WARMUP", "WARMUP_STEPS"),
        ("LR", "MIN_LR or MATRIX_LR or SCALAR_LR or TIED_EMBED_LR or TTT_LR"),
        ("MATRIX_LEARNING_RATE", "MATRIX_LR"),
        ("WD", "MUON_WD or ADAM_WD or EMBED_WD"),
        ("embed_weight_decay", "EMBED_WD"),
    ],
)
def test_a_name_that_starts_or_ends_like_ours_is_an_error_naming_every_candidate(name, candidates):
    with pytest.raises(ConfigError) as error:
        Hyperparameters.from_env({name: "0.1"})
    assert f"unknown environment variable {name}='0.1': did you mean {candidates}? Rename it" in str(error.value)


@pytest.mark.parametrize("name", ["PATH", "HOME", "CI", "WORLD_SIZE", "LD_LIBRARY_PATH", "DATA_HOME", "BATCH"])
def test_names_that_only_share_a_word_with_ours_pass(name):
    Hyperparameters.from_env({name: "x"})


def damaged_artifact_error(run: Run, tmp_path: Path, damage: str) -> str:
    """EVAL_ONLY=1 on a copy of run's artifact, damaged; returns stderr (the run must exit 2 and write no log)."""
    blob = run.artifact_path.read_bytes()
    header_end = blob.index(b"\n", len(train_gpt.ARTIFACT_MAGIC)) + 1
    if damage == "cut":
        blob = blob[: len(blob) * 2 // 3]
    elif damage == "random payload":
        blob = blob[:header_end] + np.random.default_rng(0).bytes(len(blob) - header_end)
    else:  # one flipped bit, in the header line or in the payload
        at = header_end - 20 if damage == "flipped header byte" else (header_end + len(blob)) // 2
        blob = blob[:at] + bytes([blob[at] ^ 1]) + blob[at + 1 :]
    path = tmp_path / f"{damage.replace(' ', '_')}.ptz"
    path.write_bytes(blob)
    env = dict(run.env, EVAL_ONLY="1", ARTIFACT_PATH=str(path), RUN_ID="rescore_" + path.stem)
    result = run_script(env, tmp_path).result
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert not (Path(env["LOG_DIR"]) / f"{env['RUN_ID']}.txt").exists()  # found in the pre-flight: no log
    return result.stderr


@pytest.mark.parametrize("damage", ["cut", "random payload", "flipped payload byte", "flipped header byte"])
def test_eval_only_on_a_damaged_artifact_exits_2_saying_so(pair, tmp_path, damage):
    stderr = damaged_artifact_error(pair[0], tmp_path, damage)
    assert re.search(r"error: ARTIFACT_PATH=\S+ is damaged \(.+\): copy it again from where the run wrote it", stderr)


def test_a_log_dir_or_artifact_folder_through_a_file_is_an_error_naming_it(tiny_data, tmp_path):
    (tmp_path / "a_file").write_text("")
    for name, value in ("LOG_DIR", tmp_path / "a_file" / "logs"), ("ARTIFACT_PATH", tmp_path / "a_file" / "m.ptz"):
        run = run_script(tiny_env(tiny_data, tmp_path, **{name: value}), tmp_path)
        assert run.result.returncode == 2 and "Traceback" not in run.result.stderr, run.result.stderr
        assert (
            f"error: {name}: cannot write in {value.parent if name == 'ARTIFACT_PATH' else value}" in run.result.stderr
        )
    assert (tmp_path / "a_file").read_text() == ""  # nothing already there is touched


@pytest.mark.parametrize("recipe", ["record", "p180"])
def test_a_recipe_without_its_sp8192_data_points_at_the_data_readme(tiny_data, tmp_path, recipe):
    args = args_for(
        tiny_data,
        tmp_path,
        RECIPE=recipe,
        DATA_PATH=tmp_path / "none",
        VOCAB_SIZE="8192",
        NUM_LOOPS="0",
        PARALLEL_RESIDUAL_START="-1",
    )
    with pytest.raises(FileNotFoundError) as error:
        train_gpt.preflight(args, ONE_CPU)
    message = str(error.value)  # the sp8192 download and the re-tokenizing are in data/README.md's section
    assert "fineweb10B_sp8192" not in message and "which shards fit which VOCAB_SIZE" in message
    assert "data/README.md" in message


def test_the_docstring_smoke_run_warms_down_within_its_steps():
    """It kept WARMDOWN_ITERS=3000 with ITERATIONS=20: the learning rate stayed under 1% of its peak (4.957 bpb)."""
    env = dict(re.findall(r"([A-Z_]+)=(\S+)", docstring_smoke_command()))
    args = Hyperparameters.from_env({k: v for k, v in env.items() if not v.startswith("$(")})
    multipliers = [train_gpt.schedule(step, 0.0, args)[0] for step in range(args.iterations)]
    assert multipliers[0] == 1.0 and multipliers[len(multipliers) // 2] == 1.0 and multipliers[-1] < 0.5


# =================================================================================================
# README.md's "Bad input and faults" table: every row triggered, its quoted text found
# =================================================================================================


def fault_rows() -> list[tuple[str, list[str]]]:
    """(first column, the quoted snippets of the second) for each row of the table."""
    section = README.read_text(encoding="utf-8").split("## Bad input and faults")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [(cells[0].lstrip("| "), re.findall(r"`([^`]+)`", cells[1])) for cells in rows[1:]]


def error_text(call) -> str:
    with pytest.raises(Exception) as error:
        call()
    return str(error.value)


def trigger(key: str, data: TinyData, tmp_path: Path, request) -> str:
    """Cause the row's fault; return what the user sees (message, printed lines, log lines)."""
    args = lambda **kw: args_for(data, tmp_path, **kw)  # noqa: E731
    if key == "misspelt":
        return error_text(lambda: Hyperparameters.from_env({"iterations": "5"}))
    if key == "meant for ours":
        return error_text(lambda: Hyperparameters.from_env({"WARMUP": "0"}))
    if key == "recipe's vocabulary":
        no_data = args(RECIPE="p180", DATA_PATH=tmp_path / "sp8192", VOCAB_SIZE="8192")
        return error_text(lambda: train_gpt.preflight(no_data, ONE_CPU))
    if key == "parse":
        return error_text(lambda: Hyperparameters.from_env({"MODEL_DIM": "sixty"}))
    if key == "retired":
        return "\n".join(
            error_text(lambda: Hyperparameters.from_env(env))
            for env in ({"EMBEDDING_DIM": "256"}, {"TIE_EMBEDDINGS": "0"})
        )
    if key == "another trainer":
        return error_text(lambda: Hyperparameters.from_env({"NUM_ITERATIONS": "3"}))
    if key == "recipe set":
        run = run_script(tiny_env(data, tmp_path, RECIPE="record", NUM_LOOPS="0"), tmp_path)
        return run.result.stderr
    if key == "not a SentencePiece":
        (tmp_path / "t.vocab").write_text("<unk>\t0\n")
        return error_text(lambda: train_gpt.load_tokenizer(str(tmp_path / "t.vocab"), 512))
    if key == "names a folder":
        return error_text(lambda: train_gpt.preflight(args(ARTIFACT_PATH=f"{tmp_path}/newdir/"), ONE_CPU))
    if key == "no shards":
        return error_text(lambda: train_gpt.preflight(args(DATA_PATH=tmp_path / "nothing"), ONE_CPU))
    if key in ("truncated", "token id"):
        folder = copy_data(data, tmp_path)
        shard = folder / "fineweb_train_000001.bin"
        if key == "truncated":
            shard.write_bytes(shard.read_bytes()[:-3])
        else:
            tokens = np.append(train_gpt.load_data_shard(shard).numpy(), data.vocab_size + 7)
            build_shards.write_data_shard(shard, tokens)
        return error_text(lambda: train_gpt.preflight(args(DATA_PATH=folder), ONE_CPU))
    if key == "another vocabulary":
        return error_text(lambda: train_gpt.load_tokenizer(str(data.tokenizer_path), 1024))
    if key == "did not make":
        wrong = tmp_path / "wrong.model"
        train_tokenizer(data.train_docs[::-1][: len(data.train_docs) // 2], wrong)
        return error_text(lambda: train_gpt.preflight(args(TOKENIZER_PATH=wrong), ONE_CPU))
    if key == "cannot be made":
        (tmp_path / "a_file").write_text("")
        return error_text(lambda: train_gpt.preflight(args(LOG_DIR=tmp_path / "a_file" / "logs"), ONE_CPU))
    if key == "without room":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(train_gpt.shutil, "disk_usage", disk_with_free(1000))
            return error_text(lambda: train_gpt.preflight(args(), ONE_CPU))
    if key == "does nothing":
        return error_text(lambda: Hyperparameters.from_env({"ENABLE_LOOPING_AT": "0.5"}))
    if key == "damaged":
        return damaged_artifact_error(request.getfixturevalue("pair")[0], tmp_path, "cut")
    if key in ("artifact", "defaults"):
        pair = request.getfixturevalue("pair")
        text = "\n".join(pair[0].lines + pair[1].lines)
        if key == "defaults":
            log = train_gpt.Logger(tmp_path / "h.txt")
            train_gpt.log_header(cpu_run(args(TRAIN_BATCH_TOKENS=393_216), two_tokens(), log=log))
            text += "\n" + (tmp_path / "h.txt").read_text(encoding="utf-8")
        return text
    if key == "miscount":
        train_tokenizer(data.train_docs, tmp_path / "odd.model", remove_extra_whitespaces=False)
        return error_text(lambda: train_gpt.load_tokenizer(str(tmp_path / "odd.model"), 512))
    if key == "exists":
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "test.txt").write_text("")
        return error_text(lambda: train_gpt.preflight(args(), ONE_CPU))
    if key == "copy of a validation":
        folder = copy_data(data, tmp_path)
        shutil.copy(folder / "fineweb_val_000000.bin", folder / "fineweb_train_000002.bin")
        return error_text(lambda: train_gpt.preflight(args(DATA_PATH=folder), ONE_CPU))
    if key == "another tokenizer":
        made = args(TOKENIZER_PATH=request.getfixturevalue("other_tokenizer")[0])
        path = saved_artifact(made, tmp_path / "a.ptz")
        other = error_text(lambda: train_gpt.preflight(args(EVAL_ONLY="1", ARTIFACT_PATH=path), ONE_CPU))
        return (
            other + "\n" + error_text(lambda: train_gpt.preflight(args(EVAL_ONLY="1", ARTIFACT_PATH=tmp_path), ONE_CPU))
        )
    if key == "arguments":
        env = {k: v for k, v in os.environ.items() if k not in OUR_NAMES} | tiny_env(data, tmp_path)
        return subprocess.run(
            [sys.executable, str(SCRIPT), "ITERATIONS=3"], env=env, capture_output=True, text=True
        ).stderr
    if key in ("disk fills up", "full at export"):
        _, out, err, _ = request.getfixturevalue("disk_full_run")
        return err if key == "disk fills up" else out
    if key == "not finite":
        return error_text(lambda: train_gpt.check_finite(train_gpt.torch.tensor(3), ONE_CPU))
    if key == "SIGTERM":
        result, log, _ = request.getfixturevalue("interrupted")["SIGTERM"]
        return f"exit {result.returncode}\n{result.stderr}\n" + "\n".join(log)
    raise KeyError(key)


ROW_KEYS = [
    "misspelt",
    "meant for ours",
    "parse",
    "another trainer",
    "retired",
    "recipe set",
    "no shards",
    "recipe's vocabulary",
    "truncated",
    "token id",
    "not a SentencePiece",
    "another vocabulary",
    "did not make",
    "copy of a validation",
    "miscount",
    "exists",
    "cannot be made",
    "without room",
    "names a folder",
    "does nothing",
    "damaged",
    "another tokenizer",
    "arguments",
    "artifact",
    "disk fills up",
    "full at export",
    "not finite",
    "SIGTERM",
    "defaults",
]


def test_every_row_of_the_fault_table_has_a_trigger():
    rows = fault_rows()
    assert len(rows) == len(ROW_KEYS)
    for (fault, snippets), key in zip(rows, ROW_KEYS):
        assert key in fault and snippets, (fault, key)


@pytest.mark.parametrize("index", range(len(ROW_KEYS)), ids=ROW_KEYS)
def test_readme_fault_table_is_true(tiny_data, tmp_path, request, index):
    fault, snippets = fault_rows()[index]
    seen = trigger(ROW_KEYS[index], tiny_data, tmp_path, request)
    for snippet in snippets:
        variables = ("DATA_PATH", "VOCAB_SIZE`", "LOG_DIR", "ARTIFACT_PATH")
        if any(name in snippet for name in variables) and ":" not in snippet:
            continue  # a variable named in the text, not quoted output
        pattern = ".*?".join(re.escape(part) for part in snippet.split("…"))
        assert re.search(pattern, seen, re.DOTALL), (fault, snippet, seen[-2000:])


# =================================================================================================
# Issue 24: a fresh machine, round 3 (each test names its row of the table)
# =================================================================================================


def cannot_write_in(folder: Path) -> bool:
    """True where even root cannot write (a read-only mount): /sys on Linux. chmod does not stop root."""
    try:
        (folder / ".probe").write_bytes(b"")
    except OSError:
        return True
    (folder / ".probe").unlink()
    return False


@pytest.mark.parametrize("where", ["an existing folder", "a trailing slash"])
def test_an_artifact_path_that_names_a_folder_is_refused_before_training(tiny_data, tmp_path, where):
    """Rows 1 and 9: the run trained, then lost its model at export (IsADirectoryError), or wrote a file 'newdir'."""
    path = f"{tmp_path / 'out'}/" if where == "a trailing slash" else tmp_path
    with pytest.raises(ConfigError, match=re.escape(f"ARTIFACT_PATH={path} names a folder: name the file.")):
        train_gpt.preflight(args_for(tiny_data, tmp_path, ARTIFACT_PATH=path), ONE_CPU)
    assert not (tmp_path / "out").exists() and not (tmp_path / "logs").exists()


@pytest.mark.skipif(not cannot_write_in(Path("/sys")), reason="needs a folder that cannot be written (/sys)")
@pytest.mark.parametrize("name", ["ARTIFACT_PATH", "LOG_DIR"])
def test_an_artifact_or_log_folder_that_cannot_be_written_is_refused_before_training(tiny_data, tmp_path, name):
    """Rows 2 and 4: the pre-flight only made the folder; a read-only one failed at export (the model lost) or at the
    first log line, each with a double OSError traceback. Now a probe file is written and removed up front."""
    value = "/sys/model.ptz" if name == "ARTIFACT_PATH" else "/sys"
    run = run_script(tiny_env(tiny_data, tmp_path, **{name: value}), tmp_path)
    assert run.result.returncode == 2 and "Traceback" not in run.result.stderr
    assert run.result.stderr.startswith(f"error: {name}: cannot write in /sys (")


def test_a_tokenizer_path_that_is_not_a_sentencepiece_model_is_a_clear_error(tiny_data, tmp_path):
    """Row 5: a text file or a .vocab was a RuntimeError traceback from SentencePiece."""
    vocab = tmp_path / "fineweb_512_bpe.vocab"
    vocab.write_text("<unk>\t0\n<s>\t0\n")
    with pytest.raises(ConfigError, match=f"TOKENIZER_PATH={vocab} is not a SentencePiece model"):
        train_gpt.load_tokenizer(str(vocab), 512)


def test_an_mlp_multiplier_that_leaves_no_units_is_refused():
    """Row 6: MLP_MULT=0.01 passed validation and divided by zero in Muon at step 1."""
    with pytest.raises(ConfigError, match=r"MLP_MULT=0.01 leaves the MLP no units at MODEL_DIM=64"):
        Hyperparameters.from_env({"MLP_MULT": "0.01", "MODEL_DIM": "64", "NUM_HEADS": "2", "NUM_KV_HEADS": "1"})


def test_a_long_sequence_without_ttt_is_not_refused_for_the_ttt_chunk():
    """Row 7: TRAIN_SEQ_LEN=65536 with TTT off was refused for TTT_CHUNK_TOKENS, a feature the user never turned on."""
    env = {"TRAIN_SEQ_LEN": "65536", "TRAIN_BATCH_TOKENS": str(8 * 65536), "VAL_BATCH_SIZE": str(8 * 65536)}
    assert Hyperparameters.from_env(env).train_seq_len == 65536
    with pytest.raises(ConfigError, match="TTT_CHUNK_TOKENS=32768 must be >= TRAIN_SEQ_LEN=65536 with TTT_ENABLED"):
        Hyperparameters.from_env(env | {"TTT_ENABLED": "1"})


def test_the_ttt_chunk_error_names_the_chunk_and_the_recipe_that_turned_ttt_on():
    """Issue 34 row 17: RECIPE=p180 TRAIN_SEQ_LEN=65536 named neither the chunk's value nor that the recipe turned TTT
    on; TTT_ENABLED=1 TTT_CHUNK_TOKENS=64 did not name the 64."""
    env = {"RECIPE": "p180", "TRAIN_SEQ_LEN": "65536", "TRAIN_BATCH_TOKENS": str(8 * 65536)}
    env |= {"VAL_BATCH_SIZE": str(8 * 65536)}
    with pytest.raises(ConfigError) as caught:
        Hyperparameters.from_env(env)
    assert train_gpt.recipe_note(str(caught.value), env) == (
        "TTT_CHUNK_TOKENS=32768 must be >= TRAIN_SEQ_LEN=65536 with TTT_ENABLED=True. "
        "(RECIPE=p180 sets TTT_ENABLED=True: set it to override.)"
    )
    with pytest.raises(
        ConfigError, match=r"TTT_CHUNK_TOKENS=64 must be >= TRAIN_SEQ_LEN=4096 with TTT_ENABLED=True\.$"
    ):
        Hyperparameters.from_env({"TTT_ENABLED": "1", "TTT_CHUNK_TOKENS": "64"})


def test_moved_aside_artifacts_are_ignored_by_git():
    """Row 10: each rerun with the default ARTIFACT_PATH leaves final_model.int8.ptz.<sha256[:12]> in the root."""
    names = ["final_model.int8.ptz", "final_model.int8.ptz.0123456789ab"]
    result = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True)
    assert result.stdout.split() == names


@pytest.mark.parametrize(
    "name, ours",
    [
        ("NUM_ITERATIONS", "ITERATIONS"),
        ("MAX_STEPS", "ITERATIONS"),
        ("N_LAYER", "NUM_LAYERS"),
    ],
)
def test_other_trainers_names_for_ours_are_errors_naming_ours(name, ours):
    """Row 11: nanoGPT's and others' names were silently ignored."""
    with pytest.raises(ConfigError, match=rf"{name}='3': did you mean {ours}\?"):
        Hyperparameters.from_env({name: "3"})


def test_an_error_about_a_value_the_recipe_set_says_the_recipe_set_it(tiny_data, tmp_path):
    """Row 13: RECIPE=record on sp1024 data named VOCAB_SIZE=8192, a value the user never typed."""
    env = {k: v for k, v in tiny_env(tiny_data, tmp_path).items() if k not in ("VOCAB_SIZE", "NUM_LAYERS")}
    run = run_script(env | {"RECIPE": "record", "VOCAB_SIZE": "8192", "NUM_LOOPS": "0"}, tmp_path)
    assert run.result.returncode == 2
    assert "has a vocabulary of 512 but VOCAB_SIZE=8192" in run.result.stderr  # the user's own: no note
    assert "RECIPE=record sets" not in run.result.stderr
    message = "PARALLEL_RESIDUAL_START=7 must be -1 (off) or a layer below NUM_LAYERS=2."
    assert train_gpt.recipe_note(message, {"RECIPE": "record"}) == (
        f"{message} (RECIPE=record sets PARALLEL_RESIDUAL_START=7: set it to override.)"
    )
    run = run_script(tiny_env(tiny_data, tmp_path, RECIPE="record", NUM_LOOPS="0", RUN_ID="r2"), tmp_path)
    assert run.result.stderr.strip().endswith("(RECIPE=record sets PARALLEL_RESIDUAL_START=7: set it to override.)")


def test_reading_an_artifact_whose_compressor_is_missing_does_not_suggest_another(monkeypatch):
    """Row 14: EVAL_ONLY of a brotli artifact without brotli suggested COMPRESSOR=lzma, which cannot read it."""

    def missing(name):
        raise ImportError(name)

    monkeypatch.setattr(train_gpt.importlib, "import_module", missing)
    with pytest.raises(ConfigError) as reading:
        train_gpt.decompress(b"", "brotli", 2, 0)
    assert str(reading.value) == "COMPRESSOR=brotli needs the optional brotli package: pip install brotli."
    with pytest.raises(ConfigError, match=r"pip install brotli \(or use COMPRESSOR=lzma"):
        train_gpt.compressor("brotli")  # for writing, another compressor is a way out


def test_ttt_on_a_split_of_one_chunk_says_nothing_adapted(tiny_data, tmp_path):
    """Row 15: the ttt score equalled the sliding window's and the log did not say that no adaptation ran."""
    args = args_for(tiny_data, tmp_path, TTT_ENABLED="1", EVAL_STRIDE="32", TTT_CHUNK_TOKENS="1000000")
    run = dataclasses.replace(train_gpt.preflight(args, ONE_CPU), log=train_gpt.Logger(tmp_path / "ttt.txt"))
    train_gpt.torch.manual_seed(0)
    sums = train_gpt.score_with_ttt(run, train_gpt.GPT(args))
    sliding = train_gpt.score_windows(train_gpt.GPT(args), run.val, ONE_CPU, 32)
    assert sums[1] == sliding[1]
    total = run.val.tokens.numel() - 1
    note = f"ttt_note:no_adaptation val_predictions:{total} ttt_chunk_tokens:1000000"
    assert (tmp_path / "ttt.txt").read_text().splitlines() == [note]


def test_a_world_size_that_does_not_divide_8_is_said_once(tiny_data, tmp_path):
    """Row 16: with --nproc_per_node=3 every rank printed the error (3 times). Rank 0 says it; the others exit 2."""
    env = tiny_env(tiny_data, tmp_path) | {"WORLD_SIZE": "3", "LOCAL_RANK": "0"}
    said = [run_script(env | {"RANK": rank, "RUN_ID": f"r{rank}"}, tmp_path).result for rank in ("0", "1")]
    assert [r.returncode for r in said] == [2, 2]
    assert said[0].stderr == "error: WORLD_SIZE=3 must divide 8: run with --nproc_per_node of 1, 2, 4 or 8.\n"
    assert said[1].stderr == ""


def test_an_interrupt_during_warmup_logs_step_zero(tiny_data, tmp_path):
    """Row 17: SIGINT during the compile warm-up left no step: in the log's last line."""
    env = tiny_env(tiny_data, tmp_path, WARMUP_STEPS="100000", ITERATIONS="5")
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in OUR_NAMES} | env | {"OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in process.stdout:
        if line.startswith("warmup_step:3/"):
            break
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and stderr == "interrupted: SIGINT; the log's last line says where the run was\n"
    last = (tmp_path / "logs" / "test.txt").read_text().splitlines()[-1]
    assert re.fullmatch(r"interrupted:SIGINT step:0/5 warmup_step:\d+/100000", last), last


def test_an_interrupt_while_scoring_leaves_the_scoring_path_in_the_progress(tiny_data, tmp_path):
    """Row 17: SIGTERM during the final evaluation said "where training stopped"; the progress that main() logs with
    `interrupted:` now names the scoring path that was running (here the sliding window, after the round trip)."""
    args = args_for(tiny_data, tmp_path, EVAL_STRIDE="32")
    run = dataclasses.replace(train_gpt.preflight(args, ONE_CPU), log=train_gpt.Logger(tmp_path / "s.txt"))
    run.log.progress = {"step": "20/20"}
    model = train_gpt.GPT(args)

    def observe(kind):  # a SIGTERM arriving while the sliding-window pass runs
        def interrupt(positions, hidden):
            raise KeyboardInterrupt("SIGTERM")

        return interrupt if kind == "sliding_window" else None

    header, weights = train_gpt.read_artifact(str(saved_artifact(args, tmp_path / "a.ptz")), args)
    with pytest.raises(KeyboardInterrupt):
        train_gpt.score_artifact(run, model, header, weights, observe)
    assert run.log.progress == {"step": "20/20", "scoring": "sliding_window"}
    lines = (tmp_path / "s.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines if line.split(":")[0].endswith("_val_loss")] == ["roundtrip_val_loss"]


# =================================================================================================
# Issue 34: a fresh machine, round 4 (each test names its row of the table)
# =================================================================================================


class DiskFillsAfter(io.BytesIO):
    """A log file on a disk that fills up: the first `lines` writes reach it, then each fails as on a full disk."""

    def __init__(self, lines: int):
        super().__init__()
        self.left = lines

    def write(self, data):
        self.left -= 1
        if self.left < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


@pytest.fixture(scope="module")
def disk_full_run(tiny_data, tmp_path_factory):
    """A run whose log disk fills after its 7th line and whose ARTIFACT_PATH cannot be written (ENOSPC), in process:
    (its Run, what it printed, the folder, the temp folder the artifact fell back to)."""
    directory = tmp_path_factory.mktemp("disk_full")
    args = args_for(tiny_data, directory, ITERATIONS=4, GPTQ_CALIBRATION_BATCHES=3)
    run = train_gpt.preflight(args, ONE_CPU)
    run.log.file = DiskFillsAfter(7)  # the source, 4 header lines, 2 steps
    real_replace = os.replace

    def full_disk(src, dst):  # the temp file was written; its rename into ARTIFACT_PATH finds the disk full
        if str(dst) == args.artifact_path:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    patch = pytest.MonkeyPatch()
    patch.setattr(train_gpt.os, "replace", full_disk)
    patch.setattr(train_gpt.tempfile, "gettempdir", lambda: str(directory / "tmp"))
    (directory / "tmp").mkdir()
    out, err, threads = io.StringIO(), io.StringIO(), train_gpt.torch.get_num_threads()
    train_gpt.torch.set_num_threads(1)  # as the subprocess runs do: two pytest workers share the cores
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            train_gpt.train_and_score(run)
    finally:
        patch.undo()
        train_gpt.torch.set_num_threads(threads)
    return run, out.getvalue(), err.getvalue(), directory


def test_a_log_disk_that_fills_during_training_does_not_end_the_run(disk_full_run):
    """Row 2: a failed log write ended training at step 45/60 with three chained tracebacks, and no artifact. Now it is
    said once on stderr and the run goes on to the artifact and the score, its lines still on the console."""
    run, out, err, directory = disk_full_run
    [said] = [line for line in err.splitlines() if line.startswith("log_write_failed:")]
    assert said == f"log_write_failed: {run.log.path} (No space left on device); the run goes on, console only"
    assert "\nstep:2/4 " in out and "\nstep:4/4 " in out and FINAL_LINE.fullmatch(out.splitlines()[-1])


def test_an_artifact_path_on_a_full_disk_writes_the_artifact_to_a_fallback_and_scores_it(disk_full_run):
    """Row 1: the export's OSError (Errno 28) lost the model. Now the log names the failed place and the fallback one
    (the temp folder), the artifact there is whole, and it is what the run scores."""
    run, out, err, directory = disk_full_run
    fallback = directory / "tmp" / f"{run.args.run_id}.ptz"
    failed = f"artifact_write_failed:{run.args.artifact_path} reason:No_space_left_on_device"
    [line] = [line for line in out.splitlines() if line.startswith("artifact:")]
    assert failed in out and line.startswith(f"artifact:{fallback} sha256:")
    assert out.index(failed) < out.index(line) < out.index("final_int8_zlib_roundtrip_exact")
    assert not Path(run.args.artifact_path).exists()
    header, _ = train_gpt.read_artifact(str(fallback), run.args)
    assert header["tokenizer_sha256"] == hashlib.sha256(Path(run.args.tokenizer_path).read_bytes()).hexdigest()


def disk_with_free(free: int):
    """shutil.disk_usage of a disk with `free` bytes free, for the pre-flight's check."""
    return lambda folder: shutil._ntuple_diskusage(10**12, 10**12 - free, free)


@pytest.mark.parametrize("name", ["ARTIFACT_PATH", "LOG_DIR"])
def test_a_disk_without_room_for_the_artifact_and_the_log_is_refused_before_training(tiny_data, tmp_path, name):
    """Rows 1 and 2: a full disk was found at export (the model lost) or by a log write mid-run. Now the pre-flight
    checks the free space where each goes against what the run may write there: the log's bound (~200 bytes a line)
    and, for ARTIFACT_PATH, an artifact at the limit and the log (which may share its disk)."""
    args = args_for(tiny_data, tmp_path, ARTIFACT_PATH=tmp_path / "out" / "model.ptz")
    log_bytes = 200 * (args.iterations // args.train_log_every + 1000)
    need = log_bytes + (train_gpt.ARTIFACT_LIMIT_BYTES if name == "ARTIFACT_PATH" else 0)
    folder = tmp_path / "out" if name == "ARTIFACT_PATH" else tmp_path / "logs"
    real = shutil.disk_usage
    with pytest.MonkeyPatch.context() as patch:
        for free in (need - 1, need):  # for ARTIFACT_PATH, need - 1 is room for the artifact alone, not the log too
            disk = disk_with_free(free)
            patch.setattr(train_gpt.shutil, "disk_usage", lambda f: disk(f) if Path(f) == folder else real(f))
            if free < need:
                with pytest.raises(ConfigError) as error:
                    train_gpt.preflight(args, ONE_CPU)
            else:
                assert train_gpt.preflight(args, ONE_CPU).args is args  # exactly enough: it passes
    assert str(error.value).startswith(
        f"{name}: {folder} has {need - 1:,} bytes free, under the {need:,} this run may write there"
    )
    assert f"point {name} at another disk" in str(error.value)
    assert not (tmp_path / "logs" / "test.txt").exists()  # nothing written: no log, no training


def test_eval_only_needs_room_for_its_log_not_for_an_artifact(tiny_data, tmp_path):
    """An EVAL_ONLY run writes no artifact: a disk with room for its log is enough."""
    path = saved_artifact(args_for(tiny_data, tmp_path), tmp_path / "a.ptz")
    args = args_for(tiny_data, tmp_path, EVAL_ONLY="1", ARTIFACT_PATH=path)
    log_bytes = 200 * (args.iterations // args.train_log_every + 1000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_gpt.shutil, "disk_usage", disk_with_free(log_bytes))
        assert train_gpt.preflight(args, ONE_CPU).artifact is not None
        patch.setattr(train_gpt.shutil, "disk_usage", disk_with_free(log_bytes - 1))
        with pytest.raises(ConfigError, match=f"has {log_bytes - 1:,} bytes free, under the {log_bytes:,}"):
            train_gpt.preflight(args, ONE_CPU)


def test_an_interrupt_during_gptq_calibration_says_how_far_it_went(disk_full_run, tiny_data, tmp_path):
    """Row 10: GPTQ_CALIBRATION_BATCHES=100000000000 was silent after the last validation line until killed, and the
    interrupt logged the last training step, no sign of GPTQ. Now its first batch logs how long the rest will take,
    and the interrupt's line says how far calibration went."""
    run, out, _, _ = disk_full_run
    assert run.log.progress["gptq_calibration"] == "3/3" and "gptq_hessians:" in out  # the whole run: every batch
    args = args_for(tiny_data, tmp_path, GPTQ_CALIBRATION_BATCHES=100_000_000_000)
    log = train_gpt.Logger(tmp_path / "gptq.txt")
    run = cpu_run(args, train_files=[tiny_data.data_path / "fineweb_train_000000.bin"], log=log)
    run.log.progress = {"step": "10/10", "train_time": "5ms"}
    calls = []

    def interrupted(self, *shape):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt("SIGINT")
        return real_next_batch(self, *shape)

    real_next_batch = train_gpt.DistributedTokenLoader.next_batch
    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(train_gpt.DistributedTokenLoader, "next_batch", interrupted)
        train_gpt.export(run, train_gpt.GPT(args), "raw", 5.0)
    assert run.log.progress == {"step": "10/10", "train_time": "5ms", "gptq_calibration": "5/100000000000"}
    [first] = (tmp_path / "gptq.txt").read_text().splitlines()  # the first batch; the next line: at a tenth
    assert re.fullmatch(r"gptq_calibration:1/100000000000 hessian_time:\d+ms tokens:\d+ left_est:\d+ms", first)
    assert int(first.split("left_est:")[1][:-2]) > 1e8 * int(first.split("hessian_time:")[1].split("ms")[0])


def test_gptq_calibration_logs_its_first_batch_then_each_tenth(tiny_data, tmp_path):
    """Row 10: a long calibration is never silent: a line after the first micro-batch and after each tenth, with the
    time spent, the tokens seen (all ranks') and an estimate of the time left."""
    args = args_for(tiny_data, tmp_path, GPTQ_CALIBRATION_BATCHES=20)
    log = train_gpt.Logger(tmp_path / "gptq.txt")
    run = cpu_run(args, train_files=[tiny_data.data_path / "fineweb_train_000000.bin"], log=log)
    train_gpt.collect_hessians(run, train_gpt.GPT(args))
    events = [dict(token.split(":", 1) for token in line.split()) for line in log.path.read_text().splitlines()]
    assert [e["gptq_calibration"] for e in events] == [f"{i}/20" for i in (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20)]
    micro_batch_tokens = args.train_batch_tokens // train_gpt.GRAD_ACCUM_TOTAL
    assert [int(e["tokens"]) for e in events] == [
        i * micro_batch_tokens for i in (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20)
    ]
    assert events[-1]["left_est"] == "0ms" and all(e["hessian_time"].endswith("ms") for e in events)


@pytest.mark.parametrize("model_dim", [64, 144])
def test_the_artifact_line_counts_the_quantized_tensors_and_says_when_none_was(tiny_data, tmp_path, model_dim):
    """Row 20: MATRIX_BITS=2 EMBED_BITS=2 on a model whose tensors are all small printed final_int2_... lines though
    nothing was quantized (tensors of at most 65,536 values stay float). The artifact line now counts the quantized
    tensors of the payload, and a note says when there were none."""
    bits = dict(MATRIX_BITS="2", EMBED_BITS="2", MATRIX_CLIP_SIGMAS="2", EMBED_CLIP_SIGMAS="2", MODEL_DIM=model_dim)
    path = saved_artifact(args_for(tiny_data, tmp_path, **bits), tmp_path / "int2.ptz")
    args = args_for(tiny_data, tmp_path, EVAL_ONLY="1", ARTIFACT_PATH=path, **bits)
    run = dataclasses.replace(train_gpt.preflight(args, ONE_CPU), log=train_gpt.Logger(tmp_path / "int2.txt"))
    train_gpt.score_artifact(run, train_gpt.GPT(args), *run.artifact)
    lines = [line for line in (tmp_path / "int2.txt").read_text().splitlines() if not line.startswith("phase:")]
    tensors = len(train_gpt.GPT(args).state_dict())
    quantized = 0 if model_dim == 64 else 1  # 512 x 144 = 73,728 values: the embedding, at MODEL_DIM=144
    assert lines[0].startswith(f"artifact:{path} ") and f" quantized_tensors:{quantized}/{tensors} " in lines[0]
    notes = ["quant_note:nothing_quantized quantized_only_over_values:65536"] if quantized == 0 else []
    assert lines[1 : 1 + len(notes)] == notes and lines[1 + len(notes)].startswith("roundtrip_val_loss:")


def test_enable_looping_at_set_without_loops_is_an_error_but_a_recipes_own_value_is_not():
    """Row 21: ENABLE_LOOPING_AT=0.5 without NUM_LOOPS was silently ignored (no loop ever ran). Set by hand with the
    loops off it is an error now; a recipe that keeps the value with its loops off (p180: the 2026-04-05 record's
    0.5, NUM_LOOPS=0) is not, nor a 0 set by hand."""
    with pytest.raises(ConfigError, match=r"^ENABLE_LOOPING_AT=0.5 does nothing with NUM_LOOPS=0: set NUM_LOOPS > 0"):
        Hyperparameters.from_env({"ENABLE_LOOPING_AT": "0.5"})
    with pytest.raises(ConfigError, match=r"^ENABLE_LOOPING_AT=0.35 does nothing"):  # the recipe's loops turned off
        Hyperparameters.from_env({"RECIPE": "record", "NUM_LOOPS": "0", "ENABLE_LOOPING_AT": "0.35"})
    built = {
        "": {},
        "p180": {"RECIPE": "p180"},  # 0.5 inherited, its loops off
        "record": {"RECIPE": "record"},
        "record_2026_04_05": {"RECIPE": "record_2026_04_05"},
        "p180, 0 by hand": {"RECIPE": "p180", "ENABLE_LOOPING_AT": "0"},
        "loops on": {"NUM_LOOPS": "1", "LOOP_END": "1", "ENABLE_LOOPING_AT": "0.5"},
    }
    looping_at = {name: Hyperparameters.from_env(env).enable_looping_at for name, env in built.items()}
    assert looping_at == {
        "": 0.0,
        "p180": 0.5,
        "record": 0.35,
        "record_2026_04_05": 0.5,
        "p180, 0 by hand": 0.0,
        "loops on": 0.5,
    }


@pytest.fixture(scope="module")
def other_tokenizer(tiny_data, tmp_path_factory) -> tuple[Path, object]:
    """A tokenizer of the same size and settings trained on other text: other ids for the same pieces."""
    path = tmp_path_factory.mktemp("other_tokenizer") / "other.model"
    return path, train_tokenizer(tiny_data.train_docs[::-1][: len(tiny_data.train_docs) // 2], path)


@pytest.mark.parametrize("name", ["fineweb_val_000001.bin", "fineweb_train_000001.bin"])
def test_any_shard_made_by_another_tokenizer_of_the_same_size_is_refused(tiny_data, tmp_path, other_tokenizer, name):
    """Rows 5 and 7: one of two validation shards made by another tokenizer passed (round_trip_54/64 over a half
    threshold), and only the first training shard was checked. Now each shard's sampled documents must all round-trip."""
    folder = copy_data(tiny_data, tmp_path)
    half = len(tiny_data.val_docs) // 2 if "val" in name else len(tiny_data.train_docs) // 2
    docs = tiny_data.val_docs[:half] if "val" in name else tiny_data.train_docs[half:]
    build_shards.write_data_shard(folder / name, helpers_encode(other_tokenizer[1], docs))
    args = args_for(tiny_data, tmp_path, DATA_PATH=folder)
    with pytest.raises(ConfigError) as error:
        train_gpt.preflight(args, ONE_CPU)
    message = str(error.value)
    assert f"TOKENIZER_PATH={tiny_data.tokenizer_path} did not make the shards in {folder}" in message
    same, tried = map(
        int, re.search(rf"(\d+) of (\d+) sampled documents decode and .* own ids \({name}\)", message).groups()
    )
    assert same < tried  # every document must round-trip: one that does not is enough


def test_a_training_shard_that_is_a_copy_of_a_validation_shard_is_refused(tiny_data, tmp_path):
    """Row 6: the validation shard copied in as a training shard trained on the validation set (2.874 bpb against
    3.191) without a word. A training shard byte-identical to a validation one is an error naming both."""
    folder = copy_data(tiny_data, tmp_path)
    shutil.copy(folder / "fineweb_val_000000.bin", folder / "fineweb_train_000002.bin")
    with pytest.raises(
        ConfigError, match=r"training shard .*fineweb_train_000002.bin is a copy of the validation shard"
    ):
        train_gpt.preflight(args_for(tiny_data, tmp_path, DATA_PATH=folder), ONE_CPU)
    (folder / "fineweb_train_000002.bin").unlink()
    (folder / "fineweb_train_000002.bin").symlink_to(folder / "fineweb_val_000000.bin")  # a link is a copy too
    with pytest.raises(ConfigError, match="is a copy of the validation shard"):
        train_gpt.preflight(args_for(tiny_data, tmp_path, DATA_PATH=folder, RUN_ID="link"), ONE_CPU)


def saved_artifact(args: Hyperparameters, path: Path, drop: str = "") -> Path:
    model = train_gpt.GPT(args)
    header = train_gpt.artifact_header(args, "raw", False)
    header.pop(drop, None)
    train_gpt.save_artifact(train_gpt.quantize_state_dict(model.state_dict(), args, {}), header, str(path))
    return path


def test_eval_only_refuses_an_artifact_made_with_another_tokenizer_unless_told(tiny_data, tmp_path, other_tokenizer):
    """Row 4: an artifact trained with tokenizer A was scored on data and tokenizer C of the same size without a word.
    The header records the tokenizer's sha256; ALLOW_OTHER_TOKENIZER=1 scores it anyway and the log says so; an artifact
    older than the field loads, and its log line says it recorded none."""
    made = args_for(tiny_data, tmp_path, TOKENIZER_PATH=other_tokenizer[0])
    path = saved_artifact(made, tmp_path / "a.ptz")
    args = args_for(tiny_data, tmp_path, EVAL_ONLY="1", ARTIFACT_PATH=path)
    with pytest.raises(ConfigError) as error:
        train_gpt.preflight(args, ONE_CPU)
    ours, theirs = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (tiny_data.tokenizer_path, other_tokenizer[0]))
    assert str(error.value) == (
        f"ARTIFACT_PATH={path} was made with another tokenizer (sha256 {theirs}) than TOKENIZER_PATH: set it as that "
        "run did, or ALLOW_OTHER_TOKENIZER=1."
    )
    assert ours != theirs
    for name, artifact, said in (
        ("allowed", path, f"tokenizer:{theirs}"),  # the log names the one it was made with
        ("older", saved_artifact(made, tmp_path / "old.ptz", drop="tokenizer_sha256"), "tokenizer:none"),
        ("same", saved_artifact(args, tmp_path / "same.ptz"), "tokenizer:same"),
    ):
        allowed = args_for(tiny_data, tmp_path, EVAL_ONLY="1", ARTIFACT_PATH=artifact, ALLOW_OTHER_TOKENIZER="1")
        run = dataclasses.replace(train_gpt.preflight(allowed, ONE_CPU), log=train_gpt.Logger(tmp_path / f"{name}.txt"))
        train_gpt.score_artifact(run, train_gpt.GPT(allowed), *run.artifact)
        line = (tmp_path / f"{name}.txt").read_text()
        assert said in line and f"eval_seq_len:{run.val.seq_len}" in line, line


def test_arguments_are_refused_before_anything_runs(tiny_data, tmp_path):
    """Row 11: `--help` started a full run (moving the last artifact aside) and `ITERATIONS=3` as an argument was
    ignored. Settings are environment variables: any argument is an error, exit 2, before the pre-flight; but
    `--help` or `-h` alone prints the usage (issue 44 row 12, tests/test_fresh_round5.py), and with more, is one."""
    for arguments in (["--help", "x"], ["ITERATIONS=3"], ["--helpme"]):
        env = {k: v for k, v in os.environ.items() if k not in OUR_NAMES} | tiny_env(tiny_data, tmp_path)
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *arguments], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 2 and result.stdout == ""
        assert (
            result.stderr == f"error: train_gpt.py takes no arguments ({' '.join(arguments)}): settings are env vars\n"
        )
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("seed", ["-1", "99999999999999999999"])
def test_a_seed_outside_what_torch_and_numpy_take_is_an_error_naming_seed(seed):
    """Row 13: SEED=-1 (numpy's ValueError with TRAIN_SHUFFLE=1) and SEED=1e20 (torch's overflow) were tracebacks."""
    with pytest.raises(ConfigError, match=re.escape(f"SEED={seed} must be in [0, 2^64).")):
        Hyperparameters.from_env({"SEED": seed, "TRAIN_SHUFFLE": "1"})
    Hyperparameters.from_env({"SEED": str(2**64 - 1)})  # the largest torch.manual_seed takes


def test_an_empty_log_dir_is_an_error_not_the_current_folder():
    """Row 21: LOG_DIR= (empty) wrote the log into the current folder."""
    with pytest.raises(ConfigError, match=re.escape("LOG_DIR=' ' must be non-empty.")):
        Hyperparameters.from_env({"LOG_DIR": " "})


def test_eval_only_of_a_folder_says_it_is_a_folder(tiny_data, tmp_path):
    """Row 18: EVAL_ONLY with ARTIFACT_PATH=<a folder> said "no such file" of a folder that exists."""
    args = args_for(tiny_data, tmp_path, EVAL_ONLY="1", ARTIFACT_PATH=tmp_path)
    with pytest.raises(ConfigError, match=re.escape(f"ARTIFACT_PATH={tmp_path}: a folder. Point it at the .ptz file")):
        train_gpt.preflight(args, ONE_CPU)


def test_an_unquoted_retokenize_input_glob_gets_a_hint_to_quote_it(tmp_path, capsys):
    """Row 22: `--input DIR/fineweb_*.bin` unquoted: the shell expands it, and the error was only "unrecognized
    arguments" with no hint."""
    import retokenize

    files = [str(tmp_path / f"fineweb_train_00000{i}.bin") for i in range(4)]
    common = ["--from-model", "a.model", "--to-model", "b.model", "--output", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        retokenize.parse_args([*common, "--input", *files])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert (
        f"unrecognized arguments: {files[1]} {files[2]} ...; quote a --input pattern (--input 'DIR/fineweb_*.bin')"
        in err
    )


@pytest.mark.parametrize(
    "revision, said",
    [
        ("nonexistentrev", "'nonexistentrev' is not a commit of this repository (git log --oneline lists them)"),
        ("nonexistentrev:records/frontier/train_gpt.py", "'nonexistentrev' is not a commit of this repository"),
        ("HEAD~0:README.md", "'HEAD~0:README.md': README.md is not a Python script; give REVISION or REVISION:PATH"),
        ("worktree:no/such.py", "the working tree has no no/such.py"),
    ],
)
def test_compare_revisions_refuses_a_revision_that_is_not_a_commit(revision, said, capsys):
    """Row 15: `compare_revisions.py nonexistentrev` ended in a CalledProcessError traceback from git show. A side may
    name another script of a revision (REVISION:PATH, our record script): one that is no Python script, or not there,
    is refused as plainly."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_revisions

    with pytest.raises(SystemExit) as exit_:
        compare_revisions.main([revision])
    assert exit_.value.code == 2
    assert f"error: {said}" in capsys.readouterr().err
    assert compare_revisions.revision_error("HEAD") is None and compare_revisions.revision_error("worktree") is None
    assert compare_revisions.revision_error("worktree:records/frontier/train_gpt.py") is None


def test_compare_revisions_names_log_keys_one_side_added_and_still_compares_the_rest():
    """The artifact line gained tokenizer: and eval_seq_len: (rows 4 and 19): compare_revisions.py names them and
    compares the values both sides log; a value that changed is still a difference."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_revisions

    a = ["artifact:model.ptz sha256:ab model_bytes:10", "step:1/2 val_loss:2.0", 'config:{"a": 1}']
    b = [
        "artifact:model.ptz sha256:ab model_bytes:10 eval_seq_len:64 tokenizer:same",
        "step:1/2 val_loss:2.5",
        'config:{"a": 1}',
    ]
    cut_a, cut_b, added = compare_revisions.common_tokens(a, b)
    assert added == ["eval_seq_len", "tokenizer"] and cut_a[0] == cut_b[0] == a[0]
    assert cut_a[1:] == a[1:] and cut_b[1:] == b[1:]  # the changed val_loss stays a difference


def test_compare_revisions_leaves_out_the_progress_lines_one_side_added_before_cutting_keys():
    """Row 10: GPTQ's progress lines (new on one side) came before the gptq_hessians line that lost two keys; cut line
    by line with them in place, the two logs no longer lined up and a same run was called DIFFERENT."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_revisions

    a = ["step:4/4 val_loss:2.0", "gptq_hessians:1 calibration_tokens:512 hessian_time:* gptq_time:*", "artifact:m"]
    b = ["step:4/4 val_loss:2.0", "gptq_calibration:1/4 hessian_time:*", "gptq_hessians:1 gptq_time:*", "artifact:m"]
    b += ["quant_note:nothing_quantized"]
    cut_a, cut_b, note = compare_revisions.comparable_logs(a, b)
    assert cut_a == cut_b == ["step:4/4 val_loss:2.0", "gptq_hessians:1 gptq_time:*", "artifact:m"]
    assert "calibration_tokens, hessian_time" in note and "gptq_calibration:1/4, quant_note:nothing_quantized" in note


def test_compare_revisions_takes_an_artifact_whose_header_gained_the_tokenizer_as_the_same_payload():
    """Row 4 adds tokenizer_sha256 to the artifact's header: its bytes change, its payload must not."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_revisions

    def blob(payload: bytes, **header) -> bytes:
        fields = dict(compressor="zlib", model=dict(num_layers=2), payload_sha256="x") | header
        return train_gpt.ARTIFACT_MAGIC + json.dumps(fields).encode() + b"\n" + payload

    old = blob(b"weights")
    assert compare_revisions.same_payload(old, blob(b"weights", tokenizer_sha256="ab")) == (
        ", header settings only in b: tokenizer_sha256"
    )
    assert compare_revisions.same_payload(old, blob(b"other weights", tokenizer_sha256="ab")) is None
    assert compare_revisions.same_payload(old, blob(b"weights", compressor="lzma")) is None


@pytest.mark.parametrize("setting", [dict(TTT_EPOCHS="0"), dict(TTT_LR="0")], ids=["no_epochs", "no_lr"])
def test_ttt_that_takes_no_step_says_nothing_adapted(tiny_data, tmp_path, setting):
    """Row 16: with TTT_EPOCHS=0 or TTT_LR=0 the ttt line equalled the sliding window's with no ttt_note (the one-chunk
    case had one)."""
    args = args_for(tiny_data, tmp_path, TTT_ENABLED="1", EVAL_STRIDE="32", TTT_CHUNK_TOKENS="4096", **setting)
    run = dataclasses.replace(train_gpt.preflight(args, ONE_CPU), log=train_gpt.Logger(tmp_path / "ttt.txt"))
    train_gpt.torch.manual_seed(0)
    model = train_gpt.GPT(args)
    sums = train_gpt.score_with_ttt(run, model)
    assert train_gpt.torch.equal(sums, train_gpt.score_windows(model, run.val, ONE_CPU, 32))  # nothing adapted
    total = run.val.tokens.numel() - 1
    assert total > 4096  # several chunks: the one-chunk note is not why
    note = f"ttt_note:no_adaptation val_predictions:{total} ttt_chunk_tokens:4096"
    assert (tmp_path / "ttt.txt").read_text().splitlines() == [note]
