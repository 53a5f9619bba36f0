"""The configuration table: precedence, aliases, typed parsing and clear errors."""

import pytest

from hvdcore import config
from hvdcore.errors import ConfigError


def test_defaults() -> None:
    cfg = config.load({})
    assert cfg.fusion_threshold == 64 * 1024 * 1024
    assert cfg.cycle_time == 1.0
    assert cfg.stall_check_time_seconds == 60.0
    assert cfg.stall_shutdown_time_seconds == 600.0
    assert cfg.source("cycle_time") == "default"


def test_hvdcore_beats_horovod_alias() -> None:
    cfg = config.load({"HOROVOD_FUSION_THRESHOLD": "100", "HVDCORE_FUSION_THRESHOLD": "200"})
    assert cfg.fusion_threshold == 200
    assert cfg.source("fusion_threshold") == "HVDCORE_FUSION_THRESHOLD"
    cfg = config.load({"HOROVOD_FUSION_THRESHOLD": "0x100"})
    assert cfg.fusion_threshold == 256


def test_unknown_hvdcore_variable_is_rejected_with_suggestion() -> None:
    with pytest.raises(ConfigError, match="HVDCORE_CYCLE_TIM.*Did you mean HVDCORE_CYCLE_TIME"):
        config.load({"HVDCORE_CYCLE_TIM": "1"})


def test_unknown_horovod_variable_is_ignored() -> None:
    assert config.load({"HOROVOD_SOMETHING_ELSE": "x"}).cycle_time == 1.0


@pytest.mark.parametrize(
    "var, value, needle",
    [
        ("HVDCORE_FUSION_THRESHOLD", "-1", "integer >= 0"),
        ("HVDCORE_FUSION_THRESHOLD", "64MB", "not a valid int"),
        ("HVDCORE_CYCLE_TIME", "nan", "number >= 0"),
        ("HVDCORE_STALL_CHECK_DISABLE", "maybe", "1/0 (any integer: > 0 is on), true/false"),
        ("HVDCORE_LOG_LEVEL", "verbose", "accepted values are trace, debug"),
        ("HVDCORE_GPU_OPERATIONS", "rccl", "auto, nccl, mpi"),
    ],
)
def test_ill_typed_values_name_variable_and_accepted_values(var: str, value: str,
                                                            needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load({var: value})
    assert var in str(info.value) and needle in str(info.value)
