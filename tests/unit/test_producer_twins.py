"""Producer and SyncProducer are one API in two forms: every public method of one exists in the
other with the same parameters, and ``publish`` takes what :func:`plan_publish` plans (the
flows behind both are one code; these tests keep the thin shells from drifting apart)."""

from __future__ import annotations

import inspect
import typing

import pytest

from streamworker.producing.producer import (
    Producer,
    PublishOptions,
    SyncProducer,
    plan_publish,
)


def _public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def test_both_producers_have_the_same_public_methods() -> None:
    assert _public(Producer) == _public(SyncProducer) == {"publish", "send", "publish_many"}


@pytest.mark.parametrize("name", ["publish", "send", "publish_many"])
def test_a_method_takes_the_same_parameters_in_both_producers(name: str) -> None:
    asynchronous = inspect.signature(getattr(Producer, name))
    sync = inspect.signature(getattr(SyncProducer, name))
    assert inspect.iscoroutinefunction(getattr(Producer, name))
    assert not inspect.iscoroutinefunction(getattr(SyncProducer, name))
    assert list(asynchronous.parameters.values()) == list(sync.parameters.values())
    assert asynchronous.return_annotation == sync.return_annotation


def test_publish_takes_every_per_call_option_that_plan_publish_plans() -> None:
    planned = typing.get_type_hints(plan_publish)
    # The stream's options and the idempotency window come from the producer itself.
    keywords = [
        n
        for n, p in inspect.signature(plan_publish).parameters.items()
        if p.kind is p.KEYWORD_ONLY and n != "idempotency_window_ms"
    ]
    options = typing.get_type_hints(PublishOptions)
    assert list(options) == keywords
    assert options == {n: planned[n] for n in keywords}
    assert not PublishOptions.__required_keys__
    published = inspect.signature(Producer.publish).parameters
    assert list(published) == ["self", "stream", "value", "options"]
    assert published["options"].kind is inspect.Parameter.VAR_KEYWORD


@pytest.mark.parametrize("producer", [Producer, SyncProducer])
def test_an_unknown_or_fixed_option_is_refused_before_anything_is_sent(producer: type) -> None:
    # **options takes any keyword at run time: plan_publish must still refuse what it does not
    # take, and the producer's own window cannot be passed per call. The client is never used.
    publisher = producer(client=None)
    with pytest.raises(TypeError, match="maxlenn"):
        publisher.plan("s", {"n": 1}, maxlenn=5)
    with pytest.raises(TypeError, match="idempotency_window_ms"):
        publisher.plan("s", {"n": 1}, idempotency_window_ms=5)
