"""The treebank's download (treebank.url): checked against its sha256, with errors a user can act on."""

from __future__ import annotations

import hashlib

import pytest

from bertology_core.data import treebank
from conftest import UD_SMOKE

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
