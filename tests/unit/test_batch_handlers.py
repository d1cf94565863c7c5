"""Batch handlers (``batch=True``): registration rules and the pure mapping from a batch
handler's result to its messages' outcomes."""

from __future__ import annotations

from collections.abc import Sequence

import pydantic
import pytest
from sqlalchemy.orm import Session

from streamworker import App, ConfigError, DeadLetter, Effects, Message, Retry
from streamworker.core.deps import build_plan
from streamworker.core.outcomes import ACKED, Action, BadBatchResult, batch_outcomes


class Order(pydantic.BaseModel):
    n: int


def _msgs(n: int, delivery_count: int = 1) -> list[Message[None]]:
    return [
        Message(f"1-{i}", "s", "g", "c", {}, None, delivery_count=delivery_count) for i in range(n)
    ]


def test_plan_of_a_list_of_messages_is_a_batch_plan_with_the_element_as_message_type() -> None:
    def handle(msgs: list[Message[int]]) -> None: ...

    plan = build_plan(handle)
    assert plan.batch
    assert plan.message_type == Message[int]


def test_plan_of_a_sequence_of_messages_is_a_batch_plan() -> None:
    def handle(msgs: Sequence[Message[int]]) -> None: ...

    assert build_plan(handle).batch


def test_plan_of_a_single_message_is_not_a_batch_plan() -> None:
    def handle(msg: Message[int]) -> None: ...

    assert not build_plan(handle).batch


def test_batch_handler_is_registered_with_batch_true_and_its_element_model() -> None:
    app = App("t")

    @app.handler("s", group="g", batch=True)
    def handle(msgs: list[Message[Order]]) -> None: ...

    spec = app.handlers[0]
    assert spec.batch
    assert spec.model is Order


def test_batch_true_with_concurrency_above_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="concurrency must be 1"):
        App("t").handler("s", group="g", batch=True, concurrency=4)


def test_batch_true_with_ordered_is_refused() -> None:
    with pytest.raises(ConfigError, match="ordered"):
        App("t").handler("s", group="g", batch=True, ordered=True)


def test_batch_true_on_a_handler_of_one_message_is_refused() -> None:
    register = App("t").handler("s", group="g", batch=True)

    def handle(msg: Message) -> None: ...

    with pytest.raises(ConfigError, match=r"list\[Message"):
        register(handle)


def test_list_of_messages_without_batch_true_is_refused() -> None:
    register = App("t").handler("s", group="g")

    def handle(msgs: list[Message]) -> None: ...

    with pytest.raises(ConfigError, match="batch=True"):
        register(handle)


def test_sql_batch_handler_gets_a_session() -> None:
    app = App("t")

    @app.handler("s", group="g", idempotency="sql", batch=True)
    def handle(msgs: list[Message], session: Session) -> None: ...

    assert app.handlers[0].batch


def test_batch_handler_annotated_to_return_effects_is_refused_without_lua() -> None:
    register = App("t").handler("s", group="g", batch=True)

    def handle(msgs: list[Message]) -> dict[str, Effects]: ...

    with pytest.raises(ConfigError, match="Effects"):
        register(handle)


def test_none_result_acks_every_message() -> None:
    assert batch_outcomes(None, _msgs(3), 5) == [ACKED] * 3


def test_result_map_fails_only_the_ids_it_names_and_acks_the_others() -> None:
    msgs = _msgs(4)
    out = batch_outcomes({"1-1": Retry(delay_ms=7), "1-2": DeadLetter("no"), "1-3": None}, msgs, 5)
    assert out[0] is ACKED
    assert out[3] is ACKED
    assert out[1].action is Action.LEAVE_PENDING
    assert out[1].retry_delay_ms == 7
    assert out[2].action is Action.DEAD_LETTER


def test_a_failure_on_the_last_allowed_delivery_dead_letters_that_message() -> None:
    out = batch_outcomes({"1-0": RuntimeError("x")}, _msgs(2, delivery_count=5), 5)
    assert out[0].action is Action.DEAD_LETTER
    assert out[1] is ACKED


def test_other_values_are_acked_with_the_value_for_the_strategy() -> None:
    effects = Effects().incr("{s}:n")
    out = batch_outcomes({"1-0": effects}, _msgs(1), 5)
    assert out[0].acked
    assert out[0].value is effects


def test_an_id_outside_the_batch_is_a_bad_result() -> None:
    with pytest.raises(BadBatchResult, match="not in its batch"):
        batch_outcomes({"9-9": None}, _msgs(2), 5)


def test_a_result_that_is_not_a_map_is_a_bad_result() -> None:
    with pytest.raises(BadBatchResult, match="mapping"):
        batch_outcomes([None, None], _msgs(2), 5)
