"""Execute a notebook with nbclient the way a learner's kernel would see it (helper module on the path)."""

import nbformat
from nbclient import NotebookClient

from autograder import course


def execute(nb, cwd, timeout=120):
    """Run every cell, keeping going after errors; return the executed notebook."""
    nb = nbformat.from_dict(nb)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    env = course.nbgrader_env()
    client.execute(env=env)
    return nb


def errors(nb):
    """(cell index, grade_id or None, ename, evalue) of every error output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append((i, cell.metadata.get("nbgrader", {}).get("grade_id"), out["ename"], out["evalue"]))
    return found


def stderr_text(nb):
    return "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs", [])
                   if out.get("output_type") == "stream" and out.get("name") == "stderr")
