"""Per-object steps of a dataplane pass (dataplane/steps.py): isolated, time-bounded, retried with backoff."""

from __future__ import annotations

import threading

import pytest

from cloudnet.dataplane.steps import FIRST_RETRY, MAX_RETRY, StepFailed, Steps, StepTimedOut


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def boom(message: str = "broken") -> None:
    raise RuntimeError(message)


def test_a_failure_marks_its_object_only_and_backs_off() -> None:
    clock = Clock()
    steps = Steps(timeout=5, clock=clock)
    with pytest.raises(StepFailed) as failed:
        steps.run("instance:a", boom, "fp1")
    assert (failed.value.key, failed.value.reason) == ("instance:a", "broken")
    assert steps.run("instance:b", lambda: 42) == 42  # another object is not held back
    calls: list[str] = []
    # While it backs off, the same desired state is not tried again: the reason is given at once.
    with pytest.raises(StepFailed, match="broken"):
        steps.run("instance:a", lambda: calls.append("ran"), "fp1")
    assert calls == []
    (report,) = steps.report()
    assert report["object"] == "instance:a" and report["attempts"] == 1 and report["retry_in"] == FIRST_RETRY
    clock.now += FIRST_RETRY
    with pytest.raises(StepFailed):
        steps.run("instance:a", boom, "fp1")
    assert steps.failed("instance:a").attempts == 2  # type: ignore[union-attr]
    assert steps.report()[0]["retry_in"] == 2 * FIRST_RETRY  # doubling


def test_backoff_is_capped() -> None:
    clock = Clock()
    steps = Steps(clock=clock)
    for _ in range(30):
        clock.now += MAX_RETRY
        with pytest.raises(StepFailed):
            steps.run("router:r", boom)
    assert steps.report()[0]["retry_in"] == MAX_RETRY


def test_a_new_desired_state_is_tried_at_once_and_success_forgets_the_failure() -> None:
    steps = Steps(clock=Clock())
    with pytest.raises(StepFailed):
        steps.run("instance:a", boom, "old")
    assert steps.run("instance:a", lambda: "plugged", "new") == "plugged"
    assert steps.report() == []


def test_a_hung_step_times_out_and_the_next_runs_on_a_new_worker() -> None:
    steps = Steps(timeout=0.2, clock=Clock())
    release = threading.Event()
    hung_on: list[threading.Thread] = []

    def hang() -> None:
        hung_on.append(threading.current_thread())
        release.wait(30)

    try:
        with pytest.raises(StepTimedOut):
            steps.run("instance:fifo", hang)
        assert steps.failed("instance:fifo").reason == "timed out after 0.2 s"  # type: ignore[union-attr]
        # The hung worker is abandoned: the next object's step runs elsewhere, at once.
        assert steps.run("instance:ok", threading.current_thread) is not hung_on[0]
    finally:
        release.set()


def test_steps_within_a_step_share_its_worker_and_limit() -> None:
    steps = Steps(timeout=5, clock=Clock())
    outer = steps.run("outer", lambda: (threading.current_thread(), steps.run("inner", threading.current_thread)))
    assert outer[0] is outer[1] and outer[0] is not threading.current_thread()


def test_failures_of_objects_gone_from_the_desired_state_are_forgotten() -> None:
    steps = Steps(clock=Clock())
    for key in ("instance:a", "instance:b"):
        with pytest.raises(StepFailed):
            steps.run(key, boom)
    steps.keep_only(["instance:b", "router:x"])
    assert [f["object"] for f in steps.report()] == ["instance:b"]


def test_thread_init_runs_on_each_new_worker() -> None:
    inits: list[str] = []
    steps = Steps(timeout=5, clock=Clock(), thread_init=lambda: inits.append(threading.current_thread().name))
    steps.run("a", lambda: None)
    steps.run("b", lambda: None)
    steps.restart()
    steps.run("c", lambda: None)
    assert len(inits) == 2


def test_netlink_errors_are_reported_by_their_errno() -> None:
    class NetlinkLike(Exception):
        code = 95

    def refuse() -> None:
        raise NetlinkLike(95, "whatever")

    with pytest.raises(StepFailed, match=r"Operation not supported \(errno 95\)"):
        Steps(clock=Clock()).run("vf:p", refuse)


def test_a_worker_that_cannot_start_fails_its_steps_at_once() -> None:
    steps = Steps(timeout=30, clock=Clock(), thread_init=lambda: boom("no host namespace"))
    with pytest.raises(StepFailed, match="no host namespace"):
        steps.run("a", lambda: None)


def test_a_hung_object_is_not_run_again_until_its_attempt_returns() -> None:
    clock = Clock()
    steps = Steps(timeout=0.2, clock=clock)
    release = threading.Event()
    runs: list[threading.Thread] = []

    def hang() -> None:
        runs.append(threading.current_thread())
        release.wait(30)

    try:
        with pytest.raises(StepTimedOut):
            steps.run("instance:x", hang)
        for _ in range(3):  # its backoff ends, but the first attempt still runs: no new thread, no new wait
            clock.now += MAX_RETRY
            with pytest.raises(StepFailed, match="timed out"):
                steps.run("instance:x", hang)
        assert len(runs) == 1
    finally:
        release.set()
    runs[0].join(5)
    assert not runs[0].is_alive()  # an abandoned worker ends once its step returns
    clock.now += MAX_RETRY
    assert steps.run("instance:x", lambda: "plugged") == "plugged"
