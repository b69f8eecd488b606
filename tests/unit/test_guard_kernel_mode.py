"""KernelBench's builtin-op rule as a guard mode (``kernel``): which findings decide, per format."""

from __future__ import annotations

from pytest_cannbench.guard import builtin_ops
from pytest_cannbench.guard.policy import BLOCK, KERNEL, OFF, WARN, guard_verdict, mode_for
from pytest_cannbench.guard.runtime import MARK, calls_without_kernel


def test_kernelbench_follows_its_own_rule_and_cann_stays_strict():
    assert mode_for("kernelbench", BLOCK, "kernelbench") == KERNEL
    assert mode_for("kernelbench", BLOCK, "cann") == BLOCK
    assert mode_for("kernelbench", WARN, "kernelbench") == WARN and mode_for("kernelbench", OFF, "cann") == OFF
    assert mode_for("candidate", BLOCK, "kernelbench") == BLOCK


def test_builtin_ops_are_flags_in_kernel_mode_and_the_rest_decides():
    builtin = [("builtin_compute", "ran builtin op(s) aten::add")]
    assert guard_verdict(builtin, KERNEL) == (None, "", ["builtin_compute: ran builtin op(s) aten::add"])
    assert guard_verdict(builtin, BLOCK)[0] == "builtin_compute"
    bare = [("no_custom_kernel", "1 of 1 call(s) ran none"), *builtin]
    assert guard_verdict(bare, KERNEL)[0] == "no_custom_kernel"
    assert guard_verdict([("host_library", "imported numpy")], KERNEL)[0] == "host_library"
    assert guard_verdict([("forbidden_access", "x")], WARN)[0] == "forbidden_access"


def test_a_call_counts_as_custom_only_with_its_own_kernel_inside_the_marker():
    label = builtin_ops.CUSTOM_PREFIX + "ext.relu"
    events = [(MARK, 0, 100, True), (label, 10, 20, True), ("aten::add", 30, 40, False),
              (MARK, 200, 300, True), ("aten::add", 210, 220, False), (label, 400, 410, True)]
    assert calls_without_kernel(events) == 1  # the second call's label lies outside its window
    builtin_ops.OWN_OPS.add("myns::fused")
    try:
        assert calls_without_kernel([(MARK, 0, 100, True), ("myns::fused", 5, 6, False)]) == 0
        assert builtin_ops.is_allowed("myns::fused") and not builtin_ops.is_allowed("aten::add")
        builtin_ops.OWN_OPS.add("aten::add")  # a builtin namespace is never the submission's own
        assert not builtin_ops.own_op("aten::add") and not builtin_ops.is_allowed("aten::add")
    finally:
        builtin_ops.OWN_OPS.difference_update({"myns::fused", "aten::add"})
