"""The cost model's tables: every price names its page and the date it was read, only an AWS page verifies a
figure, every counted request has a price, and a moved count is reported by unit and request."""

from __future__ import annotations

from urllib.parse import urlparse

from tests.cost.model import REQUEST_PRICES, count_changes, load_expected, load_prices


def test_every_price_names_its_page_and_read_date_and_only_aws_pages_verify():
    # Given the price table
    prices = load_prices()

    # Then each row has a source page and an ISO read date; a verified figure was read on an AWS page
    for price in prices.values():
        assert urlparse(price.source).scheme == "https", price.key
        assert len(price.read) == 10 and price.read[4] == "-", price.key
        if price.verified:
            assert urlparse(price.source).hostname == "aws.amazon.com", price.key
            assert price.usd is not None, price.key


def test_every_expected_request_maps_to_a_price_in_the_table():
    # Given the committed counts and the price table
    expected, prices = load_expected(), load_prices()

    # Then every request they hold is priced by a row that exists (or has no charge of its own)
    for unit, figures in expected.items():
        for request in figures["requests"]:
            assert request in REQUEST_PRICES, f"{unit}: {request}"
            price_key = REQUEST_PRICES[request]
            assert price_key is None or price_key in prices, f"{unit}: {request} -> {price_key}"


def test_a_new_request_per_unit_is_reported_with_its_unit_and_operation():
    # Given a job that made one PutItem and now also makes a GetItem, and a call that dropped its SQS send
    # (while its time-batched Kinesis puts moved, which is not a change of the unit)
    expected = {
        "job": {"requests": {"dynamodb:PutItem": 1.0}, "invocations": {"ToolWorker": 1.0}},
        "tools/call": {
            "requests": {"sqs:SendMessage": 1.0, "kinesis:PutRecords": 1.0},
            "invocations": {"McpServer": 1.0},
        },
    }
    counted = {
        "job": {"requests": {"dynamodb:PutItem": 1.0, "dynamodb:GetItem": 1.0}, "invocations": {"ToolWorker": 1.0}},
        "tools/call": {"requests": {"kinesis:PutRecords": 0.2}, "invocations": {"McpServer": 1.0}},
    }

    # When the counts are compared
    changes = count_changes(expected, counted)

    # Then each change names its unit, the request and both counts; unchanged figures are not listed
    assert changes == [
        "job: dynamodb:GetItem 0 -> 1 per unit",
        "tools/call: sqs:SendMessage 1 -> 0 per unit",
    ]
