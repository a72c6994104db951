"""What an executed notebook shows: its errors, what it printed to stderr, what its self-checks printed.
(``tests/helpers/learner_venv.py`` runs the student notebooks.)"""

import ast


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


def self_check_cells(nb):
    """(grade_id, printed text) of every code cell that calls a self-check (``check_...(...)``)."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "check_" not in cell.source:
            continue
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", "").startswith("check_")]
        if calls:
            printed = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            found.append((cell.metadata.get("nbgrader", {}).get("grade_id"), printed))
    return found
