"""The reference stand-in of every function a lesson's notebook has the learner write, paste or use, by lesson.

While a hidden test runs, every one of these functions that the test does not grade is replaced, in the learner's
namespace, by its stand-in (``HiddenTest.__call__`` in ``registry.py``): the grader answers each call with the
stand-in's result, or refuses it (below). So a graded cell's score depends only on the function it grades: a slip in
a function pasted from an earlier lesson, in an ungraded exercise, or in another graded function of the same lesson
costs nothing here (the last costs its own tests). ``tests/unit/test_isolation.py`` checks that every function
defined in a lesson's answer cells has a stand-in. The stand-ins run in the grader's process only: the kernel never
holds an answer.

A stand-in answers for any function the graded one calls, except one the lesson's text tells it not to call
(``@hidden_test(forbids=..., because=...)``: ``tiled_attention`` must not hand its work to a function that forms the
whole (T, T) matrix, ``softmax_backward`` must not build the Jacobian, the decoding loop must go through
``decode_step``). That stand-in is a ``Refusal`` while the test
runs: a call raises ``Refused``, which names the function and the lesson's reason, and the test fails whatever the
learner's code does with the error afterwards (``autograder/grading/pipeline/hidden_tests.py`` keeps the refusal in
the grader). A graded function earns nothing for the work the lesson asked of it and a stand-in did.
"""

from __future__ import annotations

from autograder import course, reference
from autograder.checks.verdict import CallRefused

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
}


class Refused(CallRefused):
    """A graded function called a function of the lesson that the lesson tells it not to call (raised by a
    ``Refusal``)."""

    def __init__(self, name: str, graded: str, because: str = ""):
        why = f" ({because})" if because else ""
        super().__init__(f"{graded} called {name}, which the lesson asks it not to call{why}: while its hidden test "
                         f"runs, {name} refuses to answer, so {graded} must do that work itself")
        self.name, self.graded, self.because = name, graded, because


class Refusal:
    """The stand-in of ``name`` while a test grades ``graded``, which the lesson tells not to call it (``because``).
    ``calls`` (a list) keeps every refusal, so the test fails even when the learner's code caught the error."""

    def __init__(self, name: str, graded: str, because: str = "", calls=None):
        self.__name__ = self.name = name
        self.graded = graded
        self.because = because
        self.calls = calls if calls is not None else []

    def __call__(self, *args, **kwargs):
        refused = Refused(self.name, self.graded, self.because)
        self.calls.append(refused)
        raise refused

    def __repr__(self):
        return f"<{self.name}, refused to {self.graded}>"


def of(lesson: str) -> dict:
    """{learner function name: its reference stand-in} of one lesson (``06_going_further``)."""
    number = course.lesson_number(lesson)
    if number not in _BY_LESSON:
        raise KeyError(f"no stand-ins are declared for {lesson}: add them to autograder/checks/stand_ins.py")
    return _BY_LESSON[number]()
