"""`harness list`: one screen of every group, aligned and cut to the width; `harness list GROUP`
one group whole; a mistyped group is one sentence."""

from __future__ import annotations

import pytest

from harness.cli import listing, main


def test_the_overview_is_one_screen_of_aligned_groups_within_the_width():
    lines = listing.render(width=100)
    text = "\n".join(lines)
    assert len(lines) <= 70 and len(text) < 6500, (len(lines), len(text))
    assert max(len(line) for line in lines) <= 100
    headings = [line for line in lines if not line.startswith(" ")]
    assert [h.split(" (")[0] for h in headings[:-1]] == \
        ["experiments", "sweeps", "studies", "models", "datasets", "config fields"]
    assert headings[-1].startswith("harness list GROUP shows one group whole")
    sweeps = lines[lines.index(headings[1]) + 1:lines.index(headings[2])]
    starts = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in sweeps}
    assert len(starts) == 1   # every description starts in the same column, the longest name's included


def test_a_group_is_listed_whole_each_description_wrapped_under_itself():
    from harness.specs import sweep_spec

    lines = listing.render("sweeps", width=80)
    assert max(len(line) for line in lines) <= 80
    text = " ".join(" ".join(lines).split())
    for name in sweep_spec.available():
        assert " ".join(sweep_spec.load(name).title.split()) in text


def test_fields_show_each_default_and_meaning():
    text = " ".join(" ".join(listing.render("fields", width=90)).split())
    assert "seed default 0. Seed for model init" in text


@pytest.mark.parametrize("group", list(listing.GROUPS))
def test_every_group_is_a_command(group, capsys):
    assert main(["list", group]) == 0
    assert capsys.readouterr().out.startswith(listing.GROUPS[group][0])


def test_a_mistyped_group_is_one_sentence(capsys):
    assert main(["list", "studys"]) == 2
    err = capsys.readouterr().err
    assert "no group 'studys'; did you mean 'studies'?" in err and err.count("\n") == 1
