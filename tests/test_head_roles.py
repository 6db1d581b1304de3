"""Voita et al.'s head roles on hand-built maps, and the Hard Concrete head gates."""

from collections import Counter

import numpy as np
import polars as pl
import pytest
import torch

from bertology_core.data import tasks, states
from bertology_core.finetune import training
from bertology_core.head_roles import gate_stats, head_gates, measure_tables, stats
from bertology_core.inputs import batching
from bertology_core.models import loading
from conftest import GLUE_SMOKE, TINY_BERT

# [CLS] a b c d [SEP]: positions 0 and 5 are special
TOKENS = ["[CLS]", "the", "cat", "zyx", "sat", "[SEP]"]
SEGMENTS = [None, 0, 0, 0, 0, None]
FREQUENCIES = Counter({"the": 100, "cat": 10, "zyx": 1, "sat": 10})


def example() -> measure_tables.ExampleTokens:
    return measure_tables.ExampleTokens.from_dump_row(TOKENS, SEGMENTS, FREQUENCIES)


def with_keys(table: pl.DataFrame, state: str = "pretrained", seed: int | None = None) -> pl.DataFrame:
    return table.with_columns(pl.lit("MRPC").alias("task"), pl.lit(state).alias("state"), pl.lit(seed, pl.Int64).alias("seed"))


def one_hot_rows(targets: list[int], length: int = 6) -> np.ndarray:
    """A map whose query q puts weight 1 on key targets[q]."""
    attention = np.zeros((length, length))
    attention[np.arange(length), targets] = 1.0
    return attention


def roles_of(*maps: np.ndarray, tokens: measure_tables.ExampleTokens | None = None) -> pl.DataFrame:
    """The roles table of one example whose layer 0 holds ``maps`` (one per head)."""
    counts = measure_tables.RoleCounts(1, len(maps), 6)
    counts.add(np.stack(maps)[None], tokens or example())
    return counts.table()


def test_example_tokens_mark_special_tokens_and_the_rarest_piece():
    tokens = example()
    assert tokens.real.tolist() == [False, True, True, True, True, False]
    assert tokens.rarest.tolist() == [False, False, False, True, False, False]
    # an unseen piece (count 0) is rarer than any seen one; ties are all rarest
    tied = measure_tables.ExampleTokens.from_dump_row(TOKENS, SEGMENTS, Counter({"the": 5}))
    assert tied.rarest.tolist() == [False, False, True, True, True, False]


def test_a_previous_token_head_is_positional_with_offset_minus_one():
    previous = one_hot_rows([0, 0, 1, 2, 3, 4])
    row = roles_of(previous).row(0, named=True)
    assert row["positional_offset"] == -1 and row["positional_share"] == 1.0
    assert row["queries"] == 4  # the special tokens' rows are not read
    # one real query of four looks elsewhere: 3/4 of the time at -1, below Voita's 90%
    mixed = one_hot_rows([0, 0, 1, 2, 1, 4])
    row = roles_of(mixed).row(0, named=True)
    assert row["positional_offset"] == -1 and row["positional_share"] == pytest.approx(0.75)
    roles = stats.assign_roles(with_keys(roles_of(previous, mixed)),
                                    stats.RoleThresholds())
    assert roles["positional"].to_list() == [True, False]


def test_a_head_attending_to_sep_is_neither_positional_nor_confident():
    to_sep = one_hot_rows([5, 5, 5, 5, 5, 5])
    row = roles_of(to_sep).row(0, named=True)
    assert row["positional_share"] == pytest.approx(0.25)  # offsets 4, 3, 2, 1: one each
    # confidence leaves [SEP] out as a key, as Voita et al. leave out the end-of-sentence token
    assert row["confidence"] == 0.0


def test_confidence_is_the_mean_maximum_weight_over_real_queries_and_keys():
    attention = np.full((6, 6), 0.0)
    attention[1, [1, 2, 3, 4]] = [0.7, 0.1, 0.1, 0.1]
    attention[2, [0, 2]] = [0.6, 0.4]  # its maximum is [CLS]: the largest real weight is 0.4
    attention[3, [3, 5]] = [0.5, 0.5]
    attention[4, [1, 2]] = [0.9, 0.1]
    attention[0, 0] = attention[5, 5] = 1.0  # special queries: not read
    assert roles_of(attention)["confidence"][0] == pytest.approx((0.7 + 0.4 + 0.5 + 0.9) / 4)


def test_rare_share_counts_queries_whose_maximum_is_the_rarest_token():
    to_rare = one_hot_rows([0, 3, 3, 3, 3, 5])
    half = one_hot_rows([0, 3, 3, 1, 1, 5])
    table = roles_of(to_rare, half)
    assert table["rare_share"].to_list() == [1.0, 0.5]
    # one rarest token ("zyx") among the 4 real tokens a uniformly attending head would pick from
    assert table["rare_chance"].to_list() == [pytest.approx(1 / 4)] * 2 and table["rare_queries"].to_list() == [4, 4]
    roles = stats.assign_roles(with_keys(table), stats.RoleThresholds())
    # the test against chance is over examples (an example's queries share its rarest token): one example tests nothing
    assert roles["rare"].to_list() == [None, None] and roles["rare_p_value"].to_list() == [None, None]
    # on five such examples, each above chance (1 and 0.5 against 0.25): the share threshold decides
    counts = measure_tables.RoleCounts(1, 2, 6)
    for _ in range(5):
        counts.add(np.stack([to_rare, half])[None], example())
    table = counts.table()
    roles = stats.assign_roles(with_keys(table), stats.RoleThresholds())
    assert roles["rare"].to_list() == [True, True]  # 0.5 reaches the default threshold
    roles = stats.assign_roles(with_keys(table), stats.RoleThresholds(rare_share=0.6))
    assert roles["rare"].to_list() == [True, False]
    # no syntactic verdict here: "any role" is known only where a measured role holds
    assert roles["roles"].to_list() == ["rare", "none"] and roles["specialised"].to_list() == [True, None]


def test_a_uniform_head_on_tied_rarest_pieces_is_at_chance_and_has_no_rare_role():
    # three of the four real pieces tie as rarest: a head with no preference among the real pieces hits 3 times in 4;
    # this one's maximum visits every key, the special tokens included, and hits one time in 2
    tied = measure_tables.ExampleTokens.from_dump_row(["[CLS]", "ab", "cd", "ef", "the", "[SEP]"], SEGMENTS,
                                                  Counter({"ab": 1, "cd": 1, "ef": 1, "the": 100}))
    assert tied.rarest.tolist() == [False, True, True, True, False, False]
    counts = measure_tables.RoleCounts(1, 1, 6)
    for shift in range(6):  # its maximum visits every key once per query over six examples
        counts.add(one_hot_rows([(q + shift) % 6 for q in range(6)])[None, None], tied)
    table = counts.table()
    roles = stats.assign_roles(with_keys(table), stats.RoleThresholds())
    assert roles["rare"].to_list() == [False]
    row = table.row(0, named=True)
    assert row["rare_share"] >= stats.RoleThresholds().rare_share  # the share alone would give it the role
    assert row["rare_share"] == 0.5 and row["rare_chance"] == pytest.approx(0.75) and row["rare_queries"] == 24
    assert roles["rare_p_value"][0] > 0.5
    # "one of the two least frequent": the three tied pieces (second-lowest count = lowest)
    assert tied.two_rarest.tolist() == tied.rarest.tolist() and row["rare2_share"] == 0.5


def test_only_examples_whose_rarest_piece_is_not_among_the_most_frequent_count_for_the_rare_role():
    frequencies = Counter({f"p{i}": 1000 - i for i in range(600)})
    cutoff = measure_tables.frequent_count(frequencies, 500)
    assert cutoff == 1000 - 499  # the 500th most frequent piece's count
    # rarest piece p3 is among the top 500: the example is left out; p550 is not, nor an unseen piece
    common = measure_tables.ExampleTokens.from_dump_row(["[CLS]", "p0", "p1", "p2", "p3", "[SEP]"], SEGMENTS, frequencies, cutoff)
    rare = measure_tables.ExampleTokens.from_dump_row(["[CLS]", "p0", "p1", "p550", "p3", "[SEP]"], SEGMENTS, frequencies, cutoff)
    unseen = measure_tables.ExampleTokens.from_dump_row(["[CLS]", "p0", "p1", "new", "p3", "[SEP]"], SEGMENTS, frequencies, cutoff)
    assert (common.rare_counted, rare.rare_counted, unseen.rare_counted) == (False, True, True)
    counts = measure_tables.RoleCounts(1, 1, 6)
    to_third = one_hot_rows([0, 3, 3, 3, 3, 5])
    counts.add(to_third[None, None], common)
    counts.add(to_third[None, None], rare)
    row = counts.table().row(0, named=True)
    assert row["examples"] == 2 and row["queries"] == 8  # confidence and the positional role see both
    assert row["rare_examples"] == 1 and row["rare_queries"] == 4 and row["rare_share"] == 1.0
    # the two least frequent pieces of the counted example: p550 and p3
    assert rare.two_rarest.tolist() == [False, False, False, True, True, False]
    # fewer distinct pieces than the top N: every seen piece is frequent; 0 turns the filter off
    assert measure_tables.frequent_count(Counter({"a": 3, "b": 1}), 500) == 1
    assert measure_tables.frequent_count(frequencies, 0) == float("inf")


def test_counts_add_up_over_examples_of_different_lengths():
    counts = measure_tables.RoleCounts(1, 1, 6)
    counts.add(one_hot_rows([0, 0, 1, 2, 3, 4])[None, None], example())
    short = measure_tables.ExampleTokens.from_dump_row(["[CLS]", "cat", "sat", "[SEP]"], [None, 0, 0, None], FREQUENCIES)
    counts.add(one_hot_rows([0, 2, 1, 3], 4)[None, None], short)  # +1, -1
    row = counts.table().row(0, named=True)
    assert row["examples"] == 2 and row["queries"] == 6
    assert row["positional_offset"] == -1 and row["positional_share"] == pytest.approx(5 / 6)


def test_syntactic_role_needs_ten_points_over_its_directions_offset_baseline():
    # (changed with Voita et al.'s table) each relation and direction has its own most-frequent-offset baseline
    voita = pl.DataFrame({
        "state": ["pretrained"] * 5, "relation": ["nsubj", "nsubj", "obj", "obj", "det"],
        "direction": ["dep->head", "head->dep", "dep->head", "head->dep", "dep->head"],
        "layer": [0, 0, 0, 0, 0], "head": [0, 1, 1, 1, 1], "accuracy": [0.75, 0.6, 0.9, 0.5, 0.99],
        "baseline_accuracy": [0.6, 0.6, 0.85, 0.2, 0.1],
    })
    margins = stats.best_relation_margins(voita)
    # det is not one of Voita et al.'s four relations
    assert margins.sort("head").select("head", "best_relation").rows() == [(0, "nsubj dep->head"), (1, "obj head->dep")]
    roles = with_keys(pl.DataFrame({"layer": [0, 0], "head": [0, 1], "positional_share": [0.1, 0.1], "rare_share": [0.0, 0.0],
                                    "rare_hits": [0, 0], "rare_queries": [10, 10], "rare_chance": [0.1, 0.1],
                                    "rare_examples": [2, 2], "rare_excess_sum": [-0.2, -0.2], "rare_excess_squares": [0.02, 0.02]},
                                   schema_overrides={"layer": pl.Int32, "head": pl.Int32}))
    assigned = stats.assign_roles(roles, stats.RoleThresholds(), margins).sort("head")
    # head 0: nsubj dep->head 0.75 vs 0.60 (+15 points); head 1: obj head->dep 0.50 vs 0.20 (+30)
    assert assigned["syntactic"].to_list() == [True, True]
    assert assigned["syntactic_relation"].to_list() == ["nsubj dep->head", "obj head->dep"]
    stricter = stats.assign_roles(roles, stats.RoleThresholds(syntactic_margin=0.2), margins).sort("head")
    assert stricter["syntactic"].to_list() == [False, True] and stricter["syntactic_relation"].to_list() == [None, "obj head->dep"]
    # a state the probing stage did not score has no syntactic verdict
    other = stats.assign_roles(with_keys(roles, "finetuned", 1), stats.RoleThresholds(), margins)
    assert other["syntactic"].to_list() == [None, None] and other["specialised"].to_list() == [None, None]


def test_a_head_syntactic_in_one_direction_only_gets_the_role_for_that_direction():
    from bertology_core.probing import syntactic_heads

    # pieces: [CLS] the dog bark ##ed [SEP]; det(dog<-the), nsubj(barked<-dog), root; "barked" is split in two
    piece_words, heads, relations = [-1, 0, 1, 2, 2, -1], [2, 3, 0], ["det", "nsubj", "root"]
    maps = np.zeros((1, 2, 6, 6))
    # head 0: both of the verb's pieces attend to their subject; the subject attends to "the", not to its verb
    for query, key in ((1, 2), (2, 1), (3, 2), (4, 2)):
        maps[0, 0, query, key] = 1.0
    # head 1: every piece attends to the previous one
    for query in range(1, 5):
        maps[0, 1, query, query - 1] = 1.0
    counts = syntactic_heads.VoitaCounts(1, 2)
    for _ in range(3):
        counts.add(maps, piece_words, heads, relations, np.ones(3, bool))
    table = counts.table().with_columns(pl.lit("pretrained").alias("state"))
    nsubj = {(r["direction"], r["head"]): r for r in table.filter(pl.col("relation") == "nsubj").iter_rows(named=True)}
    # the verb's pieces are two trials each: offsets -1 and -2 to "dog" are each right half of the time
    assert nsubj[("head->dep", 0)]["trials"] == 6 and nsubj[("head->dep", 0)]["accuracy"] == 1.0
    assert nsubj[("head->dep", 0)]["baseline_accuracy"] == 0.5
    assert nsubj[("dep->head", 0)]["accuracy"] == 0.0 and nsubj[("dep->head", 0)]["baseline_accuracy"] == 1.0
    # the previous-token head is the baseline itself in head->dep (+0 points), and wrong in dep->head
    assert nsubj[("head->dep", 1)]["accuracy"] == 0.5 and nsubj[("dep->head", 1)]["accuracy"] == 0.0
    margins = stats.best_relation_margins(table)
    roles = with_keys(pl.DataFrame({"layer": [0, 0], "head": [0, 1], "positional_share": [0.5, 1.0], "rare_share": [0.0, 0.0],
                                    "rare_hits": [0, 0], "rare_queries": [10, 10], "rare_chance": [0.1, 0.1],
                                    "rare_examples": [2, 2], "rare_excess_sum": [-0.2, -0.2], "rare_excess_squares": [0.02, 0.02]},
                                   schema_overrides={"layer": pl.Int32, "head": pl.Int32}))
    assigned = stats.assign_roles(roles, stats.RoleThresholds(), margins).sort("head")
    assert assigned["syntactic"].to_list() == [True, False]
    assert assigned["syntactic_relation"].to_list() == ["nsubj head->dep", None]
    assert assigned.filter(pl.col("head") == 0)["relation_margin"][0] == pytest.approx(0.5)


def test_thresholds_must_be_shares():
    with pytest.raises(ValueError, match="positional_share"):
        stats.RoleThresholds(positional_share=90)


def test_dump_roles_count_the_rare_role_on_the_examples_past_the_frequency_filter(tmp_path):
    from conftest import tiny_mrpc_dump

    from bertology_core.attention import dump_tables

    summary, frame, tokenizer = tiny_mrpc_dump(tmp_path / "mrpc", 6)
    train = tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "train")
    first, second = tasks.sentence_texts(train)
    frequencies = measure_tables.piece_frequencies(tokenizer, first + (second or []))
    dump = dump_tables.AttentionDump(tmp_path / "mrpc")
    every = measure_tables.dump_roles(dump, frequencies, top_frequent=0)  # no filter: every example counts
    none = measure_tables.dump_roles(dump, frequencies, top_frequent=10 ** 9)  # every seen piece is frequent
    assert (every["rare_examples"] == every["examples"]).all() and (every["rare_queries"] == every["queries"]).all()
    assert every["rare_chance"].is_between(0, 1).all() and (every["rare_share"] <= every["rare2_share"]).all()
    # with every seen piece frequent (the tiny vocabulary has fewer than 500), no example holds an unseen one here
    assert none["rare_examples"][0] == 0 and none["rare_share"].is_null().all() and none["rare_chance"].is_null().all()
    assert every.select("confidence", "positional_share").equals(none.select("confidence", "positional_share"))
    # in between, an example counts when its rarest real piece is rarer than the top-N's lowest count
    rarest = [min(frequencies.get(t, 0) for t, s in zip(row["tokens"], row["segment_ids"]) if s is not None)
              for row in dump.tokens().iter_rows(named=True)]
    for top in (10, 20, 30):
        expected = sum(count < measure_tables.frequent_count(frequencies, top) for count in rarest)
        assert measure_tables.dump_roles(dump, frequencies, top)["rare_examples"][0] == expected


def test_piece_frequencies_count_the_tokenizers_pieces_without_special_tokens():
    tokenizer = loading.load_tokenizer(TINY_BERT)
    counts = measure_tables.piece_frequencies(tokenizer, ["the cat sat", "the dog", None])
    pieces = tokenizer.tokenize("the cat sat") + tokenizer.tokenize("the dog")
    assert counts == Counter(pieces)
    assert "[CLS]" not in counts and "[SEP]" not in counts


# ---- where the pieces are counted (head_roles.frequency_corpus) -----------------------------------------------------

# the tiny MRPC training split's least frequent pieces (house 16, never 16, old 18, runs 19), made the most frequent;
# with a byte-order mark, Windows line ends and blank lines, which the corpus reader leaves out
CORPUS = "\ufeff" + "house never old runs .\r\n\r\n" * 50 + "   \n"


def _corpus_plan(configured):
    from test_jobs import SMOKE, plan_of

    return plan_of(SMOKE, {"head_roles": {"frequency_corpus": configured}})


def test_a_frequency_corpus_changes_which_pieces_are_frequent(tmp_path):
    from types import SimpleNamespace

    from bertology_core.jobs import needs
    from bertology_core.workflow import jobs

    corpus = tmp_path / "pretraining_sample.txt"
    corpus.write_text(CORPUS, encoding="utf-8", newline="")
    plan = _corpus_plan(str(corpus))
    assert jobs.problems(plan) == []
    # the job reads the corpus instead of the task's split: an input, so that editing it reruns the roles
    inputs = plan.head_roles.frequency_inputs(SimpleNamespace(task="MRPC"))
    assert inputs == {"frequency_corpus": str(corpus)} and plan.head_roles.frequency_source() == f"corpus {corpus}"
    # and its bytes count in what the job reads (its memory and time requests)
    assert needs.job_sizes(inputs.values()).read_mb == pytest.approx(corpus.stat().st_size / 1e6)
    default = _corpus_plan(None).head_roles
    assert default.frequency_inputs(SimpleNamespace(task="MRPC")) == {"train": "results/data/MRPC/train.parquet"}
    assert default.frequency_source() == "task training split"

    tokenizer = loading.load_tokenizer(TINY_BERT)
    train = tmp_path / "train.parquet"
    tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "train").write_parquet(train)
    from_split = measure_tables.piece_frequencies(tokenizer, measure_tables.frequency_texts(train=train))
    from_corpus = measure_tables.piece_frequencies(tokenizer, measure_tables.frequency_texts(corpus=inputs["frequency_corpus"]))
    assert from_corpus == Counter({"house": 50, "never": 50, "old": 50, "runs": 50, ".": 50})

    def frequent(frequencies, top=5):
        return {piece for piece, count in frequencies.items() if count >= measure_tables.frequent_count(frequencies, top)}

    assert frequent(from_split) == {".", "##s", "a", "to", "##day"}
    assert frequent(from_corpus) == {"house", "never", "old", "runs", "."}
    # so an example whose rarest piece is rare in the task's text but frequent in the corpus leaves the rare-token role
    tokens, segments = ["[CLS]", "house", "never", "[SEP]"], [None, 0, 0, None]
    by_split = measure_tables.ExampleTokens.from_dump_row(tokens, segments, from_split,
                                                          measure_tables.frequent_count(from_split, 5))
    by_corpus = measure_tables.ExampleTokens.from_dump_row(tokens, segments, from_corpus,
                                                           measure_tables.frequent_count(from_corpus, 5))
    assert (by_split.rare_counted, by_corpus.rare_counted) == (True, False)


def test_a_frequency_corpus_is_read_a_few_lines_at_a_time(tmp_path):
    from bertology_core.head_roles import corpus_tables

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8", newline="")
    tokenizer = loading.load_tokenizer(TINY_BERT)
    pulled, seen = [0], []

    def texts():
        for line in corpus_tables.lines(corpus):
            pulled[0] += 1
            yield line

    class Watched:  # the tokenizer, noting how many lines were read when it is called
        def __call__(self, chunk, **kwargs):
            seen.append(pulled[0])
            return tokenizer(chunk, **kwargs)

        def __len__(self):
            return len(tokenizer)

        def convert_ids_to_tokens(self, ids):
            return tokenizer.convert_ids_to_tokens(ids)

    counts = measure_tables.piece_frequencies(Watched(), texts(), batch=7)
    assert counts["house"] == 50 and len(seen) == 8  # 50 texts, 7 at a time
    assert all(lines <= 7 * call for call, lines in enumerate(seen, 1))
    # a batch of nothing but empty texts is skipped, not the end
    assert measure_tables.piece_frequencies(tokenizer, [None, "", "house", None], batch=2) == Counter({"house": 1})


@pytest.mark.parametrize(("make", "problem"), [
    (None, "does not exist"),
    (lambda path: path.mkdir(), "is not a file"),
    (lambda path: path.write_bytes(b""), "is empty"),
    (lambda path: path.write_text("\n  \n\t\n"), "holds only blank lines"),
    (lambda path: path.write_bytes(b"\x1f\x8b\x08\x00 gzip"), "is not UTF-8 text"),
], ids=["missing", "folder", "empty", "blank", "gzip"])
def test_a_bad_frequency_corpus_is_a_config_problem_naming_the_key_the_path_and_the_fix(tmp_path, make, problem):
    from bertology_core.workflow import jobs

    path = tmp_path / "corpus.txt"
    if make is not None:
        make(path)
    problems = [line for line in jobs.problems(_corpus_plan(str(path))) if "frequency_corpus" in line]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"head_roles.frequency_corpus {str(path)!r} ({path}) {problem}")
    assert "Fix: point it at a plain UTF-8 text file" in problems[0] and "set it to null" in problems[0]
    # a relative path is the repository's, and said so
    from conftest import REPO

    relative = [line for line in jobs.problems(_corpus_plan("no/such/corpus.txt")) if "frequency_corpus" in line]
    assert relative == [relative[0]] and f"'no/such/corpus.txt' ({REPO / 'no/such/corpus.txt'}) does not exist" in relative[0]


def test_a_corpus_line_that_is_not_utf8_stops_the_count_naming_the_key(tmp_path):
    from bertology_core.head_roles import corpus_tables

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"house never\nold caf\xe9\n")  # Latin-1 past the start the checks decode
    with pytest.raises(ValueError, match="head_roles.frequency_corpus .*is not UTF-8.*Fix: convert the file to UTF-8"):
        list(corpus_tables.lines(corpus))


def test_the_summary_note_names_where_the_pieces_were_counted():
    from bertology_core.head_roles import summary

    by_split = pl.DataFrame({"frequency_source": ["task training split"] * 2})
    assert summary.frequency_source_note(by_split).startswith("each task's training split (the fine-tuning data, not the "
                                                              "encoder's pre-training text; Voita et al. count on")
    by_corpus = pl.DataFrame({"frequency_source": ["corpus data/wiki_sample.txt"]})
    assert summary.frequency_source_note(by_corpus) == "the corpus file data/wiki_sample.txt (head_roles.frequency_corpus)"


def test_a_roles_job_with_a_frequency_corpus_is_priced_by_the_corpus(tmp_path):
    import dataclasses

    from bertology_core.cost import estimate, model as cost

    calibration = cost.Calibration("cpu: counting", 1, "float32", cost.Geometry(3, 8, 16, 4), {}, {"model": 0.0, "tables": 0.0},
                                   maps={"tokenize": {"per_example": 1e-4, "per_piece": 1e-6}})
    train = estimate.Lengths({("MRPC", "train"): pl.DataFrame({"idx": [0, 1], "length": [10, 20]})})
    job = estimate.Job("head_roles", {"model": "m", "task": "MRPC", "dumped": "pretrained"}, {}, {}, 1)
    assert estimate.head_roles(job, train, calibration).seconds == pytest.approx(0.5 * (2e-4 + 30e-6))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("abcdefghi\n" * 900)  # 900 lines of 10 bytes: 2,000 pieces at 4.5 bytes a piece
    with_corpus = dataclasses.replace(job, named_inputs={"frequency_corpus": str(corpus)})
    price = estimate.head_roles(with_corpus, train, calibration)
    assert price.seconds == pytest.approx(0.5 * (900 * 1e-4 + 9000 / estimate.CORPUS_BYTES_PER_PIECE * 1e-6))
    assert "frequency corpus" in price.note


# ---- Hard Concrete gates --------------------------------------------------------------------------------------------


def test_sampled_gates_lie_in_the_unit_interval_and_hit_both_ends():
    torch.manual_seed(0)
    gates = head_gates.HardConcreteGates(4, 8, head_gates.GateSettings(initial_log_alpha=0.0))
    draws = torch.stack([gates.sample() for _ in range(2000)])
    draws = draws.detach()
    assert float(draws.min()) == 0.0 and float(draws.max()) == 1.0
    assert bool(((draws >= 0) & (draws <= 1)).all())
    assert 0 < float(((draws > 0) & (draws < 1)).float().mean()) < 1


@pytest.mark.parametrize("log_alpha", [-2.0, 0.0, 1.5])
def test_expected_l0_matches_its_closed_form(log_alpha):
    """The share of non-zero samples estimates P(g != 0); Louizos et al.'s closed form must agree (4 standard errors)."""
    torch.manual_seed(1)
    gates = head_gates.HardConcreteGates(1, 1, head_gates.GateSettings(initial_log_alpha=log_alpha))
    with torch.no_grad():
        draws = torch.stack([gates.sample() for _ in range(40000)]).reshape(-1)
    estimate = float((draws > 0).float().mean())
    closed = float(gates.open_probability().detach())
    assert abs(estimate - closed) < 4 * np.sqrt(closed * (1 - closed) / draws.numel())
    with torch.no_grad():
        assert float(gates.penalty()) == pytest.approx(closed)  # one layer, one head


def test_penalty_sums_heads_and_averages_layers():
    gates = head_gates.HardConcreteGates(3, 4)
    with torch.no_grad():
        gates.log_alpha[0] = 10.0
        gates.log_alpha[1] = -10.0
    p = gates.open_probability().detach()
    assert float(gates.penalty().detach()) == pytest.approx(float(p.sum(-1).mean()))
    assert float(gates.penalty().detach()) == pytest.approx((4 * p[0, 0] + 4 * p[1, 0] + 4 * p[2, 0]).item() / 3)


def test_evaluation_gates_are_deterministic():
    gates = head_gates.HardConcreteGates(2, 3)
    with torch.no_grad():
        gates.log_alpha.copy_(torch.tensor([[-5.0, 0.0, 5.0], [-2.4, 2.4, 0.3]]))
    gates.eval()
    first, second = gates(), gates()
    assert torch.equal(first, second)
    expected = (torch.sigmoid(gates.log_alpha) * 1.2 - 0.1).clamp(0, 1)
    assert torch.allclose(first, expected)
    assert first[0, 0] == 0.0 and first[0, 2] == 1.0
    gates.train()
    assert not torch.equal(gates(), gates())


def test_bad_gate_settings_are_refused():
    with pytest.raises(ValueError, match="stretch"):
        head_gates.GateSettings(stretch=(0.0, 1.0))
    with pytest.raises(ValueError, match="temperature"):
        head_gates.GateSettings(temperature=2.0)


def classifier():
    return loading.load_classifier(TINY_BERT, tasks.glue_task("SST-2"), states.PRETRAINED, 0)


def smoke_data(task_name: str = "SST-2"):
    task = tasks.glue_task(task_name)
    frame = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "train")
    return task, batching.encode(frame, loading.load_tokenizer(TINY_BERT), 32), frame["label"].to_numpy()


def test_open_gates_leave_the_classifier_unchanged_and_closed_ones_equal_masking():
    task, data, labels = smoke_data()
    model = classifier().eval()
    batch = data.collate(list(range(8)))
    with torch.no_grad():
        reference = model(**batch).logits
    gated = head_gates.GatedClassifier(model, 0.1, head_gates.GateSettings(initial_log_alpha=10.0)).eval()
    with torch.no_grad():
        assert float(gated(**batch, labels=torch.tensor(labels[:8])).task_loss) == pytest.approx(
            float(torch.nn.functional.cross_entropy(reference, torch.tensor(labels[:8]))), abs=1e-5)
        gated.gates.log_alpha[1, 0] = -10.0  # layer 1, head 0 closed
        from bertology_core.engine.intervention import intervene
        from bertology_core.engine.plan import StructureMask
        masked = StructureMask.for_model(model).without(heads=[(1, 0)])
        with intervene(model, masked.plan()):
            expected = model(**batch).logits
        with intervene(model, gated.evaluation_plan()):
            np.testing.assert_allclose(model(**batch).logits.numpy(), expected.numpy(), atol=1e-6)
    assert gated.kept().sum() == gated.kept().size - 1


def test_frozen_weights_get_no_gradient_and_the_gates_do():
    task, data, labels = smoke_data()
    gated = head_gates.GatedClassifier(classifier(), 0.1, train_weights=False).train()
    output = gated(**data.collate(list(range(8))), labels=torch.tensor(labels[:8]))
    output.loss.backward()
    assert gated.gates.log_alpha.grad is not None and float(gated.gates.log_alpha.grad.abs().sum()) > 0
    assert all(p.grad is None for p in gated.classifier.parameters())
    groups = gated.parameter_groups(training.FinetuneConfig())
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0


def run_gates(strength: float, train_weights: bool, seed: int = 3, checkpointer=None):
    task, data, labels = smoke_data()
    config = training.FinetuneConfig(batch_size=8, epochs=6, max_length=32, learning_rate=1e-3)
    return head_gates.train_gates(classifier(), task, data, labels, config, strength,
                                  head_gates.GateSettings(learning_rate=0.5), train_weights, seed, checkpointer)


def test_a_stronger_penalty_closes_more_gates_and_training_is_deterministic():
    _, weak = run_gates(0.0, train_weights=True)
    _, again = run_gates(0.0, train_weights=True)
    _, strong = run_gates(50.0, train_weights=True)
    assert weak["gates"] == again["gates"] and weak["loss_curve"] == again["loss_curve"]
    assert strong["heads_kept"] < weak["heads_kept"]
    assert strong["expected_open"] < weak["expected_open"]


def test_gate_training_resumes_from_a_checkpoint(tmp_path, monkeypatch):
    from bertology_core.models import checkpoint

    from conftest import Crash, crashing_at_failpoints

    _, reference = run_gates(5.0, train_weights=False)
    checkpointer = checkpoint.Checkpointer(tmp_path / "ckpt", fingerprint="gates", every_steps=4, every_seconds=None)
    with crashing_at_failpoints(monkeypatch), pytest.raises(Crash):
        run_gates(5.0, train_weights=False, checkpointer=checkpointer)
    _, resumed = run_gates(5.0, train_weights=False, checkpointer=checkpointer)
    assert resumed["resumed_at_step"] == 4
    assert resumed["gates"] == reference["gates"] and resumed["loss_curve"] == reference["loss_curve"]


def test_rank_correlation_over_heads_and_its_interval():
    heads = 12
    roles = pl.DataFrame({
        "task": ["MRPC"] * heads, "state": ["finetuned"] * heads, "seed": [1] * heads, "layer": [h // 4 for h in range(heads)],
        "head": [h % 4 for h in range(heads)], "confidence": np.linspace(0.1, 0.9, heads), "positional_share": np.linspace(0.9, 0.1, heads),
        "rare_share": [0.0] * heads, "specialised": [h == 0 for h in range(heads)],  # one head with a role: too few to rank
    }, schema_overrides={"layer": pl.Int32, "head": pl.Int32})
    targets = roles.select("task", "seed", "layer", "head", pl.lit("Michel importance").alias("target"),
                           (pl.col("confidence") ** 3).alias("value"))
    table = stats.rank_correlations(roles, targets, 200, 0.95, 0)
    by_measure = {r["measure"]: r for r in table.iter_rows(named=True)}
    assert by_measure["confidence"]["spearman"] == pytest.approx(1.0) and by_measure["confidence"]["ci_low"] == pytest.approx(1.0)
    assert by_measure["positional_share"]["spearman"] == pytest.approx(-1.0)
    assert np.isnan(by_measure["rare_share"]["spearman"])  # a constant measure has no rank correlation
    assert np.isnan(by_measure["specialised"]["spearman"]) and np.isnan(by_measure["specialised"]["ci_low"])
    assert by_measure["confidence"]["heads"] == heads


def test_gates_table_pairs_every_column_on_the_same_dev_examples():
    labels = np.array([0, 1] * 10)
    right, wrong = labels.copy(), 1 - labels
    frame = pl.DataFrame({"idx": np.arange(20), "label": labels, "gates": right, "gates_binary": np.where(np.arange(20) < 10, right, wrong),
                          "michel": np.where(np.arange(20) < 5, right, wrong), "full": right})
    record = {"task": "MRPC", "seed": 1, "weights": "frozen", "strength": 0.1, "heads_kept": 3, "gates": [[1, 0], [0, 1]],
              "train_examples": 40, "steps": 10, "train_seconds": 1.0}
    row = gate_stats.gates_table([record], [frame], {"MRPC": "accuracy"}, 200, 0.95, 0).row(0, named=True)
    assert (row["gates_score"], row["gates_binary_score"], row["michel_score"], row["full_score"]) == (1.0, 0.5, 0.25, 1.0)
    assert row["gates_minus_michel"] == pytest.approx(0.75) and row["binary_minus_michel"] == pytest.approx(0.25)
    assert row["ci_low"] <= 0.75 <= row["ci_high"] and row["binary_ci_low"] <= 0.25 <= row["binary_ci_high"]
    assert row["share_pruned"] == pytest.approx(0.25)


def test_the_claim_compares_frozen_gates_inside_the_fixed_pruning_range():
    from bertology_core.claims import stats as claims

    gates = pl.DataFrame({"task": ["SST-2"] * 4, "seed": [1] * 4, "weights": ["frozen", "frozen", "frozen", "trained"],
                          "strength": [0.01, 0.1, 0.3, 0.1], "heads_kept": [70, 27, 4, 20], "heads": [72] * 4,
                          "share_pruned": [2 / 72, 45 / 72, 68 / 72, 52 / 72], "metric": ["accuracy"] * 4,
                          "gates_minus_michel": [0.0, -0.01, 0.26, -0.02], "binary_minus_michel": [0.01, -0.005, 0.3, 0.0],
                          "binary_ci_low": [-0.01, -0.03, 0.2, -0.02], "binary_ci_high": [0.02, 0.02, 0.4, 0.02]})
    measured = claims.l0_gates_beat_michel(gates)
    # only the gates that prune 10% to 90% of the heads (27 and 20 kept); the frozen gates' row is trusted, the trained
    # gates' (scored on weights trained one more epoch) is shown but not trusted
    assert [(m.scope, m.value, m.trusted) for m in measured] == [("SST-2 seed 1, 27 of 72 heads, weights frozen", -0.005, True),
                                                                ("SST-2 seed 1, 20 of 72 heads, weights trained", 0.0, False)]
    assert claims.l0_gates_beat_michel(pl.DataFrame({"note": ["no gates"]})) == []


def test_only_fine_tuned_states_take_the_probed_models_syntactic_roles():
    assert stats.probed_name("MRPC", "pretrained", None) == "pretrained"
    assert stats.probed_name("MRPC", "finetuned", 1) == "MRPC/finetuned/seed1"
    assert stats.probed_name("MRPC", "scratch", 1) is None


def test_a_depth_trend_alone_gives_no_within_layer_correlation():
    # confidence and importance both grow with the layer, but within each layer their ranks are unrelated
    layers, heads = 6, 4
    confidence_ranks, importance_ranks = [0, 1, 2, 3], [1, 3, 0, 2]  # centred: (-1.5, -.5, .5, 1.5) . (-.5, 1.5, -1.5, .5) = 0
    rows = [{"task": "MRPC", "state": "finetuned", "seed": 1, "layer": layer, "head": head,
             "confidence": 0.1 * layer + 0.01 * confidence_ranks[head], "positional_share": 0.1 * layer + 0.01 * importance_ranks[head],
             "rare_share": 0.5, "specialised": False, "importance": 1.0 * layer + 0.1 * importance_ranks[head]}
            for layer in range(layers) for head in range(heads)]
    roles = pl.DataFrame(rows, schema_overrides={"layer": pl.Int32, "head": pl.Int32})
    targets = roles.select("task", "seed", "layer", "head", pl.lit(stats.IMPORTANCE).alias("target"),
                           pl.col("importance").alias("value"))
    table = stats.rank_correlations(roles.drop("importance"), targets, 500, 0.95, 0)
    confidence = table.filter(pl.col("measure") == "confidence").row(0, named=True)
    # pooled over heads the depth trend alone gives a strong rank correlation (about 0.95) ...
    from scipy.stats import spearmanr
    assert spearmanr(roles["confidence"], roles["importance"]).statistic > 0.9
    # ... within layers there is none, and the stratified bootstrap's interval holds 0
    assert confidence["spearman"] == pytest.approx(0.0, abs=1e-12)
    assert confidence["ci_low"] < 0 < confidence["ci_high"]
    assert confidence["within"] == "layer" and confidence["layers"] == layers and confidence["heads"] == layers * heads
    # the same ranks within every layer: +1 whatever the depth trend
    positional = table.filter(pl.col("measure") == "positional_share").row(0, named=True)
    assert positional["spearman"] == pytest.approx(1.0) and positional["ci_low"] == pytest.approx(1.0)


def test_within_layer_resamples_keep_each_layers_heads_in_their_layer():
    layers = np.array([2, 0, 1, 0, 2, 1, 0])
    draws = stats.layer_resamples(layers, 50, 0)
    assert draws.shape == (50, 7)
    # blocks in layer order: 3 heads of layer 0, 2 of layer 1, 2 of layer 2
    assert (layers[draws] == np.array([0, 0, 0, 1, 1, 2, 2])).all()


def test_importance_targets_give_raw_normalised_importance_and_the_drop_when_disabled():
    importance = pl.DataFrame({"element": ["head", "head", "mlp"], "layer": [0, 0, 0], "head": [0, 1, None],
                               "importance": [0.2, 0.4, 1.0], "normalized": [0.45, 0.9, 1.0]})
    deltas = pl.DataFrame({"mode": ["uniform"] * 4, "kind": ["head", "head", "head", "layer"], "layer": [0, 0, 0, 0],
                           "head": [0, 1, 0, None], "seed": [1, 1, None, 1], "delta": [-0.02, 0.01, -0.5, -0.3],
                           "task": ["MRPC"] * 4, "state": ["finetuned"] * 4})
    targets = stats.importance_targets({("MRPC", 1): importance}, [deltas]).sort("target", "head")
    assert targets.filter(pl.col("target") == stats.IMPORTANCE)["value"].to_list() == [0.2, 0.4]
    assert targets.filter(pl.col("target") == stats.NORMALIZED_IMPORTANCE)["value"].to_list() == [0.45, 0.9]
    assert targets.filter(pl.col("target").str.starts_with("score drop"))["value"].to_list() == [0.02, -0.01]


def test_michel_mask_keeps_the_most_important_heads():
    table = pl.DataFrame({"element": ["head"] * 4 + ["mlp"], "layer": [0, 0, 1, 1, 0], "head": [0, 1, 0, 1, None],
                          "importance": [0.1, 0.4, 0.3, 0.2, 9.0], "normalized": [0.4, 0.1, 0.3, 0.2, 1.0]})
    assert head_gates.michel_mask(table, 2, normalized=True).heads.tolist() == [[True, False], [True, False]]
    assert head_gates.michel_mask(table, 2, normalized=False).heads.tolist() == [[False, True], [True, False]]
    assert head_gates.michel_mask(table, 0).heads_kept == 0


def test_the_rare_role_is_tested_over_examples_not_over_their_queries():
    """An example's queries share its rarest token: a head that hits it in every query of a few examples and never
    elsewhere looks far above chance counted by queries, but over examples it is not (the example is the unit)."""
    to_rare, away = one_hot_rows([0, 3, 3, 3, 3, 5]), one_hot_rows([0, 1, 1, 1, 1, 5])  # rare share 1 and 0 (chance 1/4)
    counts = measure_tables.RoleCounts(1, 1, 6)
    for attention in (to_rare, to_rare, to_rare, away, away):
        counts.add(attention[None, None], example())
    table = counts.table()
    row = table.row(0, named=True)
    assert row["rare_share"] == pytest.approx(0.6) and row["rare_queries"] == 20
    from scipy.stats import binomtest
    assert binomtest(12, 20, 0.25, alternative="greater").pvalue < 0.001  # as if queries were independent draws
    roles = stats.assign_roles(with_keys(table), stats.RoleThresholds())
    assert roles["rare_p_value"][0] > 0.05 and roles["rare"].to_list() == [False]
