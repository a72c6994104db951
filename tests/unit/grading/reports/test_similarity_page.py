"""``similarity.html`` shows a learner's code, names and answers as inert text, and ``similarity.csv`` cannot start a
formula (``autograder/grading/reports/similarity_page.py``)."""

from __future__ import annotations

import csv

from autograder.grading.records.settings import Settings
from autograder.grading.reports import similarity_page
from autograder.grading.similarity import code_prints, evidence, pairs

HOSTILE = '''\
def merge_heads(x):
    """</pre><script>alert("code")</script><img src=x onerror=alert(1)>"""
    parts = [x[..., h, :, :] for h in range(x.shape[-3])]
    joined = np.concatenate(parts, axis=-1)
    scaled = np.tanh(joined) * np.cumsum(joined, axis=0) - np.sort(joined, axis=-1)
    return np.clip(scaled, -1, 1) + np.sqrt(np.abs(joined)).mean() * np.flip(joined, axis=0)
'''


def _works():
    names = ['=HYPERLINK("http://x")', "<b>bold</b>"]
    return [evidence.Work(name, "05_exercises", code={"merge_heads": HOSTILE},
                          prints={"merge_heads": set(code_prints.prints(HOSTILE))},
                          answers={"explain_reshape": "<script>alert('answer')</script> " * 3})
            for name in names]


def test_the_page_runs_nothing_a_learner_wrote(tmp_path):
    s = Settings(out=str(tmp_path), lessons=["05_exercises"])
    works = _works()
    found = [pairs.search("05_exercises", works, expected=frozenset())]
    assert found[0].pairs, "the two notebooks are the same: a listed pair"
    html = similarity_page.page(s, found, {"05_exercises": works})
    body = html.split("<body>", 1)[1]
    assert "<script" not in html and "<img" not in body and "<b>bold" not in body  # no tag a learner wrote
    assert "&lt;/pre&gt;&lt;script&gt;" in body and "&lt;img src=x onerror=alert(1)&gt;" in body  # shown as text
    assert "&lt;b&gt;bold&lt;/b&gt;" in body and "Content-Security-Policy" in html


def test_the_csv_cannot_start_a_formula(tmp_path):
    s = Settings(out=str(tmp_path), lessons=["05_exercises"])
    found = [pairs.search("05_exercises", _works(), expected=frozenset())]
    with similarity_page.write_csv(s, found).open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(not r["student"].startswith("=") and not r["other student"].startswith("=") for r in rows)
