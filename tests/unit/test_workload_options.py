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
