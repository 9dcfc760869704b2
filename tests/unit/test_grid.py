"""Tuning grids in an experiment (model.config.grid): variants derived from a base profile, named readably, flags
replaced or added, environment values set; a bad grid refused in one line naming the file, line and key. Pure."""

from __future__ import annotations

import pytest

from specmon.errors import UserError
from specmon.model.config import parse_config
from specmon.model.config.grid import MAX_VARIANTS, set_flag, short_name

PROFILES = '''
[profiles.base]
command = "python3 -m sglang.launch_server --port 30001"
port = 30001

[profiles.eagle3]
command = ["python3", "-m", "sglang.launch_server", "--port", "30001", "--speculative-num-steps", "3",
           "--speculative-eagle-topk=1"]
port = 30001
env = { A = "1" }
'''


def grid(vary: str, extra: str = "") -> str:
    return PROFILES + f'\n[experiments.tune]\nbase = "eagle3"\nbaseline = "base"\nlevels = [1, 2]\n{extra}vary = {vary}\n'


def test_variants_are_named_after_their_settings_and_replace_or_add_flags() -> None:
    config = parse_config(grid('{ "--speculative-num-steps" = [1, 5], "--speculative-eagle-topk" = [1, 4], '
                               '"--mem-fraction-static" = [0.8], "env.NCCL_ALGO" = ["Ring"] }'), "p.toml")
    spec = config.experiment("tune")
    assert spec.baseline == "base"
    assert spec.profiles == (
        "base",
        "eagle3 steps=1 topk=1 mem-fraction-static=0.8 NCCL_ALGO=Ring",
        "eagle3 steps=1 topk=4 mem-fraction-static=0.8 NCCL_ALGO=Ring",
        "eagle3 steps=5 topk=1 mem-fraction-static=0.8 NCCL_ALGO=Ring",
        "eagle3 steps=5 topk=4 mem-fraction-static=0.8 NCCL_ALGO=Ring",
    )
    v = config.profile("eagle3 steps=5 topk=4 mem-fraction-static=0.8 NCCL_ALGO=Ring")
    assert v.command == ("python3", "-m", "sglang.launch_server", "--port", "30001", "--speculative-num-steps", "5",
                         "--speculative-eagle-topk=4", "--mem-fraction-static", "0.8")
    assert dict(v.env) == {"A": "1", "NCCL_ALGO": "Ring"}
    assert v.port == 30001
    # Variants are found by name but not listed with the written profiles (the TUI, `specmon profiles`).
    assert list(config.profiles) == ["base", "eagle3"]


def test_short_names_and_flag_forms() -> None:
    assert [short_name(k) for k in ("--speculative-num-steps", "--speculative-eagle-topk",
                                    "--speculative-num-draft-tokens", "--max-running-requests", "env.X_Y")] == \
        ["steps", "topk", "draft-tokens", "max-running-requests", "X_Y"]
    assert set_flag(("a", "--x", "1", "--x=2"), "--x", "3") == ("a", "--x", "3", "--x=3")
    assert set_flag(("a", "--xy", "1"), "--x", "3") == ("a", "--xy", "1", "--x", "3")


def test_two_keys_that_shorten_alike_keep_their_whole_flag() -> None:
    config = parse_config(grid('{ "--num-steps" = [1], "--speculative-num-steps" = [2] }'), "p.toml")
    assert config.experiment("tune").profiles[1] == "eagle3 num-steps=1 speculative-num-steps=2"


@pytest.mark.parametrize(("vary", "extra", "expected"), [
    ('{ "--port" = [30002] }', "", 'p.toml:16: experiments.tune.vary.--port: would change the server\'s port'),
    ('{ "--Steps" = [1] }', "", 'experiments.tune.vary.--Steps: not a command flag'),
    ('{ "-s" = [1] }', "", 'experiments.tune.vary.-s: not a command flag'),
    ('{ "env.1X" = ["a"] }', "", 'experiments.tune.vary."env.1X": bad environment variable name'),
    ('{ "env.SPECMON_RUN_ID" = ["a"] }', "", "is reserved"),
    ('{ "--steps" = [true] }', "", 'experiments.tune.vary.--steps: each value must be a string or a number, '
                                   "got boolean"),
    ('{ "--steps" = [[1]] }', "", "each value must be a string or a number, got array"),
    ('{ "--steps" = [] }', "", "must be a non-empty array"),
    ('{ "--steps" = 3 }', "", "must be a non-empty array"),
    ('{ "--steps" = [1, 1] }', "", "names a value twice"),
    ("{}", "", "experiments.tune.vary: must be a non-empty table"),
    ('{ "--a" = [1, 2, 3, 4, 5], "--b" = [1, 2, 3, 4, 5] }', "",
     f"experiments.tune.vary: 5 x 5 = 25 variants; at most {MAX_VARIANTS}"),
    ('{ "--a" = [1] }', 'profiles = ["base", "eagle3"]\n', "drop `profiles`"),
])
def test_a_bad_grid_is_refused_in_one_line_naming_the_key(vary: str, extra: str, expected: str) -> None:
    with pytest.raises(UserError) as err:
        parse_config(grid(vary, extra), "p.toml")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("p.toml:")
    assert expected in message


def test_a_switch_in_the_base_command_is_refused_not_given_the_next_option_as_its_value() -> None:
    text = grid('{ "--enable-x" = [1] }').replace('"--speculative-eagle-topk=1"]', '"--enable-x", "--port", "30001"]')
    with pytest.raises(UserError, match=r"p.toml:16: experiments.tune.vary.--enable-x: is a switch in eagle3's command"):
        parse_config(text, "p.toml")


def test_unknown_base_or_baseline_is_refused() -> None:
    text = PROFILES + '\n[experiments.tune]\nbase = "eagle"\nvary = { "--a" = [1] }\n'
    with pytest.raises(UserError) as err:
        parse_config(text, "p.toml")
    assert "p.toml:12: experiments.tune.baseline: missing" in str(err.value)   # the first in file order
    assert "(and 1 more problem after this one)" in str(err.value)   # the unknown base
    with pytest.raises(UserError, match=r"p.toml:14: experiments.tune.base: unknown profile 'eagle' \(known: base, "):
        parse_config(text.replace('base = "eagle"', 'baseline = "base"\nbase = "eagle"'), "p.toml")
