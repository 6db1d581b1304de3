"""The treebank's download (treebank.url), checked against its sha256, and its validation (each sentence a tree, as
UD's validate.py level 2 checks it), with errors a user can act on."""

from __future__ import annotations

import hashlib

import pytest

from bertology_core.data import treebank
from conftest import SHARED_DATA, UD_SMOKE

DEV = UD_SMOKE / "smoke-ud-dev.conllu"


def test_a_download_is_written_and_checked_against_its_sha256(tmp_path):
    expected = hashlib.sha256(DEV.read_bytes()).hexdigest()
    target = tmp_path / "source" / DEV.name
    assert treebank.download(DEV.as_uri(), target, expected) == expected
    assert target.read_bytes() == DEV.read_bytes()
    assert treebank.read_conllu(target).height == treebank.validate(DEV)


def test_a_download_with_another_sha256_is_not_kept(tmp_path):
    target = tmp_path / DEV.name
    with pytest.raises(treebank.TreebankError, match="field 'sha256' of the download is [0-9a-f]{64}, not the 0{64}"):
        treebank.download(DEV.as_uri(), target, "0" * 64)
    assert not target.exists()


def test_an_unreachable_address_says_how_to_bring_the_file_by_hand(tmp_path):
    url = (tmp_path / "nowhere" / DEV.name).as_uri()
    with pytest.raises(treebank.TreebankError) as error:
        treebank.download(url, tmp_path / DEV.name)
    message = str(error.value)
    assert message.startswith(f"{url}: could not be downloaded")
    assert f"curl -L -O {url}" in message and "set treebank.dir to that folder and treebank.url: null" in message


UD_FIX = "or validate the file with UD's tools/validate.py --level 2; remove the sentence if it cannot be fixed"
GOOD = ("# sent_id = good-1\n# text = Cats sleep.\n1\tCats\tcat\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n"
        "2\tsleep\tsleep\tVERB\tVBP\t_\t0\troot\t_\t_\n")


def _conllu(tmp_path, words, sent_id="bad-2"):
    """A file: one valid sentence, then one of ``words`` (id, head, deprel); returns it and the bad words' lines."""
    header = f"# sent_id = {sent_id}\n" if sent_id else ""
    body = "".join(f"{id_}\tw{id_}\tw\tX\tX\t_\t{head}\t{deprel}\t_\t_\n" for id_, head, deprel in words)
    path = tmp_path / "bad.conllu"
    path.write_text(f"{GOOD}\n{header}{body}\n")
    first = GOOD.count("\n") + 2 + bool(sent_id)  # the line of the bad sentence's first word
    return path, {str(id_): first + i for i, (id_, _, _) in enumerate(words)}


BAD_TREES = [  # (case, words, word the error is on, its message without file and line)
    ("cycle 1 -> 2 -> 1 beside the root", [(1, 2, "nsubj"), (2, 1, "obj"), (3, 0, "root"), (4, 3, "punct")], "1",
     ("the heads form a cycle 1 -> 2 -> 1: these words never reach the root (word 3) (sentence 'bad-2', word 1). "
      f"Fix: correct the HEAD column of this sentence, {UD_FIX}")),
    ("two roots", [(1, 2, "nsubj"), (2, 0, "root"), (3, 0, "root")], "3",
     ("a second root: words 2 and 3 both have HEAD 0 (sentence 'bad-2', word 3). Fix: give exactly one word HEAD 0 per "
      f"sentence: correct the HEAD column of this sentence, {UD_FIX}")),
    ("no root", [(1, 2, "nsubj"), (2, 3, "obj"), (3, 1, "conj")], "1",
     ("no word has HEAD 0, so the sentence has no root; its heads loop 1 -> 2 -> 3 -> 1 (sentence 'bad-2', word 1). "
      f"Fix: give exactly one word HEAD 0 per sentence: correct the HEAD column of this sentence, {UD_FIX}")),
    ("head out of range", [(1, 2, "nsubj"), (2, 0, "root"), (3, 9, "punct")], "3",
     ("head 9 is beyond the sentence's 3 words (sentence 'bad-2', word 3). "
      f"Fix: point HEAD at a word of the same sentence, {UD_FIX}")),
    ("ids not consecutive", [(1, 2, "nsubj"), (2, 0, "root"), (4, 2, "punct")], "4",
     ("word id 4 where 3 was expected (sentence 'bad-2', word 4). "
      f"Fix: number the words of each sentence 1, 2, 3, ... without gaps, {UD_FIX}")),
    ("root word without DEPREL root", [(1, 2, "nsubj"), (2, 0, "obj")], "2",
     ("the word with HEAD 0 has DEPREL 'obj', not 'root' (sentence 'bad-2', word 2). "
      f"Fix: give the root word DEPREL root, {UD_FIX}")),
]


@pytest.mark.parametrize(("case", "words", "word", "message"), BAD_TREES, ids=[c[0] for c in BAD_TREES])
def test_a_sentence_that_is_not_a_tree_is_named_by_file_sentence_and_word(tmp_path, case, words, word, message):
    path, lines = _conllu(tmp_path, words)
    field = "ID" if case == "ids not consecutive" else "DEPREL" if "DEPREL" in case else "HEAD"
    with pytest.raises(treebank.TreebankError) as error:
        treebank.validate(path)
    assert str(error.value) == f"{path}:{lines[word]}: field '{field}': {message}"
    with pytest.raises(treebank.TreebankError):  # prepare_treebank reads through the same check
        treebank.read_conllu(path)


def test_a_sentence_without_sent_id_is_named_by_its_ordinal_and_first_line(tmp_path):
    path, lines = _conllu(tmp_path, [(1, 2, "nsubj"), (2, 0, "root"), (3, 3, "punct")], sent_id=None)
    with pytest.raises(treebank.TreebankError) as error:
        treebank.validate(path)
    assert str(error.value).startswith(f"{path}:{lines['3']}: field 'HEAD': a word cannot be its own head "
                                       "(sentence 2 of the file, no sent_id, from line 6, word 3). Fix: ")


def test_multiword_tokens_and_empty_nodes_are_left_out_of_the_tree(tmp_path):
    path = tmp_path / "mwt.conllu"
    path.write_text(
        "# sent_id = mwt-1\n# text = I don't, you do.\n"
        "1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t3:nsubj\t_\n"
        "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"  # a range: no HEAD, not a word of the tree
        "2\tdo\tdo\tAUX\tVBP\t_\t3\taux\t3:aux\t_\n"
        "3\tn't\tnot\tPART\tRB\t_\t0\troot\t0:root\tSpaceAfter=No\n"
        "3.1\tdo\tdo\tVERB\tVBP\t_\t_\t_\t3:conj\tCopyOf=2\n"  # an empty node: enhanced graph only
        "4\t,\t,\tPUNCT\t,\t_\t3\tpunct\t3.1:punct\t_\n"
        "5\tyou\tyou\tPRON\tPRP\t_\t3\tparataxis\t3.1:nsubj\t_\n"
        "6\tdo\tdo\tAUX\tVBP\t_\t5\tdep\t5:dep\tSpaceAfter=No\n"
        "7\t.\t.\tPUNCT\t.\t_\t3\tpunct\t3:punct\t_\n\n")
    assert treebank.validate(path) == 1
    [row] = treebank.read_conllu(path).to_dicts()
    assert row["forms"] == ["I", "do", "n't", ",", "you", "do", "."]
    assert row["heads"] == [3, 3, 0, 3, 3, 5, 3]


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_ud_ewt_is_valid(split):
    path = SHARED_DATA / "ud_ewt" / f"en_ewt-ud-{split}.conllu"
    if not path.is_file():
        pytest.skip(f"UD EWT not found at {path} (set BERTOLOGY_SHARED_DATA to the shared/data folder)")
    assert treebank.validate(path) == {"train": 12544, "dev": 2001, "test": 2077}[split]
