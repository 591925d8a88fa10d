"""The dashboard's pure rules: health state and cause order, percentiles, chart scaling."""

from console.dashboard.health import (
    Credentials,
    HealthInputs,
    Segment,
    bar_heights,
    health_causes,
    percentile,
    stacked_bars,
)

HEALTHY_INPUTS = dict(
    provider_test_failed=False,
    failed_closed_24h=0,
    failed_turns_24h=0,
    failed_deliveries_24h=0,
    credentials=Credentials.OK,
)


def test_a_bot_without_trouble_has_no_health_cause():
    assert health_causes(HealthInputs(**HEALTHY_INPUTS)) == []


def test_every_health_cause_that_holds_is_listed_worst_first():
    # given every fault at once
    inputs = HealthInputs(
        provider_test_failed=True,
        failed_closed_24h=1,
        failed_turns_24h=2,
        failed_deliveries_24h=3,
        credentials=Credentials.MISSING,
        connection_down=True,
    )

    # then the provider comes first and a missing Feishu app last
    assert health_causes(inputs) == [
        "provider_test_failed",
        "connection_down",
        "failing_closed",
        "turns_failing",
        "deliveries_failing",
        "feishu_not_set_up",
    ]


def test_refused_credentials_rank_right_after_the_provider():
    inputs = HealthInputs(**{**HEALTHY_INPUTS, "credentials": Credentials.REFUSED, "provider_test_failed": True})
    assert health_causes(inputs) == ["provider_test_failed", "credentials_refused"]


def test_a_bot_without_an_app_that_hears_events_is_not_flagged_but_a_silent_one_is():
    missing = {**HEALTHY_INPUTS, "credentials": Credentials.MISSING}
    assert health_causes(HealthInputs(**missing, events_recent=True)) == []
    assert health_causes(HealthInputs(**missing)) == ["feishu_not_set_up"]
    assert health_causes(HealthInputs(**{**HEALTHY_INPUTS, "credentials": Credentials.UNVERIFIED})) == []


def test_one_judgement_failing_closed_is_enough_to_flag_the_bot():
    assert health_causes(HealthInputs(**{**HEALTHY_INPUTS, "failed_closed_24h": 1})) == ["failing_closed"]


def test_percentile_is_the_nearest_rank_and_none_without_values():
    values = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]

    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.95) == 100
    assert percentile([7], 0.95) == 7
    assert percentile([], 0.5) is None


def test_bars_scale_to_the_largest_value_and_a_small_value_stays_visible():
    assert bar_heights([0, 1, 500, 1000], height=40) == [0, 1, 20, 40]
    assert bar_heights([0, 0], height=40) == [0, 0]


def test_stacked_bars_stack_bottom_up_scaled_to_the_tallest_day():
    columns = stacked_bars({"act": [1, 0], "error": [3, 2]}, height=40)

    assert columns == [
        [Segment(name="act", value=1, y=30, height=10), Segment(name="error", value=3, y=0, height=30)],
        [Segment(name="error", value=2, y=20, height=20)],
    ]
