"""CPU seconds per test: ``python -m pytest -p tests._cputime tests/<area> -m "not slow"``.

After the run it lists the tests that used the most CPU time (this process and the child
processes it waited for: a console script, a replay child, a training job), with the wall
time next to it, and the unmarked ones over the slow threshold. On this shared machine a
test's wall time grows with the load (the same test took 3 s at a quiet moment and over
20 s at load 15) while its CPU time stays about the same, so CONTRIBUTING's "a test over
5 s is slow" is counted in these seconds.

Setup and teardown are counted with the test that ran them (a module's fixture is paid
by its first test: judge such a module by its cost per test). Work done by a process the
test did not wait for (a server it only talks to) is not counted; a process started
earlier (by a fixture, an earlier test) is counted by the test that reaps it: a row with
more CPU than the machine's cores could give in its wall time is marked ``reaped`` and
left out of the slow list.
"""

from __future__ import annotations

import os
import time

import pytest

_ROWS: list[tuple[float, float, str, bool]] = []


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def pytest_addoption(parser):
    group = parser.getgroup("cputime")
    group.addoption("--cpu-top", type=int, default=30, help="how many tests to list by CPU time")
    group.addoption("--cpu-slow", type=float, default=5.0,
                    help="CPU seconds over which an unmarked test is listed as slow")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu0, wall0 = _cpu_s(), time.perf_counter()
    yield
    _ROWS.append((_cpu_s() - cpu0, time.perf_counter() - wall0, item.nodeid,
                  item.get_closest_marker("slow") is not None))


def pytest_terminal_summary(terminalreporter, config):
    if not _ROWS:
        return
    top, slow = config.getoption("--cpu-top"), config.getoption("--cpu-slow")
    rows = sorted(_ROWS, reverse=True)
    w = terminalreporter
    w.section("CPU time per test (self + waited-for children)")
    cores = os.cpu_count() or 1

    def reaped(cpu, wall):
        return cpu > cores * wall + 0.5

    w.line(f"{'cpu s':>8} {'wall s':>8}  test")
    for cpu, wall, nodeid, marked in rows[:top]:
        w.line(f"{cpu:8.2f} {wall:8.2f}  {nodeid}{'  [slow]' if marked else ''}"
               f"{'  [reaped: includes processes started earlier]' if reaped(cpu, wall) else ''}")
    over = [r for r in rows if r[0] > slow and not r[3] and not reaped(r[0], r[1])]
    w.line(f"{len(over)} unmarked test(s) over {slow:g} CPU s" + (":" if over else ""))
    for cpu, _, nodeid, _ in over:
        w.line(f"  {cpu:.2f}  {nodeid}")
    total_cpu = sum(r[0] for r in rows)
    total_wall = sum(r[1] for r in rows)
    w.line(f"{len(rows)} tests: {total_cpu:.1f} CPU s, {total_wall:.1f} wall s "
           f"(wall/CPU {total_wall / max(total_cpu, 1e-9):.1f})")
