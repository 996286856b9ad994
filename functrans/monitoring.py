"""``jax.monitoring``: named events, durations and scalars that libraries report, delivered to
the listeners registered for them (nothing is recorded without a listener).

    >>> from functrans import monitoring
    >>> seen = []
    >>> monitoring.register_event_listener(lambda event, **kw: seen.append(event))
    >>> monitoring.record_event("/my/event")
    >>> seen
    ['/my/event']
    >>> monitoring.clear_event_listeners()
"""
from __future__ import annotations

__all__ = ["clear_event_listeners", "record_event", "record_event_duration_secs",
           "record_event_time_span", "record_scalar", "register_event_duration_secs_listener",
           "register_event_listener", "register_event_time_span_listener",
           "register_scalar_listener", "unregister_event_duration_listener",
           "unregister_event_listener", "unregister_event_time_span_listener",
           "unregister_scalar_listener"]

_event_listeners: list = []
_duration_listeners: list = []
_time_span_listeners: list = []
_scalar_listeners: list = []


def record_event(event: str, **kwargs) -> None:
    """Report that ``event`` happened (``kwargs``: string/int/bool attributes)."""
    for listener in list(_event_listeners):
        listener(event, **kwargs)


def record_event_duration_secs(event: str, duration: float, **kwargs) -> None:
    """Report that ``event`` took ``duration`` seconds."""
    for listener in list(_duration_listeners):
        listener(event, duration, **kwargs)


def record_event_time_span(event: str, start_time: float, end_time: float, **kwargs) -> None:
    """Report that ``event`` ran from ``start_time`` to ``end_time`` (seconds)."""
    for listener in list(_time_span_listeners):
        listener(event, start_time, end_time, **kwargs)


def record_scalar(event: str, value: float | int, **kwargs) -> None:
    """Report a scalar ``value`` for ``event``."""
    for listener in list(_scalar_listeners):
        listener(event, value, **kwargs)


def register_event_listener(listener) -> None:
    _event_listeners.append(listener)


def register_event_duration_secs_listener(listener) -> None:
    _duration_listeners.append(listener)


def register_event_time_span_listener(listener) -> None:
    _time_span_listeners.append(listener)


def register_scalar_listener(listener) -> None:
    _scalar_listeners.append(listener)


def unregister_event_listener(listener) -> None:
    _event_listeners.remove(listener)


def unregister_event_duration_listener(listener) -> None:
    _duration_listeners.remove(listener)


def unregister_event_time_span_listener(listener) -> None:
    _time_span_listeners.remove(listener)


def unregister_scalar_listener(listener) -> None:
    _scalar_listeners.remove(listener)


def clear_event_listeners() -> None:
    """Forget every listener."""
    for listeners in (_event_listeners, _duration_listeners, _time_span_listeners,
                      _scalar_listeners):
        listeners.clear()
