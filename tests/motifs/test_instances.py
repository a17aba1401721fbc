"""Motif instances from a tracks file: genome coordinates, BED6, resume, fingerprints, lock,
empty results and bad inputs."""

from __future__ import annotations

import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from seqattrib._errors import SeqAttribWarning
from seqattrib.io import lock as _lock
from seqattrib.io import read_tracks
from seqattrib.motifs import instances as instances_module
from seqattrib.motifs import motif_instances, read_instances, seqlets

pytest.importorskip("torch")
pytest.importorskip("memelite")

from motif_cases import N, make_database, make_tracks, write_meme  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("instances")
    rng = np.random.default_rng(7)
    return SimpleNamespace(
        folder=folder,
        tracks=make_tracks(folder / "tracks.h5"),
        meme=write_meme(folder / "db.meme", make_database(rng)),
    )


SETTINGS = dict(threshold=0.01, min_length=4, max_length=15, n_jobs=1)


def _bed_records(path):
    """The lines of a BED6 file, checked against the format's definition."""
    records = []
    for line in open(path, encoding="ascii"):
        fields = line.rstrip("\n").split("\t")
        assert len(fields) == 6, line
        chrom, start, end, name, score, strand = fields
        assert re.fullmatch(r"[A-Za-z0-9_.:\-]+", chrom), chrom
        assert re.fullmatch(r"\d+", start) and re.fullmatch(r"\d+", end)
        assert int(start) < int(end)
        assert re.fullmatch(r"[\x21-\x7e]{1,255}", name), name
        assert re.fullmatch(r"\d+", score) and 0 <= int(score) <= 1000
        assert strand in ("+", "-", ".")
        records.append((chrom, int(start), int(end), name, int(score), strand))
    assert records == sorted(records, key=lambda r: (r[0], r[1])), "not sorted by chrom, start"
    return records


def test_genome_coordinates_are_region_start_plus_position(files, tmp_path):
    result = motif_instances(files.tracks, files.meme, out=tmp_path / "m.bed", **SETTINGS)
    table = read_instances(result.tsv)
    tracks = read_tracks(files.tracks)
    want = []
    for k, target in enumerate((0, 1)):
        calls = seqlets(
            tracks.attributions[:, k],
            tracks.sequences,
            threshold=0.01,
            min_length=4,
            max_length=15,
        )
        for i in range(len(calls)):
            row = int(calls.example[i])
            offset = int(tracks.regions.start[row])
            chrom = tracks.regions.chrom[row]
            want.append(
                (row, target, chrom, offset + int(calls.start[i]), offset + int(calls.end[i]))
            )
    got = list(zip(table.example, table.target, table.chrom, table.start, table.end, strict=True))
    assert sorted(got) == sorted(want) and len(got) == result.n_seqlets > 0
    assert (table.region_start + 20 <= table.start).any()
    # the planted GATA sites of target 0 are named on their strand
    position = table.start - table.region_start
    sites = table[(table.target == 0) & (position < 28) & (position + table.end - table.start > 20)]
    assert len(sites) == N and set(sites.name) == {"GATA1"} and set(sites.strand) == {"+"}
    minus = table[(table.target == 0) & (position < 68) & (position + table.end - table.start > 60)]
    assert len(minus) == N and set(minus.name) == {"GATA1"} and set(minus.strand) == {"-"}
    bed = _bed_records(result.bed)
    assert sorted(bed) == sorted(
        zip(table.chrom, table.start, table.end, table.name, table.score, table.strand, strict=True)
    )
    summary = open(result.summary).read().splitlines()
    assert summary[0] == "target\tname\tcount" and f"0\tGATA1\t{2 * N}" in summary


def test_the_bed_loads_in_a_tabix_index(files, tmp_path):
    pysam = pytest.importorskip("pysam")
    result = motif_instances(files.tracks, files.meme, out=tmp_path / "m.bed", **SETTINGS)
    indexed = pysam.tabix_index(result.bed, preset="bed", keep_original=True)
    with pysam.TabixFile(indexed, parser=pysam.asBed()) as bed:
        assert sorted(bed.contigs) == ["chr10", "chr2"]
        records = [(r.contig, r.start, r.end, r.name, int(r.score), r.strand) for r in bed.fetch()]
    assert records == _bed_records(result.bed)


def test_resume_after_an_interruption_equals_an_uninterrupted_run(files, tmp_path, monkeypatch):
    whole = motif_instances(
        files.tracks, files.meme, out=tmp_path / "whole.bed", block_size=4, **SETTINGS
    )
    calls = []
    real = instances_module._rows

    def dies_in_the_third_block(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(instances_module, "_rows", dies_in_the_third_block)
    with pytest.raises(KeyboardInterrupt):
        motif_instances(
            files.tracks, files.meme, out=tmp_path / "cut.bed", block_size=4, **SETTINGS
        )
    monkeypatch.setattr(instances_module, "_rows", real)
    cut = tmp_path / "cut.tsv"
    assert cut.read_text().rstrip("\n").endswith("#done 8")
    with open(cut, "a") as handle:  # a killed writer's half block
        handle.write("chr2\t100\t2")
    resumed = motif_instances(
        files.tracks, files.meme, out=tmp_path / "cut.bed", block_size=3, **SETTINGS
    )
    body = [line for line in open(resumed.tsv) if not line.startswith("#done")]
    assert body == [line for line in open(whole.tsv) if not line.startswith("#done")]
    assert open(resumed.bed).read() == open(whole.bed).read()
    assert open(resumed.summary).read() == open(whole.summary).read()


def test_other_settings_or_inputs_are_refused_unless_overwrite(files, tmp_path):
    out = tmp_path / "m.bed"
    motif_instances(files.tracks, files.meme, out=out, **SETTINGS)
    with pytest.raises(ValueError, match="threshold=0.01 .now 0.001.") as info:
        motif_instances(files.tracks, files.meme, out=out, **{**SETTINGS, "threshold": 1e-3})
    assert "\n" not in str(info.value) and "overwrite=True" in str(info.value)
    other = write_meme(tmp_path / "other.meme", make_database(np.random.default_rng(8)))
    with pytest.raises(ValueError, match="another motif file"):
        motif_instances(files.tracks, other, out=out, **SETTINGS)
    other_tracks = make_tracks(tmp_path / "other.h5", seed=3)
    with pytest.raises(ValueError, match="another tracks file"):
        motif_instances(other_tracks, files.meme, out=out, **SETTINGS)
    result = motif_instances(files.tracks, other, out=out, overwrite=True, **SETTINGS)
    assert read_instances(result.tsv).attrs["settings"]["motifs"] is not None
    foreign = tmp_path / "foreign.bed"
    foreign.write_text("chr1\t1\t2\n")
    with pytest.raises(FileExistsError, match="'out' parameter of motif_instances"):
        motif_instances(files.tracks, files.meme, out=foreign, **SETTINGS)


def test_a_second_writer_is_refused(files, tmp_path):
    out = tmp_path / "m.bed"
    held = _lock.acquire(str(out), "another run")
    try:
        with pytest.raises(BlockingIOError, match="no other process is writing"):
            motif_instances(files.tracks, files.meme, out=out, **SETTINGS)
    finally:
        held.release()
    assert not (tmp_path / "m.tsv").exists()


def test_no_seqlets_give_empty_tables_and_a_warning(tmp_path, files):
    flat = make_tracks(tmp_path / "flat.h5", scale=0.0)
    with pytest.warns(SeqAttribWarning, match="No seqlets were found"):
        result = motif_instances(flat, files.meme, out=tmp_path / "m.bed", **SETTINGS)
    assert result.n_seqlets == 0
    assert open(result.bed).read() == ""
    assert open(result.summary).read() == "target\tname\tcount\n"
    assert len(read_instances(result.tsv)) == 0


def test_without_regions_genome_coordinates_are_refused_and_positions_given(tmp_path, files):
    bare = make_tracks(tmp_path / "bare.h5", regions=False)
    with pytest.raises(ValueError, match="'tracks' parameter of motif_instances") as info:
        motif_instances(bare, files.meme, out=tmp_path / "m.bed", **SETTINGS)
    assert "coordinates='sequence'" in str(info.value) and "\n" not in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = motif_instances(
            bare, files.meme, out=tmp_path / "m.bed", coordinates="sequence", **SETTINGS
        )
    table = read_instances(result.tsv)
    assert "chrom" not in table and set(table.start[table.target == 0]) >= {20, 60}
    assert {r[0] for r in _bed_records(result.bed)} <= {str(i) for i in range(N)}


def test_bad_motif_file_and_keywords_are_one_line_errors(files, tmp_path):
    bad = tmp_path / "bad.meme"
    bad.write_text("MEME version 4\n\nALPHABET= ACDEFGHIKLMNPQRSTVWY\n")
    with pytest.raises(ValueError, match="line 3 declares the alphabet"):
        motif_instances(files.tracks, bad, out=tmp_path / "m.bed", **SETTINGS)
    with pytest.raises(TypeError, match="'treshold' parameter of motif_instances"):
        motif_instances(files.tracks, files.meme, out=tmp_path / "m.bed", treshold=0.1)
    with pytest.raises(ValueError, match="'coordinates' parameter"):
        motif_instances(files.tracks, files.meme, out=tmp_path / "m.bed", coordinates="chrom")
    assert not (tmp_path / "m.tsv").exists()


def test_without_motifs_seqlets_are_unnamed(files, tmp_path):
    result = motif_instances(files.tracks, None, out=tmp_path / "m.bed", **SETTINGS)
    table = read_instances(result.tsv)
    assert len(table) > 0 and set(table.name) == {"seqlet"} and set(table.strand) == {"."}


def test_control_tracks_give_each_seqlet_a_false_discovery_rate(files, tmp_path):
    controls = make_tracks(tmp_path / "controls.h5", seed=4, planted=False)
    out = tmp_path / "m.bed"
    result = motif_instances(files.tracks, files.meme, out=out, controls=controls, **SETTINGS)
    table = read_instances(result.tsv)
    assert np.isfinite(table.fdr).all() and ((table.fdr >= 0) & (table.fdr <= 1)).all()
    planted = table[(table.target == 0) & (table.name == "GATA1")]
    assert len(planted) == 2 * N and (planted.fdr < 0.05).all()
    other = make_tracks(tmp_path / "other_controls.h5", seed=5, planted=False)
    with pytest.raises(ValueError, match="controls="):
        motif_instances(files.tracks, files.meme, out=out, controls=other, **SETTINGS)
    with pytest.raises(TypeError, match="'controls' parameter of motif_instances"):
        motif_instances(files.tracks, files.meme, out=out, controls=np.zeros((2, 100)))


def test_one_target_of_the_file_gives_its_rows_of_all_targets(files, tmp_path):
    both = read_instances(
        motif_instances(files.tracks, files.meme, out=tmp_path / "a.bed", **SETTINGS).tsv
    )
    one = read_instances(
        motif_instances(files.tracks, files.meme, out=tmp_path / "b.bed", target=1, **SETTINGS).tsv
    )
    assert len(one) > 0 and set(one.target) == {1}
    assert one.drop(columns="target").equals(
        both[both.target == 1].drop(columns="target").reset_index(drop=True)
    )


@pytest.mark.slow
def test_the_demo_sites_are_named_after_their_motif_family_in_jaspar(tmp_path):
    """At the defaults, on the demo's tracks: seqlets overlap >= 95 % of the planted sites of
    their output, >= 80 % of seqlets overlap one, and the positive seqlets of each output that
    overlap a site planted for it are named GATA-family (>= 95 %), bHLH (>= 85 %) and CTCF
    (>= 85 %)."""
    from seqattrib import demo

    jaspar = instances_module.Path(__file__).resolve().parents[2] / (
        "../shared/data/cases/motifs/jaspar_2024_consensus.meme"
    )
    if not jaspar.exists():
        pytest.skip(f"real validation data not found at {jaspar}")
    demo.run_demo(tmp_path / "demo", verbose=False)
    result = motif_instances(
        tmp_path / "demo" / "tracks.h5", jaspar, out=tmp_path / "m.bed", n_jobs=1
    )
    table = read_instances(result.tsv)
    data = demo.load_data()
    starts, ends = data["motif_starts"][-100:], data["motif_ends"][-100:]
    # recall: planted instances overlapped by a seqlet of their output; precision: seqlets that
    # overlap a planted instance of their output
    position = (table.start - table.region_start).to_numpy()
    first = starts[table.example, table.target]
    last = ends[table.example, table.target]
    hits = (first >= 0) & (position < last) & (position + table.end - table.start > first)
    assert hits.mean() >= 0.80, hits.mean()
    found = {(e, t) for e, t in zip(table.example[hits], table.target[hits], strict=True)}
    planted = list(zip(*np.nonzero(starts >= 0), strict=True))
    assert len(planted) >= 100
    assert sum(site in found for site in planted) >= 0.95 * len(planted)
    for target, (family, least) in enumerate(((":GATA", 0.95), (":bHLH", 0.85), ("CTCF", 0.85))):
        rows = table[(table.target == target) & (table.sign == 1)]
        position = rows.start - rows.region_start
        first, last = starts[rows.example, target], ends[rows.example, target]
        on_site = rows[
            (first >= 0) & (position < last) & (position + rows.end - rows.start > first)
        ]
        assert len(on_site) >= 10, (target, len(on_site))
        named = on_site.match1_id.str.contains(family, regex=False).mean()
        assert named >= least, (family, named)
