"""``variant_effects``: what real variants do to a model's predictions, from a VCF or a table."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np

from .._errors import SeqAttribWarning, parameter_error
from ..attribution.job import JobContext, run_job
from ..attribution.options import SHARED_KEYWORDS, RunOptions, shared_docs
from ..engine import as_source
from ..io.fingerprint import file_fingerprint, sequences_fingerprint
from ..io.regions import check_length
from ..shards import Shard
from .catalog import Catalog, GenomeText, Skipped, VariantStream, WindowArray, catalog
from .derived import derived_columns
from .kernel import VariantKernel
from .null import N_NULL, check_null, null_seed
from .records import describe, open_records
from .scores import Views, check_positional, check_scores, check_shifts, check_strands
from .table import FORMAT, EffectsWriter, companion, write_skipped

__all__ = ["VariantEffects", "variant_effects"]

#: Keywords of the attribution methods that ``variant_effects`` sets itself (``args``: the
#: model's other inputs, which its predictions do not take either).
_RESERVED = SHARED_KEYWORDS


@dataclass
class VariantEffects:
    """The effects of variants on a model, in memory (``variant_effects`` without ``out``).

    Attributes
    ----------
    variants : dict of str to ndarray
        ``chrom``, ``pos`` (1-based), ``id``, ``ref``, ``alt`` of each scored variant, shape
        (n_variants,), in input order (multi-allelic records split into one row per ALT).
    predictions : dict of str to ndarray of float32
        ``"ref"`` and ``"alt"``: the model's outputs on the reference and alternative windows,
        shape (n_variants,) for an int target, else (n_variants, K).
    scores : dict of str to ndarray of float32
        ``"delta"`` (alt - ref) and/or ``"log_ratio"`` (log alt - log ref), shaped as the
        predictions.
    targets : list of int
    skipped : list of tuple
        ``(chrom, pos, id, ref, alt, reason, detail)`` of each variant not scored.
    attributions : dict of str to ndarray, or None
        ``"ref"`` and ``"alt"`` attribution tracks, (n_variants, [K,] length, 4) in ``layout``.
    derived : dict of str to ndarray of float32
        Columns computed from the predictions and scores (p-values, allele quantiles), shaped
        as the predictions.
    """

    variants: dict[str, np.ndarray]
    predictions: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    targets: list[int]
    skipped: list[tuple[Any, ...]] = field(default_factory=list)
    attributions: dict[str, np.ndarray] | None = None
    derived: dict[str, np.ndarray] = field(default_factory=dict)

    def columns(self) -> dict[str, np.ndarray]:
        """The table's columns, as in a written file (``ref_0``, ``alt_0``, ``delta_0``, ...)."""
        out = dict(self.variants)
        quantities = {**self.predictions, **self.scores, **self.derived}
        for name, values in quantities.items():
            table = values if values.ndim == 2 else values[:, None]
            for k, t in enumerate(self.targets):
                out[f"{name}_{t}"] = table[:, k]
        return out

    def to_frame(self) -> Any:
        """The table as a pandas DataFrame (``pip install pandas``)."""
        from .._optional import import_optional

        return import_optional("pandas").DataFrame(self.columns())


@dataclass(frozen=True)
class VariantMethod:
    """Reference and alternative predictions of every kept variant (the job layer's method)."""

    stream: VariantStream
    scores: tuple[str, ...]
    run_settings: dict[str, Any]
    func: str = "variant_effects"
    random_state: Any = 0
    #: Columns computed on the host from each finished block of predictions and scores
    #: (``derive(block) -> {name: (n, K) array}`` for the names in ``derived``).
    derive: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
    derived: tuple[str, ...] = ()
    views: Views = field(default_factory=Views)
    #: The positional output that profile and bin scores compare (a named head), if any.
    positional: Any = None

    def settings(self) -> dict[str, Any]:
        return dict(self.run_settings)

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        return {"ref": (n_targets,), "alt": (n_targets,)}

    def kernel(self, context: JobContext) -> VariantKernel:
        return VariantKernel(
            context.backend,
            context.model,
            head=context.head,
            targets=context.targets,
            stream=self.stream,
            offset=context.row_offset,
            first=context.row_offset + context.source.offset,
            n_variants=context.source.n_sequences,
            scores=self.scores,
            func=self.func,
            views=self.views,
            positional=self.positional,
            derive=self.derive,
            derived=self.derived,
        )

    def open_sink(
        self,
        options: RunOptions,
        targets: list[int],
        squeeze: bool,
        shard: Shard | None,
        description: dict[str, str],
    ) -> EffectsWriter:
        settings = dict(self.run_settings, targets=targets, description=description)
        if shard is not None:
            settings["shard"] = shard.setting()
        n = self.stream.catalog.n if shard is None else shard.stop - shard.start
        return EffectsWriter(
            options.out,
            stream=self.stream,
            offset=0 if shard is None else shard.start,
            n_variants=n,
            targets=targets,
            scores=self.scores + self.derived,
            squeeze=squeeze,
            settings=settings,
            overwrite=options.overwrite,
            func=self.func,
        )


def _content_fingerprint(variants: Any, records: Any) -> str:
    """A digest of the variants: the file's bytes, or (a table in memory) its records.

    A record's chromosome, position, id, REF and ALT alleles all count (a table of other ids
    at the same positions is another table); each record is one JSON line, so no value can
    run into the next.
    """
    if isinstance(variants, (str, os.PathLike)):
        return file_fingerprint(variants)
    digest = hashlib.blake2b(digest_size=16)
    for rec in records():
        line = [rec.chrom, rec.pos, rec.id, rec.ref, list(rec.alts)]
        digest.update(json.dumps(line, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return digest.hexdigest()


def _check_ensemble(model: Any, positional: Any, views: Views, output_fn: Any, func: str) -> None:
    """An ensemble (a list of models) gives the mean of ``output_fn`` over its members, so
    neither a positional output to compare nor outputs to turn back to the forward strand."""
    if not isinstance(model, (list, tuple)):
        return
    if positional is not None:
        raise parameter_error(
            func,
            "score",
            "scores of the ensemble's mean outputs (not jsd, l2 or log_l2)",
            "a positional score for a list of models",
            "Score each model on its own and average the tables.",
        )
    if views.strands == "both" and hasattr(output_fn, "reoriented"):
        raise parameter_error(
            func,
            "strands",
            "'forward' for an ensemble whose output_fn reads positions (a tracks or profile head)",
            "'both'",
            "Score each model on its own with strands='both' and average the tables.",
        )


def _check_attributions(attributions: Any, options: Any, layout: Any, func: str) -> dict[str, Any]:
    from ..attribution.methods import METHODS

    if attributions is not None and attributions not in METHODS:
        raise parameter_error(
            func,
            "attributions",
            "None or one of " + ", ".join(repr(m) for m in METHODS),
            attributions,
        )
    if layout not in ("NLC", "NCL"):
        raise parameter_error(func, "layout", "'NLC' or 'NCL'", layout)
    if options is None:
        return {}
    if not isinstance(options, Mapping) or any(k in _RESERVED for k in options):
        raise parameter_error(
            func,
            "attribution_options",
            "None or a dict of the attribution method's own keywords",
            options,
            "target, batch_size, device, out and the other shared keywords are set by "
            "variant_effects itself.",
        )
    return dict(options)


@shared_docs
def variant_effects(
    model: Any,
    genome: Any,
    variants: Any,
    *,
    length: int,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    score: str | Sequence[str] = ("delta", "log_ratio"),
    profile: Any = None,
    strands: Literal["forward", "both"] = "forward",
    shifts: Sequence[int] = (0,),
    null: Literal["shuffle", "matched"] | None = None,
    n_null: int = N_NULL,
    peaks: Any = None,
    random_state: int | np.random.Generator | None = 0,
    attributions: str | None = None,
    attribution_options: Mapping[str, Any] | None = None,
    layout: Literal["NLC", "NCL"] = "NLC",
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    shard: tuple[int, int] | None = None,
) -> VariantEffects | str:
    """Predict what each variant of a VCF or a table does: model(alt) vs model(ref).

    Use this to score real variants (SNVs, indels, multi-allelic sites) in their genome context;
    use ``ism`` to scan every possible substitution of a window instead. Each variant gets a
    reference window of ``length`` from the genome, with its first REF base at ``length // 2``,
    and an alternative window of the same length: the REF bases replaced by ALT, re-centred by
    half the length change and trimmed or filled from the genome on both sides (the convention
    is in the guide, "Variant effects"). Reference and alternative windows of many variants
    share each device batch (an SNV's alternative window is made on the device); variants at
    one position share one reference pass; all K targets come from the same passes.

    Parameters
    ----------
    [[model]]
    genome : seqattrib.io.Genome, str or path of a FASTA file, or dict of name to sequence
    variants : str or path, DataFrame or dict of columns
        A VCF or BCF file (plain or bgzip, with or without an index; ``pip install
        'seqattrib[variants]'``), a TSV/CSV file, a DataFrame or a dict with columns ``chrom``,
        ``pos`` (1-based), ``ref``, ``alt`` (and optionally ``id``); several comma-separated
        ALT alleles are split into one row each. Variants whose REF differs from the genome,
        symbolic or non-ACGTN alleles, alleles longer than ``length``, and variants too close
        to a chromosome end (or on a chromosome the genome lacks) are skipped, with one
        ``SeqAttribWarning`` counting each reason (and, with ``out``, a list beside it).
    length : int
        Window length in bases (the model's input length).
    target : int, sequence of int or None
        Output index; a sequence of K indices (all from the same forward passes); None for all.
    [[output_fn]]
    score : str or sequence of str
        The scores, computed from the predictions averaged over the views (``strands``,
        ``shifts``):

        - ``"delta"``: ``f(alt) - f(ref)``; with a ``heads.tracks(..., reduce="sum")`` output,
          Enformer's and Borzoi's SAD (SUM).
        - ``"log_ratio"``: ``log f(alt) - log f(ref)`` (positive outputs: counts,
          probabilities; NaN with a warning where a prediction is not positive).
        - ``"logfc"``: ChromBPNet's logFC, the log2 fold change of the counts, for an
          ``output_fn`` that gives log counts (``heads.counts()``: ChromBPNet's and BPNet's
          counts output is already the log of the counts; ``heads.logsumexp_counts()`` for a
          bias-factorised model). Counts are averaged over the views as counts: ``log2(mean
          exp f(alt) / mean exp f(ref))``, which is ``(f(alt) - f(ref)) / ln 2`` for one view.
        - ``"jsd"``: ChromBPNet's JSD, the Jensen-Shannon distance (base 2, in [0, 1]) between
          the softmax of the alternative and of the reference profile logits (``profile``),
          flattened per window (strands and positions as one axis) and averaged over the views
          as logits. Compared on the device; one value per variant, in every target's column.
        - ``"abs_logfc_x_jsd"``: ``|logfc| * jsd``, ChromBPNet's ranking score.
        - ``"log_sum"``: ``log2(1 + f(alt)) - log2(1 + f(ref))``; with a ``heads.tracks(...,
          reduce="sum")`` output, Borzoi's logSED (logSUM).
        - ``"l2"``, ``"log_l2"``: Borzoi's D2 and logD2, ``sqrt(sum_b (alt_b - ref_b)^2)`` over
          the bins of ``profile=heads.tracks(...)`` (its tracks combined bin by bin), of the
          values or of ``log2(1 + x)``; one value per variant, in every target's column.
    profile : int, str, heads.profile(...) or heads.tracks(...), optional
        The positional output that ``"jsd"`` and ``"abs_logfc_x_jsd"`` compare (the profile
        logits: an output position or key, or ``heads.profile(output)``; default output 0, as
        bpnet-lite and ChromBPNet return ``(profile, counts)``), or that ``"l2"`` and
        ``"log_l2"`` compare (``heads.tracks(track, bins=...)``, required). It comes from the
        same forward passes as ``output_fn``.
    strands : {"forward", "both"}
        ``"both"``: each window is also predicted reverse-complemented (made on the device;
        the reverse complement of the forward window, as ChromBPNet's variant scorer makes it,
        so with an even ``length`` the variant is at ``length // 2 - 1`` of it) and the
        predictions of the two strands are averaged before the scores. Outputs that a named
        head knows as positional are turned back to the forward strand first:
        ``heads.profile`` reverses the positions and swaps the two strands of a stranded
        profile, ``heads.tracks`` reverses the bins before choosing them. The (batch, K)
        values of ``heads.counts`` or of another ``output_fn`` are averaged as they are.
    shifts : sequence of int
        Window shifts averaged like the strands, e.g. ``(-1, 0, 1)`` (at most 64 bases either
        way): shift ``s`` moves both windows ``s`` bases to the left along the genome (the
        sequence moves ``s`` bases to the right, as Basenji and Borzoi shift it, with genome
        bases where they pad). Outputs are not re-aligned for the shift. Variants need
        ``max |s|`` more genome bases on both sides (else they are skipped as too close to a
        chromosome end).
    null : {None, "shuffle", "matched"}
        Add an empirical p-value column ``pvalue_<score>_T`` per score: the null is ``n_null``
        SNVs scored exactly as the table (same model, heads, scores, strands, shifts and
        window), once before its rows. ``"shuffle"`` (ChromBPNet's null): each a scored
        variant's window shuffled with its dinucleotide counts kept, that variant's REF and ALT
        at the centre (a random SNV for an indel); ``"matched"``: random SNVs of the genome with
        the REF and ALT bases of a scored SNV, at least ``min(length // 2, 1000)`` bases from
        every scored variant. The p-value of a score s is ``(1 + #{|null| >= |s|}) / (n + 1)``
        over the n finite null scores of its target: one-sided on absolute values (ChromBPNet's
        right-tailed p-value of ``|logfc|``, ``jsd`` and their product), never below
        ``1 / (n_null + 1)``; a score of exactly 0 gets 1.
    n_null : int
        Null draws (at least 100). The default, 10,000, resolves p-values down to 1e-4 with
        about 10 % relative error at p = 0.01; the null costs about as much as scoring
        ``n_null`` variants, and holds its ``n_null`` windows in memory.
    peaks : str, path or seqattrib.io.Regions, optional
        A BED or narrowPeak file (or regions) of the model's peaks: the model's predictions on
        a window of ``length`` centred on each peak (summit) are made once, and the table gets
        ``ref_quantile_T``, ``alt_quantile_T`` and ``active_quantile_T`` (the larger: the
        active allele's), each allele's prediction as the fraction of peak predictions below
        it. Peaks on chromosomes the genome lacks or past a chromosome's end are an error.
    random_state : int, numpy.random.Generator or None
        Seeds the null. The null depends only on this, the variants and the genome: every
        shard and rerun of a job gets the same one (a Generator or None draws a seed, so such a
        table cannot be resumed).
    attributions : str, optional
        Also write attribution tracks of the reference and alternative windows with this
        ``explain`` method (``"eig"``, ``"ism"``, ``"saliency"``, ...): with ``out``, into
        ``OUT_STEM.ref.h5`` and ``OUT_STEM.alt.h5`` (tracks files, ``seqattrib plot --alt``
        draws them side by side).
    attribution_options : dict, optional
        The attribution method's own keywords (``n_baselines``, ``random_state``, ...).
    layout : {"NLC", "NCL"}
        Layout of the attribution tracks; the model is fed the layout it takes either way.
    batch_size : int or "auto"
        Model inputs per device batch: the views (strands x shifts) of the reference and
        alternative windows of many variants; a batch holds every view of its windows.
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the table into this file (TSV; Parquet for a ``.parquet`` name, ``pip install
        'seqattrib[parquet]'``; a VCF for a ``.vcf``, ``.vcf.gz`` (bgzip, tabix index) or
        ``.bcf`` name: the input's records with one ``Number=A`` INFO key ``SA_<column>`` per
        value column, ``pip install 'seqattrib[variants]'``) and return its path. A rerun with
        the same settings, model (the fingerprint of its parameters and buffers) and
        ``output_fn`` resumes it (or reuses it when finished), after checking each row against
        the variants; anything else is an error unless ``overwrite``. In a TSV table a
        chromosome name or id that holds ``%``, a tab, a newline or a carriage return is
        percent-encoded (``%25``, ``%09``, ``%0A``, ``%0D``), so each row stays one line;
        ``read_effects`` decodes them.
    [[overwrite]]
    shard : (index, count), optional
        Score only the index-th of count contiguous blocks of the kept variants;
        ``seqattrib.variants.merge_effects`` joins the shard tables.

    Returns
    -------
    VariantEffects, or the path of ``out``
        The table has one row per kept variant: ``chrom``, ``pos``, ``id``, ``ref``, ``alt``,
        then ``ref_T``, ``alt_T`` (the predictions averaged over the views) and the scores
        (``delta_T``, ``log_ratio_T``, ``logfc_T``, ...) per target T,
        then with ``null`` the p-values (``pvalue_delta_T``, ...) and with ``peaks`` the
        quantiles (``ref_quantile_T``, ``alt_quantile_T``, ``active_quantile_T``).
    """
    func = "variant_effects"
    length = check_length(length, func)
    scores = check_scores(score, func)
    positional = check_positional(profile, scores, func)
    views = Views(check_shifts(shifts, func), check_strands(strands, func))
    _check_ensemble(model, positional, views, output_fn, func)
    null_kind, n_null = check_null(null, n_null, func)
    seed = null_seed(random_state, func)
    extra = _check_attributions(attributions, attribution_options, layout, func)
    options = RunOptions.check(
        func,
        target=target,
        output_fn=output_fn,
        alphabet_axis=-1,
        batch_size=batch_size,
        max_cpu_sequences=max_cpu_sequences,
        device=device,
        verbose=verbose,
        backend=backend,
        out=out,
        overwrite=overwrite,
        regions=None,
        shard=shard,
    )
    text = GenomeText(genome, func)
    records = open_records(variants, func)
    found = catalog(records, text, length, func, margin=views.margin)
    _report(found, options.out, func)
    variants_fingerprint = _content_fingerprint(variants, records)
    genome_fingerprint = file_fingerprint(text.path) if text.path else sequences_fingerprint(genome)

    def rescore(where: Any, table: dict[str, list[Any]]) -> VariantEffects:
        """The table's own scoring of other variants (the null, the peaks), in memory."""
        return variant_effects(  # type: ignore[return-value]
            model,
            where,
            table,
            length=length,
            target=target,
            output_fn=output_fn,
            score=scores,
            profile=profile,
            strands=strands,
            shifts=shifts,
            batch_size=batch_size,
            max_cpu_sequences=max_cpu_sequences,
            device=device,
            verbose=verbose,
            backend=backend,
        )

    # columns computed from each block of scores (p-values, quantiles), from the whole job
    derive, derived, derived_settings = derived_columns(
        null=null_kind,
        n_null=n_null,
        seed=seed,
        peaks=peaks,
        found=found,
        genome=genome,
        sizes=text.sizes,
        length=length,
        pad=views.margin,
        fingerprints=(variants_fingerprint, genome_fingerprint),
        rescore=rescore,
        func=func,
    )
    keep = max(8192, 4 * options.max_cpu_sequences)
    stream = VariantStream(records, found, text, length, func, keep=keep)
    settings = {
        "format": FORMAT,
        "variants": describe(variants),
        # what the table's rows were made from, compared on resume and merge
        "variants_fingerprint": variants_fingerprint,
        "genome_fingerprint": genome_fingerprint,
        "n_alleles": found.n_alleles,
        "n_variants": found.n,
        "genome": text.name,
        "length": length,
        # every column after ref and alt, per target: the scores, then the derived columns
        "scores": [*scores, *derived],
        **views.settings(),
        "profile": None if positional is None else repr(positional),
        "attributions": attributions,
        "attribution_options": extra,
        **derived_settings,
    }
    method = VariantMethod(
        stream,
        scores,
        settings,
        derive=derive,
        derived=derived,
        views=views,
        positional=positional,
    )
    source = as_source(WindowArray(stream, "ref"), -1, func)
    result, squeeze = run_job(method, model, source, options)
    tracks = None
    if attributions is not None:
        tracks = {
            allele: _attributions(
                model, records, found, text, allele, attributions, extra, layout, length, options
            )
            for allele in ("ref", "alt")
        }
    if isinstance(result, str):
        return result
    return _in_memory(
        result,  # type: ignore[arg-type]
        found.skipped,
        scores,
        method.derived,
        squeeze,
        tracks,
    )


def _report(found: Catalog, out: str | None, func: str) -> None:
    if len(found.skipped):
        warnings.warn(
            f"{func} {found.skipped.summary(found.n_alleles)}"
            + (f"; the list is in {companion(out, 'skipped')}" if out else ""),
            SeqAttribWarning,
            stacklevel=3,
        )
    if found.n == 0:
        if out is not None:  # no table to write: the list says why (else the writer writes it)
            write_skipped(companion(out, "skipped"), found.skipped, func)
        raise parameter_error(
            func,
            "variants",
            "at least one variant to score",
            f"none of {found.n_alleles} ({found.skipped.summary(found.n_alleles)})",
            "Check that the variants and the genome use the same assembly and chromosome names.",
            described=True,
        )


def _attributions(
    model: Any,
    records: Any,
    found: Catalog,
    text: GenomeText,
    allele: str,
    method: str,
    extra: dict[str, Any],
    layout: str,
    length: int,
    options: RunOptions,
) -> Any:
    """Attribution tracks of every kept variant's ``allele`` window (``explain``)."""
    from ..attribution.methods import explain

    stream = VariantStream(records, found, text, length, options.func)
    starts = stream.window_starts(allele)
    regions = SimpleNamespace(
        chrom=[found.chroms[i] for i in found.chrom], start=starts, end=starts + length
    )
    path = None if options.out is None else companion(options.out, allele)
    return explain(
        model,
        WindowArray(stream, allele, layout),
        method=method,
        target=options.target,
        output_fn=options.output_fn,
        batch_size="auto" if options.batch_size is None else options.batch_size,
        max_cpu_sequences=options.max_cpu_sequences,
        device=options.device,
        verbose=options.verbose,
        backend=options.backend,
        out=path,
        overwrite=options.overwrite,
        regions=regions if path is not None else None,
        shard=options.shard,
        **extra,
    )


def _in_memory(
    result: tuple[list[tuple[str, int, str, str, str]], np.ndarray, list[int]],
    skipped: Skipped,
    scores: tuple[str, ...],
    derived: tuple[str, ...],
    squeeze: bool,
    tracks: dict[str, Any] | None,
) -> VariantEffects:
    identity, values, targets = result
    names = ("chrom", "pos", "id", "ref", "alt")
    variants = {
        name: np.array([row[i] for row in identity], dtype=np.int64 if name == "pos" else str)
        for i, name in enumerate(names)
    }
    quantities = ("ref", "alt", *scores, *derived)
    blocks = values.reshape(len(values), len(quantities), len(targets))
    tables = {q: blocks[:, i, 0] if squeeze else blocks[:, i] for i, q in enumerate(quantities)}
    return VariantEffects(
        variants,
        {"ref": tables["ref"], "alt": tables["alt"]},
        {q: tables[q] for q in scores},
        targets,
        list(skipped.rows),
        tracks,
        {q: tables[q] for q in derived},
    )
