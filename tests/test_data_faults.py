"""data/README.md's table of bad inputs and faults: each row triggered, and its message text checked.

The table and the triggers here must list the same faults, so a new row needs a trigger and a
changed message needs its row updated. CPU only, no network (the hub is a stand-in on 127.0.0.1);
about 15 s. Run: python3 -m pytest -q tests/test_data_faults.py
"""

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import cached_challenge_fineweb as dl  # noqa: E402
import quickstart  # noqa: E402
import retokenize  # noqa: E402
import train_gpt  # noqa: E402
from test_data import english_docs, write_jsonl  # noqa: E402
from test_data_download import REPO, FakeHub, published_export  # noqa: E402
from test_data_quickstart import fake_trainer, machine, run_quickstart_sh  # noqa: E402
from test_retokenize import huge_model  # noqa: E402

README = ROOT / "data" / "README.md"
ROW = re.compile(r"^\| (.+?) \| (.+?) \| (.+?) \| `(.+)` \|$")


def table_rows() -> dict[str, str]:
    """fault -> the message text the table promises, from the section 'Bad inputs and faults'."""
    section = README.read_text(encoding="utf-8").split("## Bad inputs and faults", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(2) not in rows, f"{m.group(2)} is listed twice"
            rows[m.group(2)] = m.group(4)
    return rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tokenizer, a text file and a folder of shards made with that tokenizer."""
    root = tmp_path_factory.mktemp("faults")
    tokenizer = root / "small.model"
    build_shards.train_tokenizer(english_docs(300, seed=1), 300, tokenizer)
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    shards = root / "shards"
    shards.mkdir()
    tokens = [t for d in english_docs(20) for t in [1] + sp.encode(d)]
    build_shards.write_data_shard(shards / "fineweb_val_000000.bin", tokens)
    return root, tokenizer, shards


@dataclass
class Trial:
    """What a trigger gets: an empty folder, the tokenizer and shards of `setup`, pytest's fixtures."""

    tmp: Path
    tokenizer: Path
    shards: Path
    capsys: pytest.CaptureFixture
    monkeypatch: pytest.MonkeyPatch


def exit_message(call) -> str:
    """The message of a tool that exits with sys.exit(message) (the quick start)."""
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code not in (0, None)
    return str(exc.value.code)


def error_message(t: Trial, call, code: int = 2) -> str:
    """What a tool said that exits with `code`: `error: ...` on stderr and 2 (build_shards.py, the download), or
    its report on stdout and 1 (--which-tokenizer when no tokenizer fits)."""
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == code
    captured = t.capsys.readouterr()
    if code == 2:
        assert captured.err.startswith("error: "), captured.err
    return captured.err + captured.out


# ------------------------------------------------------------------------------------------------
# build_shards.py
# ------------------------------------------------------------------------------------------------


def build(t: Trial, *argv: str, output: str = "out") -> str:
    out = t.tmp / output
    message = error_message(t, lambda: build_shards.main([*argv, "--output", str(out)]))
    if output == "out":
        assert not out.exists(), "a failed build must leave no output folder"
    return message


def build_missing_input(t: Trial):
    return build(t, str(t.tmp / "missing.jsonl"), "--tokenizer", str(t.tokenizer))


def build_no_text_field(t: Trial):
    (t.tmp / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text field"}\n', encoding="utf-8")
    return build(t, str(t.tmp / "bad.jsonl"), "--tokenizer", str(t.tokenizer))


def build_not_json(t: Trial):
    (t.tmp / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "cut off"\n', encoding="utf-8")
    return build(t, str(t.tmp / "bad.jsonl"), "--tokenizer", str(t.tokenizer))


def build_empty_input(t: Trial):
    (t.tmp / "empty.jsonl").write_text("")
    return build(t, str(t.tmp / "empty.jsonl"), "--vocab-size", "300", "--tokenizer-out", str(t.tmp / "t.model"))


def build_val_in_inputs(t: Trial):
    docs = english_docs(20)
    train = write_jsonl(t.tmp / "train.jsonl", docs)
    return build(
        t, str(train), "--val", str(write_jsonl(t.tmp / "val.jsonl", docs[:2])), "--tokenizer", str(t.tokenizer)
    )


def build_val_is_input(t: Trial):
    train = write_jsonl(t.tmp / "train.jsonl", english_docs(20))
    return build(t, str(train), "--val", str(train), "--tokenizer", str(t.tokenizer))


def build_not_utf8(t: Trial):
    (t.tmp / "blob.txt").write_bytes(b"\xff\xfe\x00binary")
    return build(t, str(t.tmp / "blob.txt"), "--tokenizer", str(t.tokenizer))


def build_vocab_range(t: Trial):
    return build(
        t,
        str(write_jsonl(t.tmp / "d.jsonl", english_docs(5))),
        "--vocab-size",
        "100",
        "--tokenizer-out",
        str(t.tmp / "t.model"),
    )


def build_bad_tokenizer(t: Trial):
    bad = t.tmp / "bos2.model"
    with open(bad, "wb") as f:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(english_docs(50)), model_writer=f, vocab_size=100, bos_id=2, eos_id=1, minloglevel=2
        )
    return build(t, str(write_jsonl(t.tmp / "d.jsonl", english_docs(5))), "--tokenizer", str(bad))


def build_output_taken(t: Trial):
    (t.tmp / "taken").mkdir()
    build_shards.write_data_shard(t.tmp / "taken" / "fineweb_train_000000.bin", [1, 2, 3])
    message = build(
        t, str(write_jsonl(t.tmp / "d.jsonl", english_docs(5))), "--tokenizer", str(t.tokenizer), output="taken"
    )
    assert train_gpt.read_shard_header(t.tmp / "taken" / "fineweb_train_000000.bin") == 3
    return message


def build_empty_split(t: Trial):
    docs = write_jsonl(t.tmp / "d.jsonl", english_docs(100))
    tokenizer = t.tmp / "tokenizers" / "out.model"
    message = build(t, str(docs), "--val-fraction", "0", "--vocab-size", "300", "--tokenizer-out", str(tokenizer))
    assert not tokenizer.exists(), "the tokenizer a failed build trained must not stay"
    return message


def build_val_docs_too_many(t: Trial):
    docs = write_jsonl(t.tmp / "d.jsonl", english_docs(30))
    return build(t, str(docs), "--val-docs", "31", "--tokenizer", str(t.tokenizer))


def build_tokenizer_taken(t: Trial):
    (t.tmp / "taken.model").write_bytes(b"mine")
    docs = write_jsonl(t.tmp / "d.jsonl", english_docs(5))
    message = build(t, str(docs), "--tokenizer-out", str(t.tmp / "taken.model"))
    assert (t.tmp / "taken.model").read_bytes() == b"mine"
    return message


def build_help(t: Trial):
    with pytest.raises(SystemExit) as exc:
        build_shards.main(["--help"])
    assert exc.value.code == 0
    return " ".join(t.capsys.readouterr().out.split())  # help lines joined, as argparse wraps them by the terminal


def which_no_shards(t: Trial):
    return error_message(t, lambda: build_shards.main(["--which-tokenizer", str(t.tmp)]))


def which_none_fits(t: Trial):
    t.monkeypatch.setattr(build_shards, "DATA_DIR", t.tmp / "data")  # no data/tokenizers
    other = t.tmp / "other"
    build_shards.train_tokenizer(english_docs(300, seed=2), 400, other / "bigger.model")
    argv = ["--which-tokenizer", str(t.shards), "--tokenizers", str(other)]
    return error_message(t, lambda: build_shards.main(argv), code=1)


# ------------------------------------------------------------------------------------------------
# retokenize.py: exit code 2 and a message on stderr
# ------------------------------------------------------------------------------------------------


def retok(t: Trial, *, source=None, target=None, inputs=None, output=None) -> str:
    out = output or t.tmp / "out"
    argv = [
        "--from-model",
        str(source or t.tokenizer),
        "--to-model",
        str(target or t.tokenizer),
        "--input",
        str(inputs or t.shards),
        "--output",
        str(out),
        "--quiet",
    ]
    with pytest.raises(SystemExit) as exc:
        retokenize.main(argv)
    assert exc.value.code == 2
    assert output or not out.exists(), "nothing is written before the checks pass"
    return t.capsys.readouterr().err


def retok_missing_model(t: Trial):
    return retok(t, source=t.tmp / "missing.model")


def retok_not_a_model(t: Trial):
    (t.tmp / "notes.model").write_text("hello")
    return retok(t, target=t.tmp / "notes.model")


def retok_huge_model(t: Trial):
    return retok(t, target=huge_model(t.tmp / "huge.model", t.tokenizer))


def retok_no_match(t: Trial):
    return retok(t, inputs=t.tmp / "none_*.bin")


def retok_output_is_input(t: Trial):
    return retok(t, output=t.shards)


def retok_not_a_shard(t: Trial):
    (t.tmp / "fineweb_val_000000.bin").write_bytes(b"\1" * 4096)
    return retok(t, inputs=t.tmp / "fineweb_val_000000.bin")


def retok_truncated(t: Trial):
    (t.tmp / "fineweb_val_000000.bin").write_bytes((t.shards / "fineweb_val_000000.bin").read_bytes()[:-3])
    return retok(t, inputs=t.tmp / "fineweb_val_000000.bin")


def retok_wrong_from_model(t: Trial):
    build_shards.write_data_shard(t.tmp / "fineweb_val_000000.bin", [1, 4, 1000, 5])
    return retok(t, inputs=t.tmp / "fineweb_val_000000.bin")


def retok_manifest_mismatch(t: Trial):
    (t.tmp / "in").mkdir()
    (t.tmp / "in" / "fineweb_val_000000.bin").write_bytes((t.shards / "fineweb_val_000000.bin").read_bytes())
    (t.tmp / "in" / "manifest.json").write_text(json.dumps({"tokenizers": [{"name": "x", "sha256": "0" * 64}]}))
    return retok(t, inputs=t.tmp / "in")


def retok_swapped_models(t: Trial):
    bigger = t.tmp / "bigger.model"  # every id of the shards fits it, but it did not make them
    build_shards.train_tokenizer(english_docs(300, seed=2), 400, bigger)
    return retok(t, source=bigger, target=t.tokenizer)


def retok_output_taken(t: Trial):
    (t.tmp / "taken").mkdir()
    (t.tmp / "taken" / "fineweb_val_000000.bin").write_bytes(b"mine")
    message = retok(t, output=t.tmp / "taken")
    assert (t.tmp / "taken" / "fineweb_val_000000.bin").read_bytes() == b"mine"
    return message


def retok_help(t: Trial):
    with pytest.raises(SystemExit) as exc:
        retokenize.main(["--help"])
    assert exc.value.code == 0
    return t.capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# cached_challenge_fineweb.py: against a stand-in hub
# ------------------------------------------------------------------------------------------------


def download_unreachable(t: Trial):
    fake = FakeHub({})
    endpoint = fake.endpoint
    fake.close()  # nothing listens there now
    return error_message(
        t,
        lambda: dl.main(
            [
                "--variant",
                "sp1024",
                "--train-shards",
                "1",
                "--endpoint",
                endpoint,
                "--data-dir",
                str(t.tmp / "data"),
                "--repo-id",
                REPO,
            ]
        ),
    )


def download_unknown_variant(t: Trial):
    with FakeHub(published_export(t.tmp)) as fake:
        return error_message(
            t,
            lambda: dl.main(
                [
                    "--variant",
                    "sp512",
                    "--endpoint",
                    fake.endpoint,
                    "--data-dir",
                    str(t.tmp / "data"),
                    "--repo-id",
                    REPO,
                ]
            ),
        )


def download_bad_file(t: Trial):
    files = published_export(t.tmp)
    key = "datasets/datasets/fineweb10B_sp1024/fineweb_val_000000.bin"
    files[key] = files[key][:-2]
    with FakeHub(files) as fake:
        message = error_message(
            t,
            lambda: dl.main(
                [
                    "--variant",
                    "sp1024",
                    "--train-shards",
                    "0",
                    "--endpoint",
                    fake.endpoint,
                    "--data-dir",
                    str(t.tmp / "data"),
                    "--repo-id",
                    REPO,
                ]
            ),
        )
    assert not (t.tmp / "data" / "datasets" / "fineweb10B_sp1024" / "fineweb_val_000000.bin").exists()
    return message


# ------------------------------------------------------------------------------------------------
# The quick start
# ------------------------------------------------------------------------------------------------


def quickstart_help(t: Trial):
    result, calls = run_quickstart_sh(t.tmp, "--help", torch_installed=False)
    assert result.returncode == 0 and calls == []
    return result.stdout


def quickstart_cpu_torch(t: Trial):
    return run_quickstart_sh(t.tmp, torch_installed=False)[0].stdout


def quickstart_cpu_index_down(t: Trial):
    return run_quickstart_sh(t.tmp, torch_installed=False, cpu_index="refuses")[0].stdout


def quickstart_cpu_pip_fails(t: Trial):
    return run_quickstart_sh(t.tmp, torch_installed=False, cpu_pip_fails=True)[0].stdout


def quickstart_no_fineweb(t: Trial):
    t.monkeypatch.setattr(quickstart, "FINEWEB_DATA", quickstart.DATA_DIR / "datasets" / "not_here_test")
    return exit_message(lambda: quickstart.main(["--data", "fineweb"]))


def quickstart_no_stdlib_sources(t: Trial):
    (t.tmp / "lib").mkdir()
    t.monkeypatch.setattr(quickstart.sysconfig, "get_paths", lambda: {"stdlib": str(t.tmp / "lib")})
    t.monkeypatch.setattr(quickstart, "DATA_DIR", t.tmp / "data")
    return exit_message(lambda: quickstart.main(["--data", "stdlib", "--rebuild"]))


def quickstart_training_fails(t: Trial):
    (t.tmp / "train_gpt.py").write_text("import sys\nprint('boom')\nsys.exit(3)\n")
    t.monkeypatch.setattr(quickstart, "REPO_ROOT", t.tmp)
    return exit_message(lambda: quickstart.train(t.tmp / "d", t.tmp / "t.model", 512, 1.0, "faults_test"))


def quickstart_slow_machine(t: Trial):
    repo = t.tmp / "repo"
    fake_trainer(
        repo,
        "print('step:11/100000 train_loss:3.9 train_time:121000ms step_avg:11000.00ms')\n"
        "print('final_int8_zlib_roundtrip_exact val_loss:2.92 val_bpb:4.22')\n",
    )
    t.monkeypatch.setattr(quickstart, "REPO_ROOT", repo)
    t.monkeypatch.setattr(quickstart.torch.cuda, "is_available", lambda: False)
    t.monkeypatch.setattr(quickstart, "stdlib_dataset", lambda *args: (t.tmp / "shards", t.tmp / "t.model", 512))
    machine(t.monkeypatch, 2, 1.0)
    quickstart.main(["--data", "stdlib", "--seconds", "120"])
    return t.capsys.readouterr().out


TRIGGERS = {
    "an input path that does not exist": build_missing_input,
    "a JSONL line without the text field": build_no_text_field,
    "a JSONL line that is not valid JSON": build_not_json,
    "an input file that is empty (or holds only blank documents)": build_empty_input,
    "a `--val` file whose documents are also in the inputs": build_val_in_inputs,
    "the same file as an input and with `--val`": build_val_is_input,
    "a file that is not UTF-8 text": build_not_utf8,
    "`--vocab-size` outside (260, 65536]": build_vocab_range,
    "a `--tokenizer` whose BOS id is not 1, or with over 65536 tokens": build_bad_tokenizer,
    "`--output` already holds shards": build_output_taken,
    "too little text for one of the two splits": build_empty_split,
    "`--val-docs N` (the challenge's split) over the number of documents, with `--tokenizer`": build_val_docs_too_many,
    "the tokenizer to train would replace a file (`--tokenizer-out`; default `data/tokenizers/<output name>.model`)": (
        build_tokenizer_taken
    ),
    "`python3 data/build_shards.py --help`": build_help,
    "`--which-tokenizer DATA_PATH` on a folder without shards": which_no_shards,
    "`--which-tokenizer DATA_PATH`: no candidate tokenizer made the shards": which_none_fits,
    "a model file that does not exist": retok_missing_model,
    "a model file that is not a SentencePiece model": retok_not_a_model,
    "a `--to-model` with more than 65536 tokens": retok_huge_model,
    "an `--input` that matches no file": retok_no_match,
    "`--output` is the inputs' folder": retok_output_is_input,
    "an input that is not a shard (magic number, version)": retok_not_a_shard,
    "a truncated input shard": retok_truncated,
    "ids beyond `--from-model`'s vocabulary (the wrong `--from-model`)": retok_wrong_from_model,
    "the inputs' `manifest.json` names another tokenizer than `--from-model`": retok_manifest_mismatch,
    "`--from-model` is not the inputs' tokenizer though every id fits it (`--from-model` and `--to-model` swapped, "
    "no manifest): a sample of documents does not decode and encode again to the same ids (`build_shards.round_trip`, "
    "the trainer's check)": retok_swapped_models,
    "`--output` already holds output shards": retok_output_taken,
    "`python3 data/retokenize.py --help`": retok_help,
    "the hub cannot be reached": download_unreachable,
    "a variant the manifest does not list (`--variant sp512`)": download_unknown_variant,
    "a downloaded file that is truncated, corrupt or has another sha256": download_bad_file,
    "`bash quickstart.sh --help`": quickstart_help,
    "no GPU (no `nvidia-smi`) and no torch installed": quickstart_cpu_torch,
    "the PyTorch CPU index does not answer": quickstart_cpu_index_down,
    "the PyTorch CPU index answers, but pip cannot install torch from it": quickstart_cpu_pip_fails,
    "`--data fineweb` without the FineWeb files": quickstart_no_fineweb,
    "a Python installed without its standard library's `.py` sources": quickstart_no_stdlib_sources,
    "`train_gpt.py` fails": quickstart_training_fails,
    "a busy or slow machine: under half the steps of the measured run in 3": quickstart_slow_machine,
}


def test_the_table_and_the_triggers_list_the_same_faults():
    rows = table_rows()
    assert len(rows) >= 20
    assert sorted(rows) == sorted(TRIGGERS), "data/README.md's fault table and TRIGGERS differ"


@pytest.mark.parametrize("fault", list(TRIGGERS))
def test_each_fault_shows_the_documented_message(fault, setup, tmp_path, capsys, monkeypatch):
    expected = table_rows()[fault]
    seen = TRIGGERS[fault](Trial(tmp_path, *setup[1:], capsys, monkeypatch))
    assert expected in seen, f"{fault}: expected {expected!r} in:\n{seen}"
