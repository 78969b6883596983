"""The Brown corpus loader: plain text from the tagged samples, split by file."""

import pytest

from lmbook.brown import load_brown, read_sample, sample_ids, untag


def test_untag_drops_tags_and_rejoins_punctuation_and_quotes():
    line = "``/`` Only/rb a/at handful/nn ''/'' ,/, the/at jury/nn said/vbd ./."
    assert untag(line) == '"Only a handful", the jury said.'


def test_untag_keeps_contractions_and_possessives_attached():
    assert untag("Atlanta's/np$ mayor/nn does/doz n't/* know/vb ./.") == "Atlanta's mayor doesn't know."


def test_untag_splits_on_the_last_slash_only():
    assert untag("1/2/cd inch/nn") == "1/2 inch"


def test_the_package_holds_the_500_samples_of_15_genres():
    names = sample_ids()
    assert len(names) == 500
    assert {n[1] for n in names} == set("abcdefghjklmnpr")


def test_first_sample_starts_with_the_fulton_county_grand_jury():
    assert read_sample("ca01").startswith("The Fulton County Grand Jury said Friday an investigation")


def test_splits_are_whole_files_and_do_not_share_a_sentence():
    b = load_brown(max_samples=40)
    train, val, test = (set(s.splitlines()) for s in (b.train, b.val, b.test))
    assert b.val == read_sample("ca09") + read_sample("ca19") + read_sample("ca29") + read_sample("ca39")
    assert not (val & test), "a sentence is in both validation and test"
    assert len(train & val) <= 2, f"validation shares {len(train & val)} sentences with train"


def test_no_tag_survives_in_the_whole_corpus():
    b = load_brown()
    words = b.train.split()
    assert 600_000 < len(words) < 1_000_000, len(words)
    tagged = [w for w in words if w.endswith(("/nn", "/at", "/vbd", "/in"))]
    assert not tagged, f"tags left in the text: {tagged[:5]}"


def test_missing_package_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LMBOOK_NODE_MODULES", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make install"):
        load_brown()
