"""TRAK and TracIn on a two-head profile model as the field trains it (a BPNet-style profile and
counts head in a tuple): ``output_fn``, ``target``, the profile and counts losses and
``parameters=`` against scores built by hand from torch autograd and hand-written losses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import FLOAT32, assert_close
from tracin_models import one_torch_thread

import seqattrib as sa

LENGTH, N_TRAIN, N_TEST = 24, 30, 5


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


class TwoHeads(torch.nn.Module):
    """(batch, length, 4) -> (profile logits (batch, length, 2), log counts (batch, 2))."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Conv1d(4, 5, 5, padding=2)
        self.profile = torch.nn.Conv1d(5, 2, 3, padding=1)
        self.counts = torch.nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.body(x.transpose(1, 2)))
        return self.profile(h).transpose(1, 2), self.counts(h.mean(-1))


def profile(out: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The profile head, strands flattened as bpnet-lite does: (batch, length * 2)."""
    return out[0].reshape(out[0].shape[0], -1)


def counts(out: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return out[1]


def hand_mnll(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return -(y * torch.log_softmax(logits, dim=-1)).sum(-1)


def hand_poisson(log_rate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.exp(log_rate) - y * log_rate


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(3)
    X = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (N_TRAIN + N_TEST, LENGTH))]
    y_profile = rng.poisson(2.0, (N_TRAIN + N_TEST, LENGTH * 2)).astype(np.float32)
    y_counts = rng.poisson(5.0, (N_TRAIN + N_TEST, 2)).astype(np.float32)
    torch.manual_seed(0)
    model = TwoHeads()
    states = []
    for _ in range(2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.2 * torch.randn_like(p))
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    return model, states, X, y_profile, y_counts


def grads(model, state, x, loss, names=None) -> np.ndarray:
    """Per-example gradients of ``loss(model(x_i))`` by a plain autograd loop (n, n_params)."""
    model.load_state_dict(state)
    params = [p for n, p in model.named_parameters() if names is None or n in names]
    rows = []
    for i in range(len(x)):
        value = loss(model(torch.as_tensor(x[i : i + 1])), i)
        found = torch.autograd.grad(value, params, allow_unused=True)
        pairs = zip(params, found, strict=True)
        parts = [torch.zeros_like(p) if g is None else g for p, g in pairs]
        rows.append(torch.cat([g.reshape(-1) for g in parts]))
    return torch.stack(rows).double().numpy()


def test_tracin_profile_loss_equals_hand_written_mnll(setup):
    model, states, X, y_profile, _ = setup

    def loss(out, i):
        return hand_mnll(profile(out), torch.as_tensor(y_profile[i : i + 1])).sum()

    expected = sum(
        grads(model, s, X[N_TRAIN:], lambda o, i: loss(o, N_TRAIN + i))
        @ grads(model, s, X[:N_TRAIN], loss).T
        for s in states
    )
    tracin = sa.TracIn(model, states, loss="multinomial", output_fn=profile, batch_size=7)
    tracin.fit(X[:N_TRAIN], y_profile[:N_TRAIN])
    assert_close(tracin.scores(X[N_TRAIN:], y_profile[N_TRAIN:]), expected, FLOAT32)


def test_tracin_counts_target_equals_hand_written_poisson(setup):
    model, states, X, _, y_counts = setup

    def loss(out, i):
        return hand_poisson(counts(out)[:, 1], torch.as_tensor(y_counts[i : i + 1, 1])).sum()

    expected = sum(
        grads(model, s, X[N_TRAIN:], lambda o, i: loss(o, N_TRAIN + i))
        @ grads(model, s, X[:N_TRAIN], loss).T
        for s in states
    )
    tracin = sa.TracIn(model, states, loss="poisson", output_fn=counts, target=1, batch_size=7)
    tracin.fit(X[:N_TRAIN], y_counts[:N_TRAIN, 1])
    assert_close(tracin.scores(X[N_TRAIN:], y_counts[N_TRAIN:, 1]), expected, FLOAT32)


def test_trak_exact_features_equal_the_hand_formula(setup):
    """TRAK without projection, Poisson counts head: phi = grad of the log-rate,
    Q = y - exp(f), score = mean_c phi_test K_c^-1 phi_train Q."""
    model, states, X, _, y_counts = setup
    y = y_counts[:, 0]
    total = np.zeros((N_TEST, N_TRAIN))
    for s in states:
        model.load_state_dict(s)

        def f(out, i):
            return counts(out)[0, 0]

        phi = grads(model, s, X[:N_TRAIN], f)
        phi_test = grads(model, s, X[N_TRAIN:], f)
        with torch.no_grad():
            rate = counts(model(torch.as_tensor(X[:N_TRAIN])))[:, 0].double().numpy()
        q = y[:N_TRAIN] - np.exp(rate)
        gram = phi.T @ phi
        gram += 1e-6 * np.trace(gram) * np.eye(len(gram))
        total += phi_test @ np.linalg.solve(gram, phi.T) * q
    expected = total / len(states)
    trak = sa.TRAK(model, states, loss="poisson", output_fn=counts, target=0, proj_dim=None)
    with pytest.warns(sa.SeqAttribWarning, match="parameters >= 30 training examples"):
        trak.fit(X[:N_TRAIN], y[:N_TRAIN])
    scores = trak.scores(X[N_TRAIN:], None)  # the Poisson output function reads no label
    assert_close(scores, expected, FLOAT32)


@pytest.mark.parametrize("method", ["TRAK", "TracIn"])
def test_parameters_equal_a_model_with_the_others_frozen(setup, method, tmp_path):
    model, states, X, _, y_counts = setup
    y = y_counts[:, 1]
    kwargs = {"loss": "mse", "output_fn": counts, "target": 1, "proj_dim": 16, "batch_size": 8}
    cls = sa.TRAK if method == "TRAK" else sa.TracIn
    chosen = cls(model, states, parameters="last", **kwargs)  # the counts head, registered last
    chosen.fit(X[:N_TRAIN], y[:N_TRAIN], store=tmp_path / "last.h5")
    frozen = TwoHeads()
    for name, p in frozen.named_parameters():
        p.requires_grad_(name.startswith("counts."))
    reference = cls(frozen, states, **kwargs).fit(X[:N_TRAIN], y[:N_TRAIN])
    expected = reference.scores(X[N_TRAIN:], y[N_TRAIN:])
    assert np.array_equal(chosen.scores(X[N_TRAIN:], y[N_TRAIN:]), expected)
    everything = cls(model, states, **kwargs).fit(X[:N_TRAIN], y[:N_TRAIN])
    assert not np.allclose(everything.scores(X[N_TRAIN:], y[N_TRAIN:]), expected)
