"""Hidden tests registered by name: one per graded test cell, named by that cell's grade_id.

A lesson's hidden tests live in ``autograder/checks/lessonNN.py``; each is declared with ``@hidden_test``, which
records the learner names it reads from the notebook (``uses``: the graded functions or values, passed
positionally; ``helpers``: passed by keyword, the learner's own versions of functions of the lesson the test itself
uses), the learner functions it grades together with ``uses`` (``together``: never replaced), the functions the
lesson tells the graded one, in words, not to call (``forbids``, with the lesson's reason) and the visible
self-check that follows it in the cell (``visible_check``: it gives way when the hidden test passes, so a bug
elsewhere costs nothing here).

Isolation: while a test runs, every other function of the lesson (``stand_ins_of``, below: pasted from an earlier
lesson, given, ungraded, or graded by another test) is replaced by a stand-in wherever a learner's function looks it
up, so a cell's score depends only on the functions it grades: the reference answers for it, so a graded function
may call any function the lesson gives or has the learner write (a correct solution that reuses one earns full
marks, and a slip in that one costs only its own tests), except one the lesson forbids it: that stand-in refuses
(``verdict.Refusal``), so the graded function earns nothing for the work the lesson asked of it.

The stand-ins of a lesson, declared below, run in the grader's process only: the kernel never holds an answer.
``tests/unit/checks/test_isolation.py`` checks that every function defined in a lesson's answer cells has one; a
function the lesson's text tells the graded one not to call (``@hidden_test(forbids=..., because=...)``:
``tiled_attention`` must not hand its work to a function that forms the whole (T, T) matrix, ``softmax_backward``
must not build the Jacobian, the decoding loop must go through ``decode_step``) is a ``Refusal`` while the test
runs: a call raises ``Refused``, which names the function and the lesson's reason, and the test fails whatever the
learner's code does with the error afterwards (``autograder/grading/pipeline/hidden_tests.py`` keeps the refusal in
the grader).

The hidden cell itself is one line, ``__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("<grade_id>")``; the
grader finds the test from the cell's grade_id, which nbgrader restores before grading (not from the cell's
text), and runs it with the learner's names looked up in the notebook's namespace.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from autograder import course, reference
from autograder.checks.runner import standing_in
from autograder.checks.verdict import Refusal, WrongAnswer


@dataclass(frozen=True)
class HiddenTest:
    lesson: str  # the lesson's id, "01_warmup"
    name: str  # the graded cell's grade_id
    function: Callable[..., Any]
    uses: tuple
    helpers: tuple = ()
    visible_check: str | None = None
    together: tuple = ()
    forbids: tuple = ()  # the functions the lesson tells the graded ones not to call
    because: str = ""  # the lesson's words for why
    number: str = ""  # the lesson's number, "01": what its stand-ins are declared under (``_BY_LESSON``)

    @property
    def names(self) -> tuple:
        return self.uses + self.helpers

    def stand_ins(self, refused=None) -> dict:
        """{name: stand-in} of every learner function of the lesson that this test does not grade: the reference,
        or a ``Refusal`` for a function the lesson forbids (each refusal appended to the list ``refused``)."""
        graded = set(self.uses) | set(self.together)
        lesson = _BY_LESSON[self.number]()
        return {n: Refusal(n, " and ".join(self.uses), self.because, refused) if n in self.forbids else f
                for n, f in lesson.items() if n not in graded}

    def __call__(self, values: dict):
        """Run the test on ``values`` ({learner name: function or value}); raises AssertionError when it fails.

        Each learner function runs with the stand-ins of the functions this test does not grade bound in place; a
        test whose learner code called a refusal fails, even when that code caught the error."""
        refused: list = []
        others = self.stand_ins(refused)
        with contextlib.ExitStack() as stack:
            for name in self.uses:  # a helper shares the graded function's namespace (a notebook's) or is the reference
                if callable(values[name]):
                    stack.enter_context(standing_in(values[name], {n: f for n, f in others.items() if n != name}))
            result = self.function(*[values[n] for n in self.uses], **{n: values[n] for n in self.helpers})
        if refused:
            raise WrongAnswer(f"{refused[0]}.")
        return result


# ------------------------------------------------------------------ the stand-ins: the reference, by lesson

_LESSON01 = ("softmax", "scaled_dot_product_attention")
_LESSON02 = (*_LESSON01, "split_heads", "concat_heads", "output_projection", "multi_head_attention")


def _exercise_512():
    return 512 // 8, reference.mha_param_count(512, 8), reference.mha_param_count(512, 1)


def _reference(*names) -> dict:
    return {name: getattr(reference, name) for name in names}


def _lesson05() -> dict:
    return {"softmax": reference.softmax, "split_into_heads": reference.split_heads,
            "merge_heads": reference.concat_heads, "head_weights": reference.head_weights,
            "mha_from_scratch": reference.multi_head_attention,
            # the find-the-bug exercises, fixed
            "masked_attention": reference.scaled_dot_product_attention, "attention_layer": reference.multi_head_attention}


_BY_LESSON = {  # by lesson number
    "01": lambda: _reference(*_LESSON01),
    # output_projection_per_head: the ungraded exercise computes output_projection without concatenating
    "02": lambda: {**_reference(*_LESSON02), "output_projection_per_head": reference.output_projection},
    "03": lambda: {**_reference("mha_param_count", "gqa_param_count", "kv_cache_bytes_per_token"),
                         "exercise_512": _exercise_512},
    # softmax and split_heads are given in a locked cell
    "04": lambda: _reference("softmax", "split_heads", "multi_head_scores", "dot_product_std"),
    "05": _lesson05,
    # lesson 06 pastes lesson 01's functions and lesson 02's split_heads, concat_heads and multi_head_attention
    "06": lambda: _reference(*_LESSON01, "split_heads", "concat_heads", "multi_head_attention", "repeat_kv",
                                   "grouped_query_attention", "causal_mask", "causal_self_attention",
                                   "kv_cache_append", "decode_step", "decode_with_kv_cache", "tiled_attention",
                                   "cross_attention"),
    "07": lambda: _reference("softmax_jacobian", "softmax_backward", "gradient_check", "attention_row_backward",
                                   "scaled_dot_product_attention_backward",
                                   "multi_head_attention_backward", "sinusoidal_positions"),
    # softmax, attention, split_heads, concat_heads and decode_step are given in a locked cell
    "08": lambda: _reference("softmax", "scaled_dot_product_attention", "split_heads", "concat_heads", "decode_step",
                                   "rope", "alibi_bias", "sliding_window_mask", "streaming_decode", "mla_attention",
                                   "mla_absorbed", "kv_cache_elements_per_token"),
    # the pieces of lessons 01-08 and the model's code (gelu, mlp, block_forward, empty_cache, model_step,
    # gpt_logits) are given in locked cells
    "09": lambda: _reference("softmax", "scaled_dot_product_attention", "split_heads", "concat_heads",
                                   "multi_head_attention", "softmax_backward", "scaled_dot_product_attention_backward",
                                   "multi_head_attention_backward", "kv_cache_append", "decode_step", "gelu", "mlp",
                                   "layer_norm", "layer_norm_backward", "gelu_backward", "mlp_backward",
                                   "cross_entropy", "embedding_backward", "block_forward", "block_backward",
                                   "empty_cache", "model_step", "gpt_logits", "sample_next", "generate",
                                   "ablate_head", "k_composition"),
}


def stand_ins_of(lesson: str) -> dict:
    """{learner function name: its reference stand-in} of one lesson (``06_going_further``)."""
    number = course.lesson_number(lesson)
    if number not in _BY_LESSON:
        raise KeyError(f"no stand-ins are declared for {lesson}: add them to autograder/checks/registry.py")
    return _BY_LESSON[number]()


# ------------------------------------------------------------------ the tests, by (lesson, grade_id)

_TESTS: dict = {}


def hidden_test(*, uses, helpers=(), visible_check=None, together=(), name=None, forbids=(), because=""):
    """Register the decorated function as the hidden test of the cell ``name`` (default: the function's name).
    ``forbids``: functions the lesson's text tells the graded ones not to call, ``because`` its reason in a few
    words (the refusal says it)."""
    if bool(forbids) != bool(because):
        raise ValueError("a hidden test that forbids calls says why (because=...), and only then")

    def register(function):
        lesson = course.lesson_numbered(function.__module__)  # declared in autograder/checks/lessonNN.py
        test = HiddenTest(lesson, name or function.__name__, function, tuple(uses), tuple(helpers), visible_check,
                          tuple(together), tuple(forbids), " ".join(because.split()), course.lesson_number(lesson))
        _TESTS[(lesson, test.name)] = test
        return function

    return register


def tests_of(lesson: str) -> dict:
    """{grade_id: HiddenTest} of one lesson (``01_warmup``); {} for a notebook that is no lesson of the course."""
    if lesson not in course.lesson_names():
        return {}
    importlib.import_module(f"autograder.checks.lesson{course.lesson_number(lesson)}")
    return {name: test for (les, name), test in _TESTS.items() if les == lesson}


def find(lesson: str, grade_id: str):
    return tests_of(lesson).get(grade_id)


def all_tests() -> dict:
    for lesson in course.lesson_names():
        tests_of(lesson)
    return dict(_TESTS)


def run_here(grade_id: str, namespace: dict) -> HiddenTest:
    """Run a hidden test in this process, on the notebook's own namespace (an instructor's kernel, nbval)."""
    for lesson in course.lesson_names():
        test = find(lesson, grade_id)
        if test is not None:
            missing = object()
            values = {n: namespace.get(n, missing) for n in test.names}
            absent = [n for n, v in values.items() if v is missing]
            if absent:
                raise NameError(f"{', '.join(absent)} is not defined: run the cells above this one first")
            test(values)
            return test
    raise LookupError(f"no hidden test is registered for the cell {grade_id!r}")
