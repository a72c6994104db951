"""Lesson 08 graded for real, in the lessons' class (``tests/helpers/lessons_class.py``): a completed, an untouched, and a notebook whose RoPE is written with
complex numbers and whose absorbed MLA is written with einsum get full and zero marks; scores read from the
gradebook. Every catalogued bug of the lesson is graded by tests/grading/test_mutations.py."""

import pytest

from autograder.course import answers
import lessons_class
from grading_helpers import lost

LESSON = "08_todays_models"
POINTS = {"setup": 0, "rope_values": 3, "alibi_values": 2, "window_values": 2, "streaming_values": 3,
          "mla_values": 3, "absorbed_values": 2, "absorbed_memory": 1, "cache_values": 2}
AUTOGRADED = sum(POINTS.values())
TOTAL = AUTOGRADED + 2  # and the derivation of RoPE's relative positions, marked by hand (rope_relative)
pytestmark = pytest.mark.grading

COMPLEX_ROPE = """
def rope(x, positions, base=10000.0, interleaved=True):
    d = x.shape[-1]
    theta = base ** (-2.0 * np.arange(d // 2) / d)
    turn = np.exp(1j * np.outer(positions, theta))
    if interleaved:
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * turn
        return np.stack([z.real, z.imag], axis=-1).reshape(x.shape).astype(x.dtype)
    z = (x[..., : d // 2] + 1j * x[..., d // 2:]) * turn
    return np.concatenate([z.real, z.imag], axis=-1).astype(x.dtype)
"""
EINSUM_ABSORBED = """
def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
    T_q, T = x.shape[-2], c_kv.shape[-2]
    d_c, d_rope = c_kv.shape[-1], k_r.shape[-1]
    d_head = W_UK.shape[1] // n_heads
    uk = W_UK.reshape(d_c, n_heads, d_head)
    uv = W_UV.reshape(d_c, n_heads, d_head)
    q = (x @ W_Q).reshape(*x.shape[:-1], n_heads, d_head)
    q_lat = np.einsum("...thd,chd->...htc", q, uk)
    q_r = rope(split_heads(x @ W_QR, n_heads), np.arange(T - T_q, T))
    s = np.einsum("...htc,...sc->...hts", q_lat, c_kv) + np.einsum("...htr,...sr->...hts", q_r, k_r)
    s = s / math.sqrt(d_head + d_rope)
    if mask is not None:
        s = np.where(mask, -np.inf, s)
    w = softmax(s)
    mixed = np.einsum("...hts,...sc->...htc", w, c_kv)
    out = np.einsum("...htc,chd,hde->...te", mixed, uv, W_O.reshape(n_heads, d_head, -1))
    return out, w
"""


def submissions():
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "written_differently": answers.fill(LESSON, {"rope": COMPLEX_ROPE, "mla_absorbed": EINSUM_ABSORBED}),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_the_lesson_has_the_tests_and_points_we_think(results):
    assert {gid: mx for gid, (_, mx) in results["complete"]["tests"].items()} == POINTS


def test_completed_and_differently_written_notebooks_get_full_marks(results):
    for student in ("complete", "written_differently"):
        r = results[student]
        assert tuple(r["total"]) == (AUTOGRADED, TOTAL), (student, r["tests"], r["errors"])


def test_untouched_notebook_gets_zero_and_is_told_what_to_write(results):
    r = results["untouched"]
    assert tuple(r["total"]) == (0.0, TOTAL)
    assert lost(r) == set(POINTS) - {"setup"} | {"rope_relative"}  # an unanswered derivation scores 0 at once
    assert "not implemented yet" in r["feedback"]
