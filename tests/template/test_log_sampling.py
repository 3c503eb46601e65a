"""Production log levels: every function logs at the template's LOG_LEVEL (INFO by default) and only the
sampled share of invocations at DEBUG, through Powertools' own sampling (POWERTOOLS_LOGGER_SAMPLE_RATE)."""

from __future__ import annotations

import io
import json
from unittest import mock

import pytest
from aws_lambda_powertools import Logger

from tests.template.test_invariants import of_type, resolve

SAMPLING = "aws_lambda_powertools.logging.logger.random.random"


def template_log_environment(**parameters: str) -> dict[str, str]:
    """LOG_LEVEL and POWERTOOLS_LOGGER_SAMPLE_RATE as deployed, identical for every function."""
    found = {
        logical_id: {
            name: str(resolve(function["Properties"]["Environment"]["Variables"][name], **parameters))
            for name in ("LOG_LEVEL", "POWERTOOLS_LOGGER_SAMPLE_RATE")
        }
        for logical_id, function in of_type("AWS::Lambda::Function").items()
    }
    [environment] = {json.dumps(values, sort_keys=True) for values in found.values()}
    return json.loads(environment)


def logged_messages(environment: dict[str, str], draw: float, monkeypatch, warm: bool) -> list[str]:
    """What one invocation's Logger writes, with Powertools' random draw for it fixed to `draw`."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    stream = io.StringIO()
    with mock.patch(SAMPLING, return_value=draw if not warm else 0.99):
        logger = Logger(service=f"sampling-{draw}-{warm}", stream=stream)  # a cold start draws here
    if warm:  # a warm invocation draws again (inject_lambda_context calls this when sampling is on)
        with mock.patch(SAMPLING, return_value=draw):
            logger.refresh_sample_rate_calculation()
    logger.debug("detail")
    logger.info("summary")
    return [json.loads(line)["message"] for line in stream.getvalue().splitlines()]


def test_the_default_is_info_with_a_debug_share():
    assert template_log_environment() == {"LOG_LEVEL": "INFO", "POWERTOOLS_LOGGER_SAMPLE_RATE": "0.05"}


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_sampled_invocation_logs_debug_and_an_unsampled_one_does_not(monkeypatch, warm):
    # Given the functions' deployed log settings (INFO, 5 % sampled)
    environment = template_log_environment()
    rate = float(environment["POWERTOOLS_LOGGER_SAMPLE_RATE"])

    # When one invocation's draw falls inside the sampled share and another's outside it
    sampled = logged_messages(environment, draw=rate / 2, monkeypatch=monkeypatch, warm=warm)
    unsampled = logged_messages(environment, draw=min(1.0, rate * 2), monkeypatch=monkeypatch, warm=warm)

    # Then only the sampled invocation logs its DEBUG line; both log INFO
    assert "detail" in sampled and "summary" in sampled
    assert "detail" not in unsampled and "summary" in unsampled


def test_without_sampling_nothing_logs_debug(monkeypatch):
    # Given LogSampleRate 0 and the smallest draw above zero (Powertools samples when draw <= rate)
    environment = template_log_environment(LogSampleRate=0)
    # Then no invocation logs DEBUG
    assert "detail" not in logged_messages(environment, draw=1e-9, monkeypatch=monkeypatch, warm=False)
