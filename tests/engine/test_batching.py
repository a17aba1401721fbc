"""The batch-size probe picks the fastest size per row and caches it per model and shape."""

from __future__ import annotations

from seqattrib.engine.batching import REPROBE_FACTOR, AutoBatchSizer


class Model:
    pass


def _drive(sizer, cost, n_batches=40):
    """Feed the sizer batches whose time is cost(size) per row."""
    sizes = []
    for _ in range(n_batches):
        size = sizer.next_size()
        sizes.append(size)
        sizer.observe(size, size * cost(size) * 1e-3)  # milliseconds per row
    return sizes


def test_probe_stops_where_per_row_cost_rises_and_caches():
    model = Model()
    cost = {16: 1.0, 32: 0.6, 64: 0.4, 128: 0.3, 256: 0.5}.get
    sizer = AutoBatchSizer(model, "key", n_rows=10**6)
    sizes = _drive(sizer, lambda s: cost(s, 1.0))
    # 256 and 512 are both slower per row than 128 (each timed twice to be sure): two misses
    # end the probe at 128.
    assert sizes[:14] == [16, 16, 32, 32, 64, 64, 128, 128, 256, 256, 256, 512, 512, 512]
    assert set(sizes[14:]) == {128} and not sizer.timing
    again = AutoBatchSizer(model, "key", n_rows=10**6)
    assert again.next_size() == 128 and not again.timing
    assert AutoBatchSizer(model, "other", n_rows=10**6).timing


def test_one_noisy_timing_does_not_end_the_probe():
    cost = {16: 1.0, 32: 0.6, 64: 0.7, 128: 0.2, 256: 0.25, 512: 0.3}.get
    sizer = AutoBatchSizer(Model(), "key", n_rows=10**6)
    sizes = _drive(sizer, lambda s: cost(s, 1.0))
    assert sizes[-1] == 128


def test_small_jobs_do_not_cache_an_unfinished_probe():
    model = Model()
    sizer = AutoBatchSizer(model, "key", n_rows=100)
    _drive(sizer, lambda s: 1.0 / s, n_batches=4)  # 16, 16, 32, 32 rows: 4 left
    assert not sizer.timing
    assert AutoBatchSizer(model, "key", n_rows=10**6).timing


def test_out_of_memory_settles_on_the_best_size_so_far():
    model = Model()
    sizer = AutoBatchSizer(model, "key", n_rows=10**6)
    _drive(sizer, lambda s: 1.0 / s, n_batches=4)  # 16, 16, 32, 32: still improving
    sizer.out_of_memory(64)
    assert sizer.next_size() == 32 and not sizer.timing


def test_an_unfinished_probe_resumes_at_its_best_size_in_the_next_job():
    model = Model()
    first = AutoBatchSizer(model, "key", n_rows=100)
    _drive(first, lambda s: 1.0 / s, n_batches=4)  # 16, 16, 32, 32: still improving at 32
    second = AutoBatchSizer(model, "key", n_rows=10**6)
    assert second.timing and second.next_size() == 32  # not back at 16
    sizes = _drive(second, {32: 0.6, 64: 0.4, 128: 0.3, 256: 0.5, 512: 0.5}.get)
    assert sizes[:8] == [32, 32, 64, 64, 128, 128, 256, 256] and sizes[-1] == 128
    third = AutoBatchSizer(model, "key", n_rows=100)
    assert third.next_size() == 128 and not third.timing  # concluded: cached for good


def test_accelerators_start_the_climb_higher():
    sizer = AutoBatchSizer(Model(), "key", n_rows=10**6, first_size=256)
    sizes = _drive(sizer, {256: 0.5, 512: 0.3, 1024: 0.4, 2048: 0.4}.get)
    assert sizes[:10] == [256, 256, 512, 512, 1024, 1024, 1024, 2048, 2048, 2048]
    assert sizes[-1] == 512


def test_out_of_memory_caps_the_climb_and_never_stores_an_off_list_size():
    model = Model()
    sizer = AutoBatchSizer(model, "key", n_rows=30)
    sizer.out_of_memory(16)  # 16 rows did not fit: 8 from now on
    assert sizer.next_size() == 8
    sizer.observe(8, 0.1)
    sizer.observe(8, 0.1)  # nothing above 8 fits: the probe is over, 8 is cached
    again = AutoBatchSizer(model, "key", n_rows=10**6)  # must not crash
    assert again.next_size() == 8 and not again.timing
    climbing = AutoBatchSizer(Model(), "key", n_rows=10**6, first_size=256)
    sizes = _drive(climbing, {256: 0.5, 512: 0.4}.get, n_batches=4)  # 256, 256, 512, 512
    climbing.out_of_memory(1024)
    assert sizes == [256, 256, 512, 512] and climbing.next_size() == 512


# ------------------------------------------------------------- timings taken on a busy machine
COST = {16: 1.0, 32: 0.6, 64: 0.4, 128: 0.3, 256: 0.5, 512: 0.6}  # ms per row, 128 is best


def test_one_slow_timing_at_the_best_size_does_not_strand_the_probe():
    """Another process takes the cores while 128 is timed (one batch 5x slower): the probe
    times 128 again and keeps 128."""
    spiked = []

    def cost(size):
        if size == 128 and len([s for s in spiked if s == 128]) == 1:
            spiked.append(size)
            return COST[size] * 5
        spiked.append(size)
        return COST[size]

    sizer = AutoBatchSizer(Model(), "key", n_rows=10**6)
    sizes = _drive(sizer, cost)
    assert sizes[-1] == 128 and not sizer.timing
    assert (128, COST[128] * 1e-3) in sizer.probed


def test_a_probe_taken_under_load_is_probed_again_by_a_job_that_runs_faster():
    """The first job's probe ran while the cores were shared: every size from 64 up timed 3x
    slower, so it cached 32. The next job runs 32 far faster than the probe said, probes
    again and finds 128; the job after that starts at 128."""
    model = Model()
    busy = {s: c * (3.0 if s >= 64 else 1.0) for s, c in COST.items()}
    first = AutoBatchSizer(model, "key", n_rows=10**6)
    assert _drive(first, busy.get)[-1] == 32
    quiet = {s: c / 3.0 for s, c in COST.items()}  # the job alone on the machine
    second = AutoBatchSizer(model, "key", n_rows=10**6)
    assert second.next_size() == 32 and not second.timing
    sizes = _drive(second, quiet.get, n_batches=60)
    assert sizes[-1] == 128
    assert AutoBatchSizer(model, "key", n_rows=10**6).next_size() == 128


def test_a_steady_job_is_not_probed_again():
    model = Model()
    _drive(AutoBatchSizer(model, "key", n_rows=10**6), COST.get)
    again = AutoBatchSizer(model, "key", n_rows=10**6)
    noisy = iter([1.0, 1.5, 0.8, 1.2] * 20)  # within REPROBE_FACTOR of the probe's time
    sizes = _drive(again, lambda s: COST[s] * next(noisy))
    assert set(sizes) == {128} and next(noisy) < REPROBE_FACTOR
