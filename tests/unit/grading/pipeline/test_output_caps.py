"""The grader's caps on what a notebook's kernel sends back (``SafeExecute.output`` and the ways around it: display
updates, widget state), fed kernel messages directly, without a kernel.

The same caps on a real notebook graded through the grading command are in ``tests/grading/test_swamp.py``.
"""

from __future__ import annotations

import nbformat

from autograder.grading.pipeline import execute

CELL, NOTEBOOK = 1_000, 5_000


def _executor():
    ex = execute.SafeExecute(max_output_bytes=CELL, max_notebook_output_bytes=NOTEBOOK)
    ex.nb = nbformat.v4.new_notebook()
    ex.reset_execution_trackers()
    ex.clear_before_next_output = False
    ex._reset_safety()
    ex.report = execute.ExecutionReport()
    return ex


def _msg(kind, **content):
    return {"msg_type": kind, "content": content, "parent_header": {"msg_id": "m"}, "header": {"msg_type": kind}}


def _kept(outs) -> int:
    return sum(execute.output_size(o) for o in outs)


def test_every_kind_of_output_counts_and_a_failure_past_a_cap_is_kept_short_once():
    ex = _executor()
    cells = [[] for _ in range(12)]
    ex.output(cells[0], _msg("error", ename="Exception", evalue="x" * 50_000, traceback=["x" * 50_000]), None, 0)
    for index in range(1, 12):
        for _ in range(3):
            ex.output(cells[index], _msg("stream", name="stdout", text="y" * 300), None, index)
        for _ in range(2):  # a failure after the notebook is full: the cell still fails, once
            ex.output(cells[index], _msg("stream", name="stderr", text="z" * 5_000), None, index)
    first = cells[0]
    assert [o["output_type"] for o in first] == ["stream", "error"] and execute.TRUNCATED_MARKER in first[0]["text"]
    assert first[1]["ename"] == "Exception" and len(first[1]["evalue"]) == execute.SHORT_ERROR
    assert sum(_kept(outs) for outs in cells) < NOTEBOOK + 12 * (execute.SHORT_ERROR + 200)
    assert all(sum(o.get("name") == "stderr" for o in outs) == 1 for outs in cells[1:])
    dropped = [o for outs in cells for o in outs if "output dropped" in o.get("text", "")]
    assert len(dropped) == 1
    assert ex.report.sandbox_events == [execute.NOTEBOOK_OUTPUT_LIMIT.format(limit=NOTEBOOK)]


def test_display_updates_and_widget_state_count_towards_the_notebook():
    ex = _executor()
    shown = _msg("display_data", data={"text/plain": "0"}, metadata={}, transient={"display_id": "d"})
    cells = [[] for _ in range(10)]
    for index, outs in enumerate(cells):  # one display shown in ten cells
        ex.output(outs, shown, "d", index)
        ex._display_id_map.setdefault("d", {}).setdefault(index, []).append(0)
    ex.nb.cells = [nbformat.v4.new_code_cell(outputs=outs) for outs in cells]
    ex._update_display_id("d", _msg("update_display_data", data={"text/plain": "1" * 50}, metadata={}))
    assert {o["data"]["text/plain"] for outs in cells for o in outs} == {"1" * 50}
    ex._update_display_id("d", _msg("update_display_data", data={"text/plain": "2" * 1_000}, metadata={}))
    assert {o["data"]["text/plain"] for outs in cells for o in outs} == {"1" * 50}  # ten times 1,000: not kept
    ex = _executor()
    state = {"comm_id": "w", "data": {"state": {"value": "v" * 3_000}, "buffer_paths": []}}
    for comm in ("a", "b"):
        ex.handle_comm_msg([], _msg("comm_msg", **{**state, "comm_id": comm}), 0)
    assert list(ex.widget_state) == ["a"] and ex.report.sandbox_events


def test_empty_containers_count_towards_the_caps_as_their_json_does():
    """``display(..., metadata={"settings": [[]] * N})`` once counted 0 and made a 110 MB graded notebook: every
    container, key and element counts, about as many characters as it takes in the notebook's JSON."""
    import json

    for content in ({"metadata": {"settings": [[]] * 1_000}}, {"data": {"application/json": [{}] * 1_000}},
                    {"metadata": {str(i): {} for i in range(1_000)}}, {"a": [[[[]]]] * 100, "b": ["x"] * 100}):
        size, text = execute.output_size(content), len(json.dumps(content, separators=(",", ":")))
        assert 0.5 * text <= size <= 2 * text, (size, text)
    ex = _executor()
    outs = []
    for _ in range(20):  # twenty displays of 1,000 empty lists each: over the cell's cap of 1,000 at once
        ex.output(outs, _msg("display_data", data={"text/plain": ""}, metadata={"settings": [[]] * 1_000}), None, 0)
    assert sum(o.get("output_type") == "display_data" for o in outs) == 0
    assert any(execute.TRUNCATED_MARKER in o.get("text", "") for o in outs)
