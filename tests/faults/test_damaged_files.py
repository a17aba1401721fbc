"""Damaged tracks files: every reader (the API, a rerun of the job, merge, exports and the
command line) fails at once with one line that says the file is damaged and what to do, or
reads the file correctly; never a hang, a crash or a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from _damaged import _flagged, damage, inputs, run
from _faults import TESTS, worker_env

import seqattrib as sa
from seqattrib.io import read_tracks

READERS = ("read_tracks", "rerun", "merge_tracks", "export_modisco", "export_bigwig")


def _one_line_error(message: str) -> bool:
    return "\n" not in message and " parameter of " in message and message.endswith(".")


@pytest.fixture(scope="module")
def made():
    return inputs()


@pytest.fixture
def good(made, tmp_path):
    model, X, regions = made
    return Path(run(model, X, regions, tmp_path / "good.h5"))


def test_every_api_reader_fails_at_once_on_every_damaged_file(tmp_path):
    """A seeded set of damaged copies (truncations, random bytes, also in a file a dead writer
    left open, deleted datasets and attributes, settings that are not JSON), each read by every
    API reader in a worker process that must finish within the timeout."""
    worker = TESTS / "faults" / "_damaged.py"
    try:
        done = subprocess.run(
            [sys.executable, str(worker), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=240,
            env=worker_env(),
        )
    except subprocess.TimeoutExpired as exc:
        stuck = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        raise AssertionError(f"a reader hung on a damaged file: {stuck}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    variants = {o["variant"] for o in outcomes}
    assert len(variants) >= 25 and len(outcomes) == len(variants) * len(READERS)
    for o in outcomes:
        where = f"{o['reader']} on {o['variant']}: {o}"
        assert o["outcome"] in ("ok", "error"), where  # "wrong": rows that differ from the run
        if o["outcome"] == "error":
            assert o["type"] in ("ValueError", "OSError", "BlockingIOError"), where
            assert _one_line_error(o["message"]), where
    for o in outcomes:  # the file cannot be read whole: every reader must say it is damaged
        if o["variant"].startswith(("truncated", "flagged-truncated", "deleted-attributions")):
            assert o["outcome"] == "error" and "damaged or truncated" in o["message"], o


def test_a_truncated_file_is_refused_at_once_in_a_fresh_process(good, tmp_path):
    cut = tmp_path / "cut.h5"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    flagged = tmp_path / "flagged.h5"
    flagged.write_bytes(_flagged(good.read_bytes())[: good.stat().st_size // 2])
    for path in (cut, flagged):
        code = "import sys; from seqattrib.io import read_tracks; read_tracks(sys.argv[1])"
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=worker_env(),
        )
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 1 and last.startswith("ValueError: The 'path' parameter"), last
        assert "damaged or truncated file" in last and "Delete it and rerun" in last


def test_a_rerun_refuses_a_file_whose_attributions_were_deleted(made, good):
    model, X, regions = made
    with h5py.File(good, "r+") as f:
        del f["attributions"]
    pattern = r"'out' parameter of saliency .*lacks the 'attributions' dataset.*overwrite=True"
    with pytest.raises(ValueError, match=pattern):
        run(model, X, regions, good)
    run_again = sa.saliency(
        model, X, target=[0, 1], out=good, regions=regions, shard=(0, 1), overwrite=True
    )
    assert read_tracks(run_again).attributions.shape == (len(X), 2, *X.shape[1:])


@pytest.mark.parametrize(
    "damage_it, detail",
    [
        (lambda f: f.__delitem__("row_hashes"), "lacks the 'row_hashes' dataset"),
        (lambda f: f.__delitem__("attributions"), "lacks the 'attributions' dataset"),
        (lambda f: f.attrs.__setitem__("settings", "{oops"), "'settings' attribute is not JSON"),
        (lambda f: f.attrs.__delitem__("settings"), "lacks the attribute 'settings'"),
    ],
    ids=["row_hashes", "attributions", "settings-not-json", "settings-deleted"],
)
def test_a_damaged_header_is_one_line(good, damage_it, detail):
    with h5py.File(good, "r+") as f:
        damage_it(f)
    with pytest.raises(ValueError, match=r"'path' parameter of read_tracks") as info:
        read_tracks(good)
    assert detail in str(info.value) and _one_line_error(str(info.value))


def test_the_command_line_reports_a_damaged_file_on_one_line(made, good, tmp_path):
    """A handful of damaged files through ``seqattrib plot``, ``export`` and ``merge``."""
    folder = tmp_path / "damaged"
    folder.mkdir()
    chosen = ("truncated", "flagged-noise", "deleted-attributions", "not-json-settings")
    variants = [p for p in damage(good, folder) if p.name.startswith(chosen)]
    variants = [next(p for p in variants if p.name.startswith(name)) for name in chosen]
    for path in variants:
        commands = {
            "plot": ["plot", str(path), "-o", str(tmp_path / "p.png")],
            "export": ["export", "modisco", str(path), "-o", str(tmp_path / "modisco")],
            "merge": ["merge", str(path), "-o", str(tmp_path / "m.h5")],
        }
        for name, argv in commands.items():
            done = subprocess.run(
                [sys.executable, "-m", "seqattrib", *argv],
                capture_output=True,
                text=True,
                timeout=60,
                env=worker_env(),
            )
            where = f"seqattrib {name} on {path.name}: {done.stderr[-2000:]}"
            assert done.returncode == 1, where
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"seqattrib {name}: error:"), where
            assert "damaged or truncated" in lines[0], where
        assert not (tmp_path / "m.h5").exists() and not (tmp_path / "p.png").exists()
