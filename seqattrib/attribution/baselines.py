"""Reference sequences for (expected) integrated gradients.

Random baselines of a sequence are drawn from a generator seeded by ``random_state`` and the
sequence's own content, so a subset, a permutation or a shard of X gets exactly the baselines it
would get in the full run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._validation import check_positive_int
from ..engine import SequenceSource
from ..io.fingerprint import function_identity

NAMES = ("zeros", "uniform", "shuffle", "dinuc_shuffle", "random")
#: Baselines drawn at random per sequence (the others are the same for every draw).
RANDOM_KINDS = ("shuffle", "dinuc_shuffle", "random")


def sequence_rng(seed: int, x_nlc: np.ndarray, block: int = 0) -> np.random.Generator:
    """A generator that depends only on ``seed`` and the sequence (an (L, 4) array); block b > 0
    of a stream drawn in blocks has its own, independent generator."""
    data = np.ascontiguousarray(x_nlc, dtype=np.float32).tobytes()
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "little")
    return np.random.default_rng([seed, digest] if block == 0 else [seed, digest, block])


def _blocks(
    draw: Callable[[int, np.random.Generator], np.ndarray],
    x_nlc: np.ndarray,
    seed: int,
    baseline_range: tuple[int, int] | None,
    n_baselines: int,
) -> np.ndarray:
    """Baselines of one sequence: ``draw(n, rng)`` once (a plain run), or the blocks of
    ``n_baselines`` (``baseline_range`` in whole blocks) of its stream, block b drawn with
    ``sequence_rng(seed, x, b)``, so that runs in rounds add new, independent baselines and
    their first round is the plain run."""
    if baseline_range is None:
        return draw(n_baselines, sequence_rng(seed, x_nlc))
    lo, hi = baseline_range
    blocks = range(lo // n_baselines, -(-hi // n_baselines))
    return np.concatenate([draw(n_baselines, sequence_rng(seed, x_nlc, b)) for b in blocks])


def _tokens(x_nlc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    columns, tokens = np.unique(x_nlc, axis=0, return_inverse=True)
    return tokens.reshape(-1), columns


def dinucleotide_shuffle(
    x_nlc: np.ndarray, n_shuffles: int, rng: np.random.Generator
) -> np.ndarray:
    """Shuffles of one sequence that keep every dinucleotide count exactly.

    The Altschul-Erickson walk: for each letter, the list of letters that follow it is
    permuted, keeping the letter's last successor last (so the walk is an Eulerian path through
    the dinucleotide graph); the walk then reads the lists in order. Letters are the distinct
    columns of ``x_nlc``, so N (all-zero) and soft columns are shuffled as letters of their own.

    Parameters
    ----------
    x_nlc : array of shape (length, 4)
    n_shuffles : int
    rng : numpy.random.Generator

    Returns
    -------
    array of shape (n_shuffles, length, 4)
    """
    tokens, columns = _tokens(x_nlc)
    length = len(tokens)
    if length <= 2:
        return np.repeat(x_nlc[None], n_shuffles, axis=0).astype(np.float32)
    n_tokens = len(columns)
    successors = [np.flatnonzero(tokens[:-1] == t) + 1 for t in range(n_tokens)]
    width = max(len(s) for s in successors)
    # the letter that the k-th visit of letter t leads to, per shuffle
    table = np.zeros((n_shuffles, n_tokens, width), dtype=np.int32)
    for t, nxt in enumerate(successors):
        m = len(nxt)
        if m == 0:
            continue
        order = np.tile(np.arange(m), (n_shuffles, 1))
        if m > 2:
            order[:, :-1] = rng.permuted(order[:, :-1], axis=1)
        table[:, t, :m] = tokens[nxt[order]]
    walk = np.empty((n_shuffles, length), dtype=np.int32)
    for s in range(n_shuffles):  # plain Python: the walk is sequential, one step per position
        following = [row.tolist() for row in table[s]]
        visits = [0] * n_tokens
        letter = int(tokens[0])
        path = [letter]
        for _ in range(length - 1):
            k = visits[letter]
            visits[letter] = k + 1
            letter = following[letter][k]
            path.append(letter)
        walk[s] = path
    return columns[walk].astype(np.float32)


def shuffle(x_nlc: np.ndarray, n_shuffles: int, rng: np.random.Generator) -> np.ndarray:
    """Mononucleotide shuffles: permutations of the positions, shape (n_shuffles, L, 4)."""
    order = rng.permuted(np.tile(np.arange(len(x_nlc)), (n_shuffles, 1)), axis=1)
    return x_nlc[order].astype(np.float32)


def random_one_hot(x_nlc: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random one-hot sequences of the same length, shape (n, L, 4)."""
    return np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=(n, len(x_nlc)))]


_GENERATORS: dict[str, Callable[[np.ndarray, int, np.random.Generator], np.ndarray]] = {
    "shuffle": shuffle,
    "dinuc_shuffle": dinucleotide_shuffle,
    "random": random_one_hot,
}


@dataclass
class BaselineSpec:
    """How the engine gets baselines.

    ``constant``: one number for every position (zeros, uniform); ``shared``: (B, *row) for
    every sequence; otherwise ``per_sequence(x_chunk, first) -> (n, B, *row)``.
    """

    n_baselines: int
    description: str
    constant: float | None = None
    shared: np.ndarray | None = None
    per_sequence: Callable[[np.ndarray, int], np.ndarray] | None = None


def resolve_baselines(
    baselines: Any,
    n_baselines: int,
    source: SequenceSource,
    seed: int,
    func: str,
    *,
    per_sequence_array: bool,
    row_offset: int = 0,
    baseline_range: tuple[int, int] | None = None,
) -> BaselineSpec:
    """Turn the ``baselines`` argument into a ``BaselineSpec``.

    ``per_sequence_array`` is True for EIG, whose arrays are (B, *row) or (N, B, *row); for IG
    (one baseline) arrays are (*row) or (N, *row). ``row_offset``: the row of X (and of a
    per-sequence array) where the run starts (a shard). ``baseline_range`` (lo, hi): random
    baselines lo to hi - 1 of each sequence's stream (its first ``hi`` draws), for runs that add
    baselines in rounds, in blocks of ``n_baselines`` (lo and hi are multiples of it).
    """
    block = n_baselines
    if baseline_range is not None:
        n_baselines = baseline_range[1] - baseline_range[0]
    row = source.row_shape
    if isinstance(baselines, str):
        if baselines == "zeros":
            return BaselineSpec(1, "zeros", constant=0.0)
        if baselines == "uniform":
            return BaselineSpec(1, "uniform", constant=0.25)
        if baselines in _GENERATORS:
            generate = _GENERATORS[baselines]

            def per_sequence(x: np.ndarray, first: int) -> np.ndarray:
                nlc = source.to_nlc(x)
                out = np.stack(
                    [_blocks(partial(generate, s), s, seed, baseline_range, block) for s in nlc]
                )
                return source.from_nlc(out)

            return BaselineSpec(n_baselines, baselines, per_sequence=per_sequence)
        raise parameter_error(
            func,
            "baselines",
            "one of " + ", ".join(repr(n) for n in NAMES) + ", an array or a callable",
            baselines,
        )
    if callable(baselines):
        fn = baselines

        def per_sequence(x: np.ndarray, first: int) -> np.ndarray:
            out = []
            for i, s in enumerate(x):
                nlc = source.to_nlc(s[None])[0]
                b = _blocks(partial(_call, fn, s), nlc, seed, baseline_range, block)
                b = b.astype(np.float32, copy=False)
                if b.shape != (n_baselines, *row):
                    raise parameter_error(
                        func,
                        "baselines",
                        f"a callable returning shape {(block, *row)} (n_baselines, *X.shape[1:])",
                        f"shape {b.shape} for sequence {first + i}",
                        described=True,
                    )
                _check_finite(b, func)
                out.append(b)
            return np.stack(out)

        return BaselineSpec(n_baselines, "callable", per_sequence=per_sequence)
    array = np.asarray(baselines, dtype=np.float32)
    _check_finite(array, func)
    n = source.n_sequences
    shared_shape: tuple[int, ...]
    per_shape: tuple[int, ...]
    if per_sequence_array:
        shared_shape, per_shape = (n_baselines, *row), (n, n_baselines, *row)
        expected = f"{shared_shape} (n_baselines, *X.shape[1:]) or {per_shape}"
    else:
        shared_shape, per_shape = row, (n, *row)
        expected = f"{shared_shape} (X.shape[1:]) or {per_shape} (one per sequence)"
    if array.shape == shared_shape:
        shared = array.reshape(-1, *row)
        return BaselineSpec(len(shared), "array", shared=shared)
    if array.shape == per_shape:
        b = per_shape[-3] if per_sequence_array else 1

        def per_sequence(x: np.ndarray, first: int) -> np.ndarray:
            at = row_offset + first
            return array[at : at + len(x)].reshape(len(x), b, *row)

        return BaselineSpec(b, "array", per_sequence=per_sequence)
    raise parameter_error(
        func,
        "baselines",
        f"an array of shape {expected}, in the layout of X",
        f"shape {array.shape}",
        "Transpose the baselines to the layout of X, or pass a name such as 'dinuc_shuffle'."
        + (
            ""
            if per_sequence_array
            else " For several baselines per sequence, use expected_integrated_gradients."
        ),
        described=True,
    )


class DefaultCount(int):
    """A method's default ``n_baselines`` (shown as the plain number in its signature): an
    array of baselines replaces it with its own count, while a count the user passes, even
    the same number, is checked against the array."""


def baseline_count(baselines: Any, n_baselines: Any, func: str) -> int:
    """Baselines per sequence for a method that averages over several.

    An array carries its own count: ``(B, L, 4)`` (shared) or ``(N, B, L, 4)`` (one set per
    sequence), either layout. It replaces a default ``n_baselines`` (a ``DefaultCount``); an
    ``n_baselines`` the user passed that contradicts it is refused.
    """
    given = not isinstance(n_baselines, DefaultCount)
    count = check_positive_int(n_baselines, "n_baselines", func)
    shape = np.shape(baselines)
    if isinstance(baselines, str) or callable(baselines) or len(shape) not in (3, 4):
        return count  # not a stack of baselines (resolve_baselines checks arrays' shapes)
    carried = int(shape[0] if len(shape) == 3 else shape[1])
    if given and count != carried:
        raise parameter_error(
            func,
            "n_baselines",
            f"{carried}, the baselines per sequence of the array of shape {shape}, or left out",
            n_baselines,
            "Drop n_baselines: an array of baselines carries its own count.",
        )
    return carried


def _call(fn: Callable[..., Any], x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(fn(x, n, rng))


def describe_baselines(baselines: Any, source: SequenceSource, n_baselines: int) -> str:
    """A text that identifies the baselines (stored with tracks files, compared on resume).

    A callable is identified by what it is (``function_identity``: its code, closure values
    and simple globals) and by what it returns: a digest of its baselines for the first,
    middle and last sequences of X, drawn with a fixed generator. So a deterministic callable
    resumes its file, and one that returns other baselines (another lambda, another closure,
    an edited body) is refused instead of mixing its rows with the file's.
    """
    if isinstance(baselines, str):
        return baselines
    if callable(baselines):
        outputs = hashlib.blake2b(digest_size=8)
        n = source.n_sequences
        for i in sorted({0, n // 2, n - 1} if n else set()):
            x = source.read(i, i + 1)
            rng = sequence_rng(0, source.to_nlc(x)[0])
            probe = np.ascontiguousarray(_call(baselines, x[0], n_baselines, rng), np.float32)
            outputs.update(f"{probe.shape}|".encode())
            outputs.update(probe.tobytes())
        return f"callable:{function_identity(baselines)}:output:{outputs.hexdigest()}"
    array = np.ascontiguousarray(np.asarray(baselines, dtype=np.float32))
    digest = hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()
    return f"array{list(array.shape)}:{digest}"


def _check_finite(array: np.ndarray, func: str) -> None:
    if not np.isfinite(array).all():
        raise parameter_error(
            func, "baselines", "finite", "an array with NaN or inf", described=True
        )
