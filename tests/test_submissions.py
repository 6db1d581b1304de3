"""Packing the short model jobs into cluster submissions (bertology_core/jobs/submissions.py)."""

from __future__ import annotations

from collections import defaultdict

from bertology_core.jobs import submissions
from bertology_core.jobs.submissions import Piece, key, pack


def _piece(rule: str, task: str, seed: int, minutes: float, n: int = 0, after=()) -> Piece:
    return Piece(key(rule, {"model": "m", "task": task, "seed": str(seed), "n": str(n)}), "m", task, f"seed{seed}",
                 minutes, frozenset(after))


def _bins(placed):
    bins = defaultdict(set)
    for piece_key, index in placed.items():
        if index is not None:
            bins[index].add(piece_key)
    return bins


def test_pieces_fill_bins_of_one_model_and_task_up_to_the_target_and_long_ones_go_alone():
    pieces = [_piece("head_gates", task, seed, 20, n) for task in ("MRPC", "RTE") for seed in (1, 2) for n in range(5)]
    pieces.append(_piece("subnetwork_finetune", "MRPC", 1, 150))  # asks for more than the target alone
    placed = pack(pieces, 60)
    bins = _bins(placed)
    by_key = {piece.key: piece for piece in pieces}
    assert placed[pieces[-1].key] is None
    for members in bins.values():
        assert len({by_key[k].task for k in members}) == 1
        assert sum(by_key[k].minutes for k in members) <= 60 * 1.5  # a merged last bin
    # 10 pieces of 20 minutes per task: bins of 3, the last piece alone is under half the target and joins the one before
    assert sorted(len(members) for members in bins.values()) == [3, 3, 3, 3, 4, 4]
    assert sum(index is not None for index in placed.values()) == 20


def test_a_piece_whose_input_leaves_its_bin_and_comes_back_is_submitted_alone():
    # importance -> (a CPU job outside the packing) -> lottery; importance -> gates
    importance = _piece("head_importance", "MRPC", 1, 5)
    outside = key("pruning_table", {"model": "m", "task": "MRPC"})
    lottery = _piece("lottery_pruning", "MRPC", 1, 5)
    subnetwork = _piece("subnetwork_finetune", "MRPC", 1, 5, after=[lottery.key])
    gates = _piece("head_gates", "MRPC", 1, 5, after=[importance.key])
    parents = {outside: {importance.key}, lottery.key: {outside}}
    placed = pack([importance, lottery, subnetwork, gates], 60, parents)
    assert placed[importance.key] is not None and placed[importance.key] == placed[gates.key]
    # the lottery search reads a job that reads the bin; the subnetwork then reads the lottery search, outside the bin
    assert placed[lottery.key] is None and placed[subnetwork.key] is None


def test_bins_never_depend_on_each_other_both_ways():
    """Whatever the order given, a job comes after those it reads from: a chain spread over bins runs forward."""
    chain = []
    for n in range(12):
        piece = _piece("subnetwork_finetune", "RTE", 1, 25, n, after=[chain[-1].key] if chain else [])
        chain.append(piece)
    placed = pack(reversed(chain), 60)
    index = [placed[piece.key] for piece in chain]
    assert all(a is not None for a in index) and index == sorted(index)


def test_a_run_reports_its_submissions_one_by_one_and_packed():
    jobs = [(key("head_gates", {"task": "MRPC", "n": str(n)}), 10.0, True) for n in range(6)]
    jobs.append((key("report", {}), 5.0, False))
    placed = {jobs[n][0]: 0 if n < 3 else 1 for n in range(6)}
    found = submissions.submissions(jobs, placed)
    assert sorted(submission.jobs for submission in found) == [1, 3, 3]
    text = submissions.report(jobs, placed, 30)
    assert "7 cluster jobs: 7 submissions one by one (6 asking for a GPU)" in text
    assert "3 submissions (2 asking for a GPU), 2 of them groups of 6 short model jobs" in text
    assert "the shortest GPU submission asks for 30 minutes" in text
