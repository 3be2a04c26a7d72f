"""Third pass of the carry-over (issue 66): each cpu run whose key holds under fad5b2c's
notebook reading (package references reduced within their own cell) is keyed under the
reading that takes the names the package's imports bind from every cell, as the kernel does."""
import ast, json
from datetime import datetime, timezone
from pathlib import Path
from dyckbook import recipe
from dyckbook import results as R
from dyckbook.pipeline import runner


def old_computing(cell):
    source = "".join(cell["source"])
    if cell["cell_type"] != "code":
        return source
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    modules, bound = runner._package_modules(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name.split(".")[0]: None for a in node.names
                      if a.name.split(".")[0] == "dyckbook"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dyckbook":
            bound |= {a.asname or a.name: None if a.name in modules else a.name
                      for a in node.names}
    return ast.unparse(runner._PackageReferences(bound).visit(tree))


def old_notebook_hash(path):
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    return runner._digest([(c["cell_type"], old_computing(c)) for c in cells])


stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
runs, every, root = runner._profile_runs("cpu", None, None)
for run in runs:
    record = runner._record(run, root)
    inputs = runner.run_inputs(run, every, root)
    old = recipe.key("run", {"params": recipe.expanded(run.params),
                             "notebook": old_notebook_hash(run.notebook.path),
                             "inputs": dict(inputs)})
    ok = record.get("status") == "ok" and record.get("hash") == old and \
        runner.file_hashes(runner._folder(run, root)) == record.get("files")
    if not ok:
        print(run.name, "NOT carried")
        continue
    record["carried_over"] = {**record["carried_over"], "date": stamp,
                              "rule": "recipe + RESULTS_VERSION (issue 66); notebooks read "
                                      "with references through the package reduced to the "
                                      "names they reach, bound from every cell"}
    record["hash"] = runner.run_hash(run, inputs)
    record["notebook_hash"] = runner.notebook_hash(run.notebook.path)
    R.write_json(runner._folder(run, root) / runner.RECORD, record)
    print(run.name, "carried")
