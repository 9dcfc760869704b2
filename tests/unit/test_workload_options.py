"""Sweep options that do not apply are refused by the one workload builder (orchestration.measure.sweep.workload_from),
in the words of the front end that gave them, and the sweep form offers only what applies."""

from __future__ import annotations

import pytest

from specmon.errors import UserError
from specmon.model.config import SweepDefaults
from specmon.orchestration.measure.sweep import WorkloadOverrides, workload_from
from specmon.ui.forms import sweep_form_fields, sweep_request


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


@pytest.mark.parametrize(("overrides", "says"), [
    (WorkloadOverrides(levels=(1, 2), burstiness=2.0), "sweep: --burstiness applies to an open-loop sweep (--rates)"),
    (WorkloadOverrides(max_concurrency=4), "sweep: --max-concurrency applies to an open-loop sweep (--rates)"),
    (WorkloadOverrides(input_range=0.5), "--input-len/--input-range shape random prompts only; the builtin dataset's"),
])
def test_an_option_that_does_not_apply_is_refused_in_the_front_ends_words(overrides: WorkloadOverrides,
                                                                          says: str) -> None:
    with pytest.raises(UserError) as caught:
        workload_from(SweepDefaults(), overrides, named=_flag)
    assert str(caught.value).startswith(says), caught.value


def test_the_same_options_apply_where_they_shape_the_load() -> None:
    assert workload_from(SweepDefaults(), WorkloadOverrides(rates=(4.0,), burstiness=2.0)).burstiness == 2.0
    assert workload_from(SweepDefaults(dataset="random"), WorkloadOverrides(input_len=64)).input_len == 64


def test_the_sweep_form_asks_no_input_length_of_a_dataset_sent_as_written() -> None:
    builtin = SweepDefaults()   # the builtin prompts
    fields = sweep_form_fields(builtin)
    assert "input_len" not in fields
    request = sweep_request(["a"], fields, builtin)
    assert request.input_len is None
    workload_from(builtin, WorkloadOverrides(levels=request.levels, input_len=request.input_len))   # not refused
    random = SweepDefaults(dataset="random", input_len=300)
    assert sweep_request(["a"], sweep_form_fields(random), random).input_len == 300


def test_a_level_shorter_than_one_wave_is_one_rule_said_alike_by_the_config_the_form_and_the_workload() -> None:
    from specmon.loadgen.workload import Workload
    from specmon.model.config import one_wave_problem

    said = one_wave_problem(8, (1, 16))
    assert said is not None and said.startswith("requests per level (8) is below the highest level C=16")
    assert one_wave_problem(16, (1, 16)) is None and one_wave_problem(None, (1, 16)) is None   # by duration
    with pytest.raises(ValueError) as form:
        sweep_request(["a"], {"levels": "1,16", "requests": "8", "output_len": "32"}, SweepDefaults())
    with pytest.raises(UserError) as workload:
        Workload(levels=(1, 16), requests_per_level=8)
    assert str(form.value) == str(workload.value) == said
    assert Workload(levels=(1, 16), rates=(2.0,), requests_per_level=8).open_loop   # an open loop has no waves
