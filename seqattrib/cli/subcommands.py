"""The subcommands' own options (the shared ones are in ``parser``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .data_attribution import add_tracin, add_trak
from .experiments import add_marginalize, add_space
from .motifs import add_seqlets
from .parser import (
    BATCH_SIZE,
    HEAD,
    POSITIVE,
    POSITIVE_FLOAT,
    SHARD,
    TARGETS,
    WINDOW,
    Parser,
    RenamedFlag,
    add_head,
    add_model_and_sequences,
    add_out,
    add_run,
)

BASELINES = ["zeros", "uniform", "shuffle", "dinuc_shuffle", "random"]


@dataclass(frozen=True)
class MethodFlag:
    """A flag that sets one keyword of the attribution methods that take it (which ones, and
    their defaults, come from the method registry)."""

    flag: str
    keyword: str
    help: str
    options: dict[str, Any] = field(default_factory=dict)
    #: A store_true flag that turns the keyword off (--hypothetical: multiply_by_inputs=False).
    invert: bool = False
    #: Old spellings of the flag, still accepted with a warning.
    old: tuple[str, ...] = ()
    #: What the help says of the default, where the methods' own defaults say nothing.
    default: str | None = None
    #: The value's name in the help.
    metavar: str = "VALUE"

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def parser_default(self) -> Any:
        return self.options.get("default", False if self.is_switch else None)

    @property
    def is_switch(self) -> bool:
        return self.options.get("action") == "store_true"

    def value(self, given: Any) -> Any:
        """The keyword's value for the flag's parsed value."""
        return not given if self.invert else given

    def add(self, p: argparse.ArgumentParser, methods: list[Any], prefix: str = "") -> None:
        """Add the flag to ``p``, its help naming the ``methods`` that take it (after
        ``prefix``); a flag no method takes is left out."""
        users = [m for m in methods if takes(m, self.keyword)]
        if not users:
            return
        text = f"{prefix}{', '.join(m.name for m in users)}: {self.help}"
        options = {k: v for k, v in self.options.items() if k != "action"}
        if self.old and "choices" in options:  # the choices once in the help, not per name
            options["metavar"] = self.metavar
            text += f": {', '.join(options['choices'])}"
        if "default" in self.options:
            text += " (default: %(default)s)"
        elif self.default is not None:
            text += f" (default: {self.default})"
        elif not self.is_switch:
            text += f" (default: {_defaults(users, self.keyword)})"
        action = RenamedFlag if self.old else self.options.get("action", "store")
        p.add_argument(self.flag, *self.old, action=action, help=text, **options)


def takes(method: Any, keyword: str) -> bool:
    """Whether a flag reaches ``method``'s ``keyword``: the method has it and the command
    line does not fix it."""
    return keyword in method.options and keyword not in method.keep_default


def _defaults(methods: list[Any], keyword: str) -> str:
    """``25 for ig, 3 for eig``: each method's default of ``keyword``, equal ones together."""
    groups: dict[str, list[str]] = {}
    for m in methods:
        groups.setdefault(str(m.options[keyword]), []).append(m.name)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{value} for {' and '.join(names)}" for value, names in groups.items())


def method_flags() -> tuple[MethodFlag, ...]:
    """The flags of ``seqattrib explain`` (and ``variants --attributions``) that reach the
    methods' own keywords."""
    from ..attribution.paths import QUADRATURES

    return (
        MethodFlag(
            "--n-steps",
            "n_steps",
            "points (gausslegendre) or intervals of each path",
            {"type": POSITIVE},
        ),
        MethodFlag("--n-baselines", "n_baselines", "baselines per sequence", {"type": POSITIVE}),
        MethodFlag("--baselines", "baselines", "references", {"choices": BASELINES}),
        MethodFlag(
            "--quadrature",
            "quadrature",
            "the quadrature rule of each path integral",
            {"choices": list(QUADRATURES)},
            old=("--integration",),
            metavar="RULE",
        ),
        MethodFlag(
            "--preset",
            "preset",
            "CREsted's 25 baselines x 25 trapezoid steps instead of the defaults",
            {"choices": ["crested"]},
            default="none",
        ),
        MethodFlag(
            "--hypothetical",
            "multiply_by_inputs",
            "store hypothetical scores (what TF-MoDISco takes) instead of contributions",
            {"action": "store_true"},
            invert=True,
        ),
        MethodFlag(
            "--correct-gradient",
            "correct_gradient",
            "subtract the mean over the four bases from every gradient",
            {"action": "store_true"},
        ),
        MethodFlag(
            "--random-state",
            "random_state",
            "seed of random baselines",
            {"type": int, "default": 0},
        ),
        MethodFlag(
            "--stderr",
            "return_stderr",
            "also store the standard error of each attribution (dataset 'stderr')",
            {"action": "store_true"},
        ),
        MethodFlag(
            "--tolerance",
            "tolerance",
            "add baselines per sequence until its relative standard error is at most this",
            {"type": POSITIVE_FLOAT},
            default="a fixed number of baselines",
        ),
        MethodFlag(
            "--max-baselines",
            "max_baselines",
            "with --tolerance, the most baselines per sequence",
            {"type": POSITIVE, "default": 400},
        ),
    )


#: The flags of ``seqattrib variants`` that reach its ``--attributions`` method (and
#: ``--random-state``, its own flag, where the method takes a seed).
VARIANT_METHOD_FLAGS = ("--n-baselines", "--n-steps")


def explained_methods() -> list[Any]:
    """The registry's methods that ``seqattrib explain --method`` runs."""
    from ..attribution.methods import METHODS

    return [m for m in METHODS.values() if m.command == "explain"]


def _sub(sub: Any, name: str, help: str) -> Parser:
    p: Parser = sub.add_parser(name, help=help, description=help)
    return p


def explain(sub: Any) -> Parser:
    methods = explained_methods()
    names = [m.name for m in methods]
    p = _sub(sub, "explain", f"{either(names)} attribution tracks into an HDF5 file")
    add_model_and_sequences(p)
    p.add_argument(
        "--method",
        choices=[m.name for m in methods],
        default="eig",
        help="attribution method (default: %(default)s): "
        + "; ".join(f"{m.name}, {m.summary}" for m in methods),
    )
    for flag in method_flags():
        flag.add(p, methods)
    add_run(p)
    return p


def either(names: list[str]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def ism(sub: Any) -> Parser:
    p = _sub(sub, "ism", "saturation mutagenesis scores into an HDF5 file")
    add_model_and_sequences(p)
    p.add_argument(
        "--positions",
        type=WINDOW,
        help="start:end window to scan, 0-based, end excluded (default: every position)",
    )
    p.add_argument(
        "--score",
        choices=["delta", "log_ratio"],
        default="delta",
        help="f(mutant) - f(reference), or the log ratio for positive outputs "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--fast",
        choices=["auto", "yes", "no"],
        default="auto",
        help="recompute only the windows a mutation can change (default: %(default)s)",
    )
    add_run(p)
    return p


def _scores(text: str) -> list[str]:
    from ..variants.scores import SCORES

    names = text.split(",")
    if any(n not in SCORES for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of {either(list(SCORES))}, got {text!r}"
        )
    return names


def _shifts(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers such as -1 0 1 (or -1,0,1), got {text!r}"
        ) from None


def _positional(text: str) -> Any:
    """``--profile``: an output index, else a named head (``profile:chrombpnet``,
    ``tracks:...``)."""
    return int(text) if text.isdigit() else HEAD(text)


def variants(sub: Any) -> Parser:
    """The ``variants`` command's options (long: one ``add_argument`` per option, nothing
    else)."""
    from ..attribution.methods import METHODS

    p = _sub(
        sub,
        "variants",
        "effects of the variants of a VCF or a table into a TSV, Parquet or VCF table",
    )
    p.add_argument(
        "--model",
        required=True,
        help="the model: a torch.export .pt2 file, a TorchScript file, a .keras/.h5 file, a "
        "SavedModel folder, pkg.module:factory, or 'demo' / 'demo-keras'",
    )
    p.add_argument(
        "--weights",
        help="weights loaded into a pkg.module:factory model or the demo (a torch state dict or "
        "a Keras weights file)",
    )
    p.add_argument("--genome", required=True, help="the genome FASTA (plain or bgzip)")
    p.add_argument(
        "--vcf",
        help="the variants: a VCF or BCF file (plain or bgzip, with or without an index); "
        "multi-allelic records are split (default: none; give --vcf or --table)",
    )
    p.add_argument(
        "--table",
        help="the variants as a TSV/CSV file with columns chrom, pos (1-based), ref, alt "
        "(and optionally id), instead of --vcf (default: none)",
    )
    p.add_argument(
        "--length", type=POSITIVE, required=True, help="window length in bases (the model's)"
    )
    p.add_argument(
        "--target",
        type=TARGETS,
        default=0,
        help="output index, a comma list (0,2) or 'all' (default: 0)",
    )
    add_head(p)
    p.add_argument(
        "--score",
        type=_scores,
        default=["delta", "log_ratio"],
        help="comma list of scores: delta (alt - ref), log_ratio (log alt - log ref, for "
        "positive outputs), logfc (log2 fold change of the counts of --head counts), jsd "
        "(Jensen-Shannon distance of the --profile profiles), abs_logfc_x_jsd, log_sum "
        "(log2(1 + alt) - log2(1 + ref) of --head tracks:...; Borzoi's logSED), l2 and log_l2 "
        "(norm of the per-bin differences of --profile tracks:...; D2, logD2) "
        "(default: delta,log_ratio)",
    )
    p.add_argument(
        "--profile",
        type=_positional,
        help="the positional output that jsd and abs_logfc_x_jsd (a profile) or l2 and log_l2 "
        "(bins x tracks) compare: an output index, or a head as for --head: "
        "profile[:chrombpnet|bpnet-lite][,output=KEY] or tracks:... (default: output 0 for "
        "profile scores)",
    )
    p.add_argument(
        "--strands",
        choices=["forward", "both"],
        default="forward",
        help="score each variant on the forward window, or on both strands (the reverse "
        "complement too) averaged (default: %(default)s)",
    )
    p.add_argument(
        "--shifts",
        type=_shifts,
        nargs="+",
        default=[[0]],
        help="window shifts in bases, averaged: --shifts -1 0 1 (or --shifts=-1,0,1) (default: 0)",
    )
    p.add_argument(
        "--null",
        choices=["shuffle", "matched"],
        help="add an empirical p-value column per score against this null: SNVs in "
        "dinucleotide-shuffled windows (shuffle) or random SNVs of the genome with matched "
        "bases (matched) (default: none)",
    )
    p.add_argument(
        "--n-null",
        type=POSITIVE,
        help="null draws with --null; p-values are at least 1/(n+1) (default: 10000)",
    )
    p.add_argument(
        "--peaks",
        help="a BED or narrowPeak file of the model's peaks: add each allele's prediction as a "
        "quantile of the predictions on the peaks (ref/alt/active_quantile) (default: none)",
    )
    p.add_argument(
        "--random-state",
        type=int,
        default=0,
        help="seed of the null and of the --attributions method's random baselines "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--attributions",
        choices=list(METHODS),
        help="also write attribution tracks of the reference and alternative windows with "
        "this method into OUT_STEM.ref.h5 and OUT_STEM.alt.h5 (default: none)",
    )
    for flag in method_flags():
        if flag.flag in VARIANT_METHOD_FLAGS:
            flag.add(p, list(METHODS.values()), prefix="--attributions ")
    p.add_argument(
        "--layout",
        choices=["NLC", "NCL"],
        help="layout of the attribution tracks (default: NCL for torch models, NLC for Keras)",
    )
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE,
        default="auto",
        help="windows per device batch, or 'auto' to probe the fastest (default: %(default)s)",
    )
    p.add_argument(
        "--max-cpu-sequences",
        type=POSITIVE,
        default=1024,
        help="finished variants held on the host before they are written (default: %(default)s)",
    )
    p.add_argument(
        "--device", help="cpu, cuda, cuda:1 or /GPU:0 (default: where the model is loaded)"
    )
    p.add_argument(
        "-o",
        "--out",
        required=True,
        help="the table to write, its format from its name: TSV; Parquet (.parquet); VCF "
        "(.vcf, .vcf.gz bgzipped with a tabix index, or .bcf): the input's records with one "
        "INFO key SA_<column> per value column; a rerun with the same settings resumes it",
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out instead of resuming it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--shard",
        type=SHARD,
        help="i/n: score the i-th of n contiguous blocks of the variants into "
        "OUT.shard-i-of-n.tsv (or .vcf.gz, ...) (default: from SLURM_ARRAY_TASK_ID/COUNT or "
        "RANK/WORLD_SIZE)",
    )
    return p


def export(sub: Any) -> Parser:
    p = _sub(
        sub,
        "export",
        "TF-MoDISco inputs, bigWig tracks or a ChromBPNet scores file from a tracks file",
    )
    p.add_argument("format", choices=["modisco", "bigwig", "chrombpnet"], help="what to write")
    p.add_argument("tracks", help="a tracks file written by explain or ism")
    add_out(
        p,
        "--outdir",
        "modisco, bigwig: the output folder (made if missing); chrombpnet: the scores file, "
        "e.g. prefix.counts_scores.h5",
        required=True,
    )
    p.add_argument("--chrom-sizes", help="bigwig: the genome's chrom sizes file")
    p.add_argument(
        "--target",
        type=int,
        help="chrombpnet: the output whose scores to write (default: the file's only one)",
    )
    p.add_argument("--quiet", action="store_true", help="chrombpnet: no progress bar")
    p.add_argument(
        "--class-names",
        help="comma list, one file-name-safe name per target (default: target0, target1, ...)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    return p


def plot(sub: Any) -> Parser:
    p = _sub(sub, "plot", "attribution logo (or ISM heatmap) of one row of a tracks file")
    p.add_argument("tracks", help="a tracks file written by explain or ism")
    p.add_argument("--row", type=int, default=0, help="the row to draw (default: %(default)s)")
    p.add_argument(
        "--region",
        help="chrom:start-end on the genome (1-based, end included, as a browser shows it): "
        "the row whose window holds it, zoomed to it (files with regions)",
    )
    p.add_argument(
        "--target",
        type=int,
        default=0,
        help="output index, in files with several (default: %(default)s)",
    )
    p.add_argument("--class-names", help="comma list naming the targets, for the title")
    p.add_argument(
        "--alt",
        help="the alternative tracks of seqattrib variants --attributions (OUT.alt.h5): draw "
        "the row of TRACKS (OUT.ref.h5) above it, around the variant (default: TRACKS alone)",
    )
    p.add_argument("--start", type=int, help="first position drawn, 0-based in the window")
    p.add_argument("--end", type=int, help="position after the last one drawn")
    add_out(p, "--output", "the image, written exactly there: .png, .pdf or .svg", required=True)
    p.add_argument("--overwrite", action="store_true", help="replace an existing image")
    return p


def merge(sub: Any) -> Parser:
    p = _sub(sub, "merge", "join the shard files of a sharded run into one file")
    p.add_argument(
        "shards",
        nargs="+",
        help="every shard file of the job, in any order: tracks files, features stores of "
        "trak fit or tracin fit, or the tables of seqattrib variants: TSV, Parquet or VCF "
        "(their attribution tracks are merged with them)",
    )
    add_out(p, "--output", "the merged tracks file, features store or table", required=True)
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return p


def launch(sub: Any) -> Parser:
    p = _sub(sub, "launch", "one worker per local device on its own shard, then merge")
    p.add_argument(
        "--devices", required=True, help="comma list of devices: 0,1,2,3 (GPUs) or cpu,cpu"
    )
    p.add_argument("--overwrite", action="store_true", help="replace the merged output")
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="the workers' command: explain|ism ... --out tracks.h5, or trak|tracin fit ... "
        "--store train_features.h5",
    )
    return p


def demo(sub: Any) -> Parser:
    p = _sub(
        sub,
        "demo",
        "explain the packaged demo model end to end (run again, it reuses its own files; it "
        "replaces no other file without --overwrite)",
    )
    add_out(p, "--outdir", "output folder (default: %(default)s)", default="seqattrib-demo")
    p.add_argument(
        "--n-sequences",
        type=POSITIVE,
        default=100,
        help="held-out demo sequences to explain, at most the 400 the model was not trained on "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--framework",
        choices=["torch", "keras"],
        default="torch",
        help="which copy of the demo model (default: %(default)s)",
    )
    p.add_argument(
        "--data", help="folder with the demo files (default: the ones installed with seqattrib)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files of the output folder that the demo did not write",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


SUBCOMMANDS: dict[str, Callable[[Any], Parser]] = {
    "explain": explain,
    "ism": ism,
    "variants": variants,
    "marginalize": add_marginalize,
    "space": add_space,
    "seqlets": add_seqlets,
    "export": export,
    "plot": plot,
    "merge": merge,
    "launch": launch,
    "demo": demo,
    "trak": add_trak,
    "tracin": add_tracin,
}
